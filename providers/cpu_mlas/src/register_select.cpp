// Bindings of the selection kernels: TopK over the last axis (topk.h), pairwise distances
// (cdist.h), NonMaxSuppression's greedy selection (nms.h).
#include <string>
#include <vector>

#include "bind_util.h"
#include "cdist.h"
#include "nms.h"
#include "topk.h"

namespace onnxplex::mlas::bind {

namespace {

// Below this many elements the selection runs holding the GIL.
constexpr size_t kKeepGilElements = 1 << 14;

template <typename T>
py::tuple topk_typed(const py::array& x_in, size_t k, bool largest, size_t threads) {
  const auto x = py::array_t<T, py::array::c_style>::ensure(x_in);
  const auto rank = static_cast<size_t>(x.ndim());
  const size_t n = static_cast<size_t>(x.shape(rank - 1));
  if (k > n) throw py::value_error("k is larger than the last axis");
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + rank);
  shape.back() = static_cast<py::ssize_t>(k);
  py::array_t<T> values(shape);
  py::array_t<int64_t> indices(shape);
  const size_t rows = n == 0 ? 0 : static_cast<size_t>(x.size()) / n;
  const T* xp = x.data();
  T* vp = values.mutable_data();
  int64_t* ip = indices.mutable_data();
  if (rows * n < kKeepGilElements) {
    topk_rows(xp, rows, n, k, largest, vp, ip, 1);
  } else {
    py::gil_scoped_release release;
    topk_rows(xp, rows, n, k, largest, vp, ip, threads);
  }
  return py::make_tuple(values, indices);
}

template <typename T>
py::object cdist_typed(const py::array& a_in, const py::array& b_in, bool root,
                       size_t threads) {
  const auto a = py::array_t<T, py::array::c_style>::ensure(a_in);
  const auto b = py::array_t<T, py::array::c_style>::ensure(b_in);
  if (!a || !b) return py::none();
  const auto m = static_cast<size_t>(a.shape(0)), n = static_cast<size_t>(b.shape(0));
  const auto k = static_cast<size_t>(a.shape(1));
  py::array_t<T> out({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(n)});
  const T* ap = a.data();
  const T* bp = b.data();
  T* op = out.mutable_data();
  if (m * n * k < kKeepGilElements) {
    sqdist_rows(ap, m, bp, n, k, root, op, 1);
  } else {
    py::gil_scoped_release release;
    sqdist_rows(ap, m, bp, n, k, root, op, threads);
  }
  return out;
}

}  // namespace

void register_select(py::module_& m) {
  m.def("topk", [](const py::array& x, size_t k, bool largest, size_t threads) -> py::object {
    if (x.ndim() < 1 || !(x.flags() & py::array::c_style)) {
      throw py::type_error("x must be a C-contiguous array of rank >= 1");
    }
    const py::dtype dt = x.dtype();
    if (!dt.attr("isnative").cast<bool>()) return py::none();
    const char kind = dt.kind();
    const auto size = dt.itemsize();
    if (kind == 'f' && size == 4) return topk_typed<float>(x, k, largest, threads);
    if (kind == 'f' && size == 8) return topk_typed<double>(x, k, largest, threads);
    if (kind == 'i' && size == 8) return topk_typed<int64_t>(x, k, largest, threads);
    if (kind == 'i' && size == 4) return topk_typed<int32_t>(x, k, largest, threads);
    return py::none();
  }, py::arg("x"), py::arg("k"), py::arg("largest"), py::arg("threads"),
     "(values, indices) of the k largest (or smallest) elements along x's last axis, best "
     "first, ties to the lower index; None for a dtype it does not take (float32/64, "
     "int32/64). x must hold no NaN.");

  m.def("cdist", [](const py::array& a, const py::array& b, bool root,
                    size_t threads) -> py::object {
    if (a.ndim() != 2 || b.ndim() != 2 || a.shape(1) != b.shape(1)) {
      throw py::value_error("a and b must be matrices with as many columns");
    }
    const py::dtype dt = a.dtype();
    if (!dt.is(b.dtype()) && !dt.equal(b.dtype())) return py::none();
    if (dt.kind() == 'f' && dt.itemsize() == 4) return cdist_typed<float>(a, b, root, threads);
    if (dt.kind() == 'f' && dt.itemsize() == 8) return cdist_typed<double>(a, b, root, threads);
    return py::none();
  }, py::arg("a"), py::arg("b"), py::arg("root"), py::arg("threads"),
     "[m, n] squared Euclidean distances between the rows of a [m, k] and b [n, k] "
     "(differences squared and summed in feature order; their square roots when root); None "
     "for other than two float32 or two float64 matrices.");

  m.def("nms", [](const py::array& corners_in, const py::array& scores_in, int64_t max_out,
                  double iou_threshold, py::object score_threshold) {
    const auto corners = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(
        corners_in);
    const auto scores = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(
        scores_in);
    if (!corners || !scores || corners.ndim() != 3 || corners.shape(2) != 4 ||
        scores.ndim() != 3 || scores.shape(0) != corners.shape(0) ||
        scores.shape(2) != corners.shape(1)) {
      throw py::value_error("corners must be [nb, n, 4] and scores [nb, nc, n]");
    }
    const bool has_t = !score_threshold.is_none();
    const double t = has_t ? score_threshold.cast<double>() : 0.0;
    std::vector<int64_t> out;
    {
      py::gil_scoped_release release;
      nms(corners.data(), scores.data(), static_cast<size_t>(scores.shape(0)),
          static_cast<size_t>(scores.shape(1)), static_cast<size_t>(scores.shape(2)), max_out,
          iou_threshold, has_t, t, out);
    }
    py::array_t<int64_t> result({static_cast<py::ssize_t>(out.size() / 3), py::ssize_t{3}});
    std::copy(out.begin(), out.end(), result.mutable_data());
    return result;
  }, py::arg("corners"), py::arg("scores"), py::arg("max_out"), py::arg("iou_threshold"),
     py::arg("score_threshold"),
     "NonMaxSuppression's selected (batch, class, box) triples [K, 3] int64 from corners "
     "[nb, n, 4] (y1, x1, y2, x2, ordered) and scores [nb, nc, n], in double (nms.h).");
}

}  // namespace onnxplex::mlas::bind
