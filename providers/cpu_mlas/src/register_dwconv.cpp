// Bindings of the depthwise convolution: shape and dtype checks, GIL released around compute.
#include <pybind11/stl.h>

#include <array>
#include <limits>
#include <stdexcept>
#include <string>

#include "bind_util.h"
#include "dwconv.h"

namespace onnxplex::mlas::bind {

namespace {

using F32 = py::array_t<float, py::array::c_style>;

F32 f32(const py::array& a, const char* what, py::ssize_t ndim) {
  if (!py::isinstance<F32>(a) || a.ndim() != ndim) {
    throw py::type_error(std::string(what) + " must be a C-contiguous float32 array of rank " +
                         std::to_string(ndim));
  }
  return a.cast<F32>();
}

}  // namespace

void register_dwconv(py::module_& m) {
  m.def("dwconv_f32", [](const py::array& x_in, const py::array& w_in, const py::object& b_in,
                         py::array& y_in, std::array<size_t, 2> strides,
                         std::array<size_t, 2> dilations, std::array<size_t, 2> pads,
                         float lo, float hi) {
    const F32 x = f32(x_in, "x", 3), w = f32(w_in, "w", 3);
    F32 y = f32(y_in, "y", 3);
    const size_t c = static_cast<size_t>(x.shape(0));
    if (static_cast<size_t>(w.shape(0)) != c || static_cast<size_t>(y.shape(0)) != c) {
      throw py::value_error("x, w and y must have the same number of channels");
    }
    const float* bias = nullptr;
    F32 b;
    if (!b_in.is_none()) {
      b = f32(b_in.cast<py::array>(), "bias", 1);
      if (static_cast<size_t>(b.shape(0)) != c) throw py::value_error("bias must have C values");
      bias = b.data();
    }
    if (strides[0] == 0 || strides[1] == 0 || dilations[0] == 0 || dilations[1] == 0) {
      throw py::value_error("strides and dilations must be positive");
    }
    DwConvGeometry g{static_cast<size_t>(x.shape(1)), static_cast<size_t>(x.shape(2)),
                     static_cast<size_t>(y.shape(1)), static_cast<size_t>(y.shape(2)),
                     static_cast<size_t>(w.shape(1)), static_cast<size_t>(w.shape(2)),
                     strides[0], strides[1], dilations[0], dilations[1], pads[0], pads[1]};
    const float* xp = x.data();
    const float* wp = w.data();
    float* yp = y.mutable_data();
    py::gil_scoped_release release;
    dwconv_f32(xp, wp, bias, yp, c, g, lo, hi);
  }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("y"), py::arg("strides"),
     py::arg("dilations"), py::arg("pads"),
     py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(),
     "Depthwise 2-D conv of x [C, H, W] with w [C, kh, kw] into y [C, Ho, Wo] (written), "
     "bias [C] or None, begin pads (top, left), then clamp to [lo, hi].");
}

}  // namespace onnxplex::mlas::bind
