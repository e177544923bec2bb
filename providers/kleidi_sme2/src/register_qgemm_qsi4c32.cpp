// Family (4): dynamic per-row int8 activations x blockwise (32) signed int4 weights -> fp32,
// and the conversion from onnxruntime's MatMulNBits layout.
#include <pybind11/stl.h>

#include <limits>

#include "bind_util.h"
#include "pack.h"

namespace onnxplex::kleidi::bind {

void register_qgemm_qsi4c32(py::module_& m) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  m.def("matmulnbits_to_qsu4c32", [](py::object b, py::object scales, py::object zero_points,
                                     size_t k, size_t block_size) {
    const char* fn = "matmulnbits_to_qsu4c32";
    const py::array bb = checked<uint8_t>(b, fn, "b", 3);
    const size_t n = bb.shape(0), n_blocks = div_up(k, block_size == 0 ? 1 : block_size);
    if (block_size == 0 || block_size % 32 != 0) {
      throw py::value_error(std::string(fn) + ": block_size=" + std::to_string(block_size) +
                            " is not a multiple of 32");
    }
    expect_dim(bb, 1, n_blocks, fn, "b (ceil(K / block_size))");
    expect_dim(bb, 2, block_size / 2, fn, "b (block_size / 2 bytes per block)");
    const py::array ss = checked<float>(scales, fn, "scales", -1);
    if (static_cast<size_t>(ss.size()) != n * n_blocks) {
      throw py::value_error(std::string(fn) + ": scales must hold N * ceil(K / block_size) = " +
                            std::to_string(n * n_blocks) + " values, got " +
                            std::to_string(ss.size()));
    }
    py::array zz;
    if (!zero_points.is_none()) {
      zz = checked<uint8_t>(zero_points, fn, "zero_points", -1);
      if (static_cast<size_t>(zz.size()) != n * div_up(n_blocks, 2)) {
        throw py::value_error(std::string(fn) +
                              ": zero_points must be uint8 [N * ceil(n_blocks / 2)] (packed "
                              "4-bit); float zero points are not supported");
      }
    }
    if (k == 0 || k % 32 != 0) {
      throw py::value_error(std::string(fn) + ": K=" + std::to_string(k) +
                            " is not a positive multiple of the int4 block length 32");
    }
    py::array_t<uint8_t> nib({n, k / 2});
    py::array_t<float> out_scales({n, k / 32});
    uint8_t* np_ = nib.mutable_data();
    float* sp = out_scales.mutable_data();
    {
      py::gil_scoped_release release;
      matmulnbits_to_qsu4c32(n, k, block_size, ptr<uint8_t>(bb), ptr<float>(ss),
                             zero_points.is_none() ? nullptr : ptr<uint8_t>(zz), np_, sp);
    }
    return py::make_tuple(nib, out_scales);
  }, py::arg("b"), py::arg("scales"), py::arg("zero_points"), py::kw_only(), py::arg("K"),
     py::arg("block_size"),
     "onnxruntime MatMulNBits (bits=4) B [N, n_blocks, block_size/2], scales, optional packed "
     "uint8 zero points (all must be 8) -> (nibbles uint8 [N, K/2], scales float32 [N, K/32]) "
     "for pack_qsi4c32.");

  m.def("pack_qsi4c32", [](py::object nibbles, py::object scales, py::object bias,
                           std::optional<std::string> variant) {
    const char* fn = "pack_qsi4c32";
    const py::array nn = checked<uint8_t>(nibbles, fn, "nibbles", 2);
    const size_t n = nn.shape(0), k = 2 * static_cast<size_t>(nn.shape(1));
    const py::array ss = checked<float>(scales, fn, "scales", 2);
    expect_dim(ss, 0, n, fn, "scales");
    if (k % 32 != 0 || k == 0) {
      throw py::value_error(std::string(fn) + ": K=" + std::to_string(k) +
                            " is not a positive multiple of the int4 block length 32");
    }
    expect_dim(ss, 1, k / 32, fn, "scales (K / 32 blocks)");
    py::array bb;
    if (!bias.is_none()) {
      bb = checked<float>(bias, fn, "bias", 1);
      expect_dim(bb, 0, n, fn, "bias");
    }
    const Variant v = variant_arg(Family::qgemm_qsi4c32, variant);
    py::gil_scoped_release release;
    return pack_qsi4c32(v, n, k, ptr<uint8_t>(nn), k / 2, ptr<float>(ss), k / 32,
                        bias.is_none() ? nullptr : ptr<float>(bb));
  }, py::arg("nibbles"), py::arg("scales"), py::arg("bias") = py::none(), py::kw_only(),
     py::arg("variant") = py::none(),
     "Pack int4 weights (nibbles uint8 [N, K/2], even k in the low nibble, value = nibble - 8; "
     "scales float32 [N, K/32]; bias [N]) for qgemm_qsi4c32.");

  m.def("qgemm_qsi4c32", [](py::object a, const PackedRhs& w, float clamp_min, float clamp_max,
                            int threads) {
    const char* fn = "qgemm_qsi4c32";
    expect_family(w, Family::qgemm_qsi4c32, fn);
    const py::array aa = checked<float>(a, fn, "a", 2);
    expect_dim(aa, 1, w.k, fn, "a (K of the packed weights)");
    const size_t m = aa.shape(0), nth = threads_arg(threads);
    py::array_t<float> y({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(w.n)});
    float* out = y.mutable_data();
    {
      py::gil_scoped_release release;
      qgemm_qsi4c32(w, m, ptr<float>(aa), w.k * sizeof(float), out, w.n * sizeof(float),
                    clamp_min, clamp_max, nth);
    }
    return y;
  }, py::arg("a"), py::arg("packed"), py::kw_only(), py::arg("clamp_min") = -inf,
     py::arg("clamp_max") = inf, py::arg("threads") = 1,
     "Dynamic int8 x blockwise int4 matmul: a float32 [M, K] (K a multiple of 32); returns "
     "float32 [M, N].");
}

}  // namespace onnxplex::kleidi::bind
