// Family (1): fp32 GEMM with bias and clamp.
#include <pybind11/stl.h>

#include <limits>

#include "bind_util.h"

namespace onnxplex::kleidi::bind {

void register_gemm_f32(py::module_& m) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  m.def("pack_gemm_f32", [](py::object b, py::object bias, bool transpose_b,
                            std::optional<std::string> variant) {
    const char* fn = "pack_gemm_f32";
    const py::array bw = checked<float>(b, fn, "b", 2);
    const size_t k = bw.shape(transpose_b ? 1 : 0), n = bw.shape(transpose_b ? 0 : 1);
    py::array bb;
    if (!bias.is_none()) {
      bb = checked<float>(bias, fn, "bias", 1);
      expect_dim(bb, 0, n, fn, "bias");
    }
    const Variant v = variant_arg(Family::gemm_f32, variant);
    py::gil_scoped_release release;
    return pack_gemm_f32(v, n, k, ptr<float>(bw), transpose_b ? 1 : n, transpose_b ? k : 1,
                         bias.is_none() ? nullptr : ptr<float>(bb));
  }, py::arg("b"), py::arg("bias") = py::none(), py::kw_only(), py::arg("transpose_b") = false,
     py::arg("variant") = py::none(),
     "Pack float32 weights b [K, N] ([N, K] if transpose_b) and bias [N] for gemm_f32.");

  m.def("gemm_f32", [](py::object a, const PackedRhs& w, float clamp_min, float clamp_max,
                       int threads) {
    const char* fn = "gemm_f32";
    expect_family(w, Family::gemm_f32, fn);
    const py::array aa = checked<float>(a, fn, "a", 2);
    expect_dim(aa, 1, w.k, fn, "a (K of the packed weights)");
    const size_t m = aa.shape(0), nth = threads_arg(threads);
    py::array_t<float> y({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(w.n)});
    float* out = y.mutable_data();
    {
      py::gil_scoped_release release;
      gemm_f32(w, m, ptr<float>(aa), w.k * sizeof(float), out, w.n * sizeof(float), clamp_min,
               clamp_max, nth);
    }
    return y;
  }, py::arg("a"), py::arg("packed"), py::kw_only(), py::arg("clamp_min") = -inf,
     py::arg("clamp_max") = inf, py::arg("threads") = 1,
     "clamp(a @ B + bias): a float32 [M, K] C-contiguous, returns float32 [M, N].");
}

}  // namespace onnxplex::kleidi::bind
