// Family (2): fp32 2-D convolution by indirect matmul (ONNX Conv semantics, group 1).
#include <pybind11/stl.h>

#include <array>
#include <limits>

#include "bind_util.h"

namespace onnxplex::kleidi::bind {

void register_conv_f32(py::module_& m) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  m.def("pack_conv2d_f32", [](py::object w, py::object bias, std::optional<std::string> variant) {
    const char* fn = "pack_conv2d_f32";
    const py::array ww = checked<float>(w, fn, "w", 4);
    const size_t c_out = ww.shape(0), c_in = ww.shape(1), kh = ww.shape(2), kw = ww.shape(3);
    py::array bb;
    if (!bias.is_none()) {
      bb = checked<float>(bias, fn, "bias", 1);
      expect_dim(bb, 0, c_out, fn, "bias");
    }
    const Variant v = variant_arg(Family::igemm_f32, variant);
    py::gil_scoped_release release;
    return pack_conv2d_f32(v, c_out, c_in, kh, kw, ptr<float>(ww),
                           bias.is_none() ? nullptr : ptr<float>(bb));
  }, py::arg("w"), py::arg("bias") = py::none(), py::kw_only(), py::arg("variant") = py::none(),
     "Pack float32 conv weights w [C_out, C_in, kH, kW] and bias [C_out] for conv2d_f32.");

  m.def("conv2d_f32", [](py::object x, const PackedRhs& w, std::array<size_t, 2> strides,
                         std::array<size_t, 4> pads, std::array<size_t, 2> dilations,
                         float clamp_min, float clamp_max, int threads) {
    const char* fn = "conv2d_f32";
    expect_family(w, Family::igemm_f32, fn);
    const py::array xx = checked<float>(x, fn, "x", 4);
    expect_dim(xx, 1, w.c_in, fn, "x (C_in of the packed weights)");
    Conv2dGeometry g;
    g.stride_h = strides[0];
    g.stride_w = strides[1];
    g.pad_top = pads[0];  // ONNX order: [top, left, bottom, right]
    g.pad_left = pads[1];
    g.pad_bottom = pads[2];
    g.pad_right = pads[3];
    g.dil_h = dilations[0];
    g.dil_w = dilations[1];
    const size_t batch = xx.shape(0), h = xx.shape(2), wd = xx.shape(3);
    size_t oh = 0, ow = 0;
    conv2d_output_size(h, wd, w.kh, w.kw, g, &oh, &ow);
    const size_t nth = threads_arg(threads);
    py::array_t<float> y({batch, w.n, oh, ow});
    float* out = y.mutable_data();
    {
      py::gil_scoped_release release;
      conv2d_f32(w, batch, h, wd, ptr<float>(xx), g, out, clamp_min, clamp_max, nth);
    }
    return y;
  }, py::arg("x"), py::arg("packed"), py::kw_only(),
     py::arg("strides") = std::array<size_t, 2>{1, 1},
     py::arg("pads") = std::array<size_t, 4>{0, 0, 0, 0},
     py::arg("dilations") = std::array<size_t, 2>{1, 1}, py::arg("clamp_min") = -inf,
     py::arg("clamp_max") = inf, py::arg("threads") = 1,
     "ONNX Conv (group 1) of x float32 [N, C_in, H, W]; pads are [top, left, bottom, right]. "
     "Returns float32 [N, C_out, H_out, W_out].");
}

}  // namespace onnxplex::kleidi::bind
