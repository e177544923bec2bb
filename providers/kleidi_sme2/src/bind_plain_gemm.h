// The binding of the plain GEMM families, (1) fp32 and (5) fp16, which share their Python API:
//   pack_gemm_<t>(b, bias=None, *, transpose_b=False, variant=None) -> PackedRhs
//   gemm_<t>(a, packed, *, clamp_min=-inf, clamp_max=inf, threads=1) -> array [M, N]
// Each register_gemm_<t>.cpp supplies an Api traits struct: the family, numpy dtype, element
// type and driver functions, names and docstrings.
#pragma once

#include <pybind11/stl.h>

#include <limits>
#include <optional>
#include <string>

#include "bind_util.h"

namespace onnxplex::kleidi::bind {

template <class Api>
void register_plain_gemm(py::module_& m) {
  using T = typename Api::Elem;
  constexpr float inf = std::numeric_limits<float>::infinity();
  m.def(Api::pack_name, [](py::object b, py::object bias, bool transpose_b,
                           std::optional<std::string> variant) {
    const char* fn = Api::pack_name;
    const py::array bw = checked(b, fn, "b", 2, Api::dtype());
    const size_t k = bw.shape(transpose_b ? 1 : 0), n = bw.shape(transpose_b ? 0 : 1);
    py::array bb;
    if (!bias.is_none()) {
      bb = checked(bias, fn, "bias", 1, Api::dtype());
      expect_dim(bb, 0, n, fn, "bias");
    }
    const Variant v = variant_arg(Api::family, variant);
    py::gil_scoped_release release;
    return Api::pack(v, n, k, ptr<T>(bw), transpose_b ? 1 : n, transpose_b ? k : 1,
                     bias.is_none() ? nullptr : ptr<T>(bb));
  }, py::arg("b"), py::arg("bias") = py::none(), py::kw_only(), py::arg("transpose_b") = false,
     py::arg("variant") = py::none(), Api::pack_doc);

  m.def(Api::run_name, [](py::object a, const PackedRhs& w, float clamp_min, float clamp_max,
                          int threads) {
    const char* fn = Api::run_name;
    expect_family(w, Api::family, fn);
    const py::array aa = checked(a, fn, "a", 2, Api::dtype());
    expect_dim(aa, 1, w.k, fn, "a (K of the packed weights)");
    const size_t m = aa.shape(0), nth = threads_arg(threads);
    py::array y(Api::dtype(), {static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(w.n)});
    T* out = static_cast<T*>(y.mutable_data());
    {
      py::gil_scoped_release release;
      Api::run(w, m, ptr<T>(aa), w.k * sizeof(T), out, w.n * sizeof(T), clamp_min, clamp_max,
               nth);
    }
    return y;
  }, py::arg("a"), py::arg("packed"), py::kw_only(), py::arg("clamp_min") = -inf,
     py::arg("clamp_max") = inf, py::arg("threads") = 1, Api::run_doc);
}

}  // namespace onnxplex::kleidi::bind
