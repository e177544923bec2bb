// Bindings of the row-wise kernels (rows.h): float32 [n, f] in, a new array out.
#include <string>
#include <vector>

#include "bind_util.h"
#include "rows.h"

namespace onnxplex::mlas::bind {

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Below this many values the call keeps the GIL.
constexpr size_t kKeepGilValues = 1 << 14;

F32 rows_of(const py::array& x_in, size_t& n, size_t& f) {
  if (x_in.ndim() != 2 || !is_float32(x_in)) {
    throw py::type_error("x must be a float32 matrix");
  }
  F32 x = F32::ensure(x_in);
  n = static_cast<size_t>(x.shape(0));
  f = static_cast<size_t>(x.shape(1));
  return x;
}

F32 per_column(const py::array& v_in, size_t f, const char* what) {
  F32 v = F32::ensure(v_in);
  if (!v || static_cast<size_t>(v.size()) != f) {
    throw py::value_error(std::string(what) + " must have one float32 value per column");
  }
  return v;
}

template <typename Fn>
py::array run(size_t n, size_t f, Fn&& fn) {
  F32 y({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(f)});
  float* yp = y.mutable_data();
  if (n * f < kKeepGilValues) {
    fn(yp);
  } else {
    py::gil_scoped_release release;
    fn(yp);
  }
  return y;
}

}  // namespace

void register_rows(py::module_& m) {
  m.def("scale_rows_f32", [](const py::array& x_in, const py::array& offset_in,
                             const py::array& scale_in) {
    size_t n = 0, f = 0;
    const F32 x = rows_of(x_in, n, f);
    const F32 offset = per_column(offset_in, f, "offset");
    const F32 scale = per_column(scale_in, f, "scale");
    return run(n, f, [&](float* y) {
      scale_rows(x.data(), n, f, offset.data(), scale.data(), y);
    });
  }, py::arg("x"), py::arg("offset"), py::arg("scale"),
     "Scaler: (x - offset) * scale per column, in float32.");

  m.def("impute_rows_f32", [](const py::array& x_in, const py::array& fill_in, float replaced,
                              bool nan) {
    size_t n = 0, f = 0;
    const F32 x = rows_of(x_in, n, f);
    const F32 fill = per_column(fill_in, f, "fill");
    return run(n, f, [&](float* y) {
      impute_rows(x.data(), n, f, fill.data(), replaced, nan, y);
    });
  }, py::arg("x"), py::arg("fill"), py::arg("replaced"), py::arg("nan"),
     "Imputer: the column's fill where x equals `replaced` (is NaN when `nan`).");

  m.def("normalize_rows_f32", [](const py::array& x_in, int norm) {
    size_t n = 0, f = 0;
    const F32 x = rows_of(x_in, n, f);
    if (norm < 0 || norm > 2) throw py::value_error("norm must be 0 (MAX), 1 (L1) or 2 (L2)");
    if (f == 0) throw py::value_error("x must have columns");
    return run(n, f, [&](float* y) {
      normalize_rows(x.data(), n, f, static_cast<RowNorm>(norm), y);
    });
  }, py::arg("x"), py::arg("norm"),
     "Normalizer: rows divided by their MAX (0), L1 (1) or L2 (2) norm; zero-norm rows copied.");

  m.def("sum_mid_f32", [](const py::array& x_in, bool mean) {
    if (x_in.ndim() != 3 || !is_float32(x_in) || x_in.shape(1) == 0) {
      throw py::type_error("x must be a float32 array [outer, mid, inner] with mid >= 1");
    }
    const F32 x = F32::ensure(x_in);
    const auto outer = static_cast<size_t>(x.shape(0)), mid = static_cast<size_t>(x.shape(1));
    const auto inner = static_cast<size_t>(x.shape(2));
    return run(outer, inner, [&](float* y) { sum_mid(x.data(), outer, mid, inner, mean, y); });
  }, py::arg("x"), py::arg("mean"),
     "ReduceSum / ReduceMean over the middle axis of a float32 [outer, mid, inner] array "
     "(rows added in order, as numpy adds them; divided by mid when `mean`): [outer, inner].");

  m.def("logsumexp_rows_f32", [](const py::array& x_in) {
    size_t n = 0, f = 0;
    const F32 x = rows_of(x_in, n, f);
    if (f == 0) throw py::value_error("x must have columns");
    F32 y(std::vector<py::ssize_t>{static_cast<py::ssize_t>(n)});
    logsumexp_rows(x.data(), n, f, y.mutable_data());
    return y;
  }, py::arg("x"),
     "ReduceLogSumExp over the last axis of a float32 matrix: log(sum(exp(row))) in double, "
     "rounded to float32 (meant for small inputs: the GIL is held).");
}

}  // namespace onnxplex::mlas::bind
