// Family (3): dynamic per-row int8 activations x per-channel symmetric int8 weights -> fp32,
// and the qai8dx quantizer itself (exposed so tests can check its numerics directly).
#include <pybind11/stl.h>

#include <limits>

#include "bind_util.h"

namespace onnxplex::kleidi::bind {

void register_qgemm_qsi8cx(py::module_& m) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  m.def("quantize_qai8dx", [](py::object a) {
    const char* fn = "quantize_qai8dx";
    const py::array aa = checked<float>(a, fn, "a", 2);
    const size_t rows = aa.shape(0), k = aa.shape(1);
    if (k == 0) throw py::value_error("quantize_qai8dx: K must be positive");
    py::array_t<int8_t> q({rows, k});
    py::array_t<int32_t> neg_zp(static_cast<py::ssize_t>(rows));
    py::array_t<float> scale(static_cast<py::ssize_t>(rows));
    int8_t* qp = q.mutable_data();
    int32_t* zp = neg_zp.mutable_data();
    float* sp = scale.mutable_data();
    {
      py::gil_scoped_release release;
      quantize_qai8dx(rows, k, ptr<float>(aa), k * sizeof(float), qp, zp, sp);
    }
    return py::make_tuple(q, neg_zp, scale);
  }, py::arg("a"),
     "Per-row asymmetric int8 quantization as the qai8dx LHS packer does it: returns "
     "(q int8 [M, K], neg_zero_point int32 [M], scale float32 [M]); a ~= scale * (q + neg_zp).");

  m.def("pack_qsi8cx", [](py::object w, py::object scales, py::object bias, bool transpose_b,
                          std::optional<std::string> variant) {
    const char* fn = "pack_qsi8cx";
    const py::array ww = checked<int8_t>(w, fn, "w", 2);
    const size_t k = ww.shape(transpose_b ? 1 : 0), n = ww.shape(transpose_b ? 0 : 1);
    const py::array ss = checked<float>(scales, fn, "scales", 1);
    expect_dim(ss, 0, n, fn, "scales");
    py::array bb;
    if (!bias.is_none()) {
      bb = checked<float>(bias, fn, "bias", 1);
      expect_dim(bb, 0, n, fn, "bias");
    }
    const Variant v = variant_arg(Family::qgemm_qsi8cx, variant);
    py::gil_scoped_release release;
    return pack_qsi8cx(v, n, k, ptr<int8_t>(ww), transpose_b ? 1 : n, transpose_b ? k : 1,
                       ptr<float>(ss), bias.is_none() ? nullptr : ptr<float>(bb));
  }, py::arg("w"), py::arg("scales"), py::arg("bias") = py::none(), py::kw_only(),
     py::arg("transpose_b") = false, py::arg("variant") = py::none(),
     "Pack symmetric int8 weights w [K, N] ([N, K] if transpose_b), per-channel float32 "
     "scales [N] and bias [N] for qgemm_qsi8cx.");

  m.def("qgemm_qsi8cx", [](py::object a, const PackedRhs& w, float clamp_min, float clamp_max,
                           int threads) {
    const char* fn = "qgemm_qsi8cx";
    expect_family(w, Family::qgemm_qsi8cx, fn);
    const py::array aa = checked<float>(a, fn, "a", 2);
    expect_dim(aa, 1, w.k, fn, "a (K of the packed weights)");
    const size_t m = aa.shape(0), nth = threads_arg(threads);
    py::array_t<float> y({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(w.n)});
    float* out = y.mutable_data();
    {
      py::gil_scoped_release release;
      qgemm_qsi8cx(w, m, ptr<float>(aa), w.k * sizeof(float), out, w.n * sizeof(float),
                   clamp_min, clamp_max, nth);
    }
    return y;
  }, py::arg("a"), py::arg("packed"), py::kw_only(), py::arg("clamp_min") = -inf,
     py::arg("clamp_max") = inf, py::arg("threads") = 1,
     "Dynamic int8 matmul: a float32 [M, K] quantized per row (qai8dx), times the packed int8 "
     "weights, plus bias, clamped; returns float32 [M, N].");
}

}  // namespace onnxplex::kleidi::bind
