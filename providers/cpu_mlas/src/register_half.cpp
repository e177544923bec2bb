// Python bindings of the float32 <-> float16 / bfloat16 conversions (halfconv.h): the Cast
// kernel's path for half-precision tensors (numpy converts float16 one element at a time,
// ~2.4 ns an element; ml_dtypes' bfloat16 ~0.9).
#include <string>

#include "bind_util.h"
#include "halfconv.h"

namespace onnxplex::mlas::bind {
namespace {

void check(const py::array& a, size_t itemsize, size_t count, const char* what, bool out) {
  if (static_cast<size_t>(a.itemsize()) != itemsize || !(a.flags() & py::array::c_style) ||
      static_cast<size_t>(a.size()) != count) {
    throw py::value_error(std::string(what) + ": expected a C-contiguous array of " +
                          std::to_string(count) + " values of " + std::to_string(itemsize) +
                          " bytes");
  }
  if (out && !a.writeable()) throw py::value_error(std::string(what) + " must be writeable");
}

}  // namespace

void register_half(py::module_& m) {
  m.def(
      "f32_to_half",
      [](const py::array& x, py::array& y, bool bf16, bool portable) {
        const size_t n = static_cast<size_t>(x.size());
        if (!is_float32(x)) throw py::value_error("x must be float32");
        check(x, 4, n, "x", false);
        check(y, 2, n, "y", true);
        const auto* xp = static_cast<const float*>(x.data());
        auto* yp = static_cast<uint16_t*>(y.mutable_data());
        py::gil_scoped_release release;
        if (portable) {
          (bf16 ? f32_to_bf16_portable : f32_to_f16_portable)(xp, yp, n);
        } else {
          f32_to_half(xp, yp, n, bf16);
        }
      },
      py::arg("x"), py::arg("y"), py::arg("bf16"), py::arg("portable") = false,
      "y = x rounded to float16 (bf16 False) or bfloat16 (True), nearest even, as numpy and "
      "ml_dtypes round; x float32, y any 2-byte dtype (its bits are written), both "
      "C-contiguous of one size. portable: the portable variant whatever the CPU (tests).");
  m.def(
      "half_to_f32",
      [](const py::array& x, py::array& y, bool bf16, bool portable) {
        const size_t n = static_cast<size_t>(x.size());
        check(x, 2, n, "x", false);
        if (!is_float32(y)) throw py::value_error("y must be float32");
        check(y, 4, n, "y", true);
        const auto* xp = static_cast<const uint16_t*>(x.data());
        auto* yp = static_cast<float*>(y.mutable_data());
        py::gil_scoped_release release;
        if (portable) {
          (bf16 ? bf16_to_f32_portable : f16_to_f32_portable)(xp, yp, n);
        } else {
          half_to_f32(xp, yp, n, bf16);
        }
      },
      py::arg("x"), py::arg("y"), py::arg("bf16"), py::arg("portable") = false,
      "y = x (float16 bits, or bfloat16 with bf16) as float32, exactly; both C-contiguous of "
      "one size. portable: the portable variant whatever the CPU (tests).");
}

}  // namespace onnxplex::mlas::bind
