// Bindings of the convolution kernels (depthwise conv, epilogue): shape and dtype checks, GIL
// released around compute.
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "attention.h"
#include "bind_util.h"
#include "conv_epilogue.h"
#include "dwconv.h"
#include "gconv.h"
#include "gelu.h"
#include "layernorm.h"
#include "parallel.h"
#include "qgemm.h"
#include "resize.h"
#include "softmax.h"

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

// A C-contiguous float32 array of rank 1 or more.
F32 f32_rows(const py::array& a, const char* what) {
  if (!py::isinstance<F32>(a) || a.ndim() < 1) {
    throw py::type_error(std::string(what) + " must be a C-contiguous float32 array");
  }
  return a.cast<F32>();
}

// A float32 array of rank `rank` whose last axis is contiguous; its rank - 1 outer strides in
// elements (0 along an axis of length 1, which may then broadcast).
void outer_strides(const py::array& a, const char* what, int rank, std::ptrdiff_t* strides) {
  if (!is_float32(a) || a.ndim() != rank) {
    throw py::type_error(std::string(what) + " must be a float32 array of rank " +
                         std::to_string(rank));
  }
  if (a.size() == 0) {  // nothing is read (numpy's strides of an empty array are arbitrary)
    std::fill(strides, strides + rank - 1, 0);
    return;
  }
  if (a.shape(rank - 1) > 1 && a.strides(rank - 1) != static_cast<py::ssize_t>(sizeof(float))) {
    throw py::value_error(std::string(what) + " must be contiguous along its last axis");
  }
  for (int i = 0; i < rank - 1; ++i) {
    if (a.strides(i) % static_cast<py::ssize_t>(sizeof(float)) != 0) {
      throw py::value_error(std::string(what) + " has unaligned strides");
    }
    strides[i] = a.shape(i) == 1 ? 0 : a.strides(i) / static_cast<py::ssize_t>(sizeof(float));
  }
}

// An optional bias of c float32 values: its data (kept alive by `keep`), or nullptr for None.
const float* optional_bias(const py::object& b_in, size_t c, F32& keep) {
  if (b_in.is_none()) return nullptr;
  keep = f32(b_in.cast<py::array>(), "bias", 1);
  if (static_cast<size_t>(keep.shape(0)) != c) throw py::value_error("bias must have C values");
  return keep.data();
}

// A depthwise conv's (or a pool's) geometry: the planes are axes 1 and 2 of x and y (both in
// [C, H, W] and in [N, H, W, C]), kernel (kh, kw), the attributes.
DwConvGeometry dw_geometry(const F32& x, const F32& y, size_t kh, size_t kw,
                           std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
                           std::array<size_t, 2> pads) {
  if (strides[0] == 0 || strides[1] == 0 || dilations[0] == 0 || dilations[1] == 0) {
    throw py::value_error("strides and dilations must be positive");
  }
  return {static_cast<size_t>(x.shape(1)), static_cast<size_t>(x.shape(2)),
          static_cast<size_t>(y.shape(1)), static_cast<size_t>(y.shape(2)), kh, kw,
          strides[0], strides[1], dilations[0], dilations[1], pads[0], pads[1]};
}

// A channels-last 2-D pool's checks, then fn(x image, y image, c, oy0, oy1, g) over row
// ranges of every image (a task reads and writes whole channels-last rows), without the GIL.
template <typename Fn>
void pool_nhwc(const py::array& x_in, py::array& y_in, std::array<size_t, 2> kernel,
               std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
               std::array<size_t, 2> pads, size_t threads, Fn fn) {
  const F32 x = f32(x_in, "x", 4);
  F32 y = f32(y_in, "y", 4);
  const size_t n = static_cast<size_t>(x.shape(0)), c = static_cast<size_t>(x.shape(3));
  if (static_cast<size_t>(y.shape(0)) != n || static_cast<size_t>(y.shape(3)) != c) {
    throw py::value_error("x and y must have the same batch and channels");
  }
  if (kernel[0] == 0 || kernel[1] == 0) throw py::value_error("kernel must be positive");
  const DwConvGeometry g = dw_geometry(x, y, kernel[0], kernel[1], strides, dilations, pads);
  const float* xp = x.data();
  float* yp = y.mutable_data();
  const size_t rsplit = threads > 1 ? std::min(g.ho, threads * 2) : 1;
  py::gil_scoped_release release;
  parallel_for(n * rsplit, threads, [&](size_t t) {
    const size_t i = t / rsplit, r = t % rsplit;
    fn(xp + i * g.h * g.w * c, yp + i * g.ho * g.wo * c, c, g.ho * r / rsplit,
       g.ho * (r + 1) / rsplit, g);
  });
}

// maxpool_nhwc_f32's checks and geometry for arrays of x's and y's shapes, as a plan (what a
// PlannedStep runs without Python; register_step.cpp): the same tasks as pool_nhwc's.
NhwcConvPlan maxpool_nhwc_plan(const py::array& x_in, const py::array& y_in,
                               std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                               std::array<size_t, 2> dilations, std::array<size_t, 2> pads) {
  const F32 x = f32(x_in, "x", 4);
  const F32 y = f32(y_in, "y", 4);
  const size_t n = static_cast<size_t>(x.shape(0)), c = static_cast<size_t>(x.shape(3));
  if (static_cast<size_t>(y.shape(0)) != n || static_cast<size_t>(y.shape(3)) != c) {
    throw py::value_error("x and y must have the same batch and channels");
  }
  if (kernel[0] == 0 || kernel[1] == 0) throw py::value_error("kernel must be positive");
  const DwConvGeometry g = dw_geometry(x, y, kernel[0], kernel[1], strides, dilations, pads);
  NhwcConvPlan plan;
  plan.in_shape = shape_of(x);
  plan.out_shape = shape_of(y);
  plan.run = [g, n, c](const float* xp, float* yp, const float*, size_t threads) {
    const size_t rsplit = threads > 1 ? std::min(g.ho, threads * 2) : 1;
    parallel_for(n * rsplit, threads, [&](size_t t) {
      const size_t i = t / rsplit, r = t % rsplit;
      maxpool_nhwc_f32(xp + i * g.h * g.w * c, yp + i * g.ho * g.wo * c, c, g.ho * r / rsplit,
                       g.ho * (r + 1) / rsplit, g);
    });
  };
  return plan;
}

// dwconv_nhwc_f32's checks and setup for arrays of x's and y's shapes, as a plan. Tasks:
// images x channel groups (whole groups of 16: the kernel's vectors) x output row ranges: one
// a thread at least, more (up to 4 a thread) while each is worth kMinChunkMacs (a task lays
// out its blocks' weights: on a 14 x 14 plane, 9 tasks of 64K multiply-adds scaled 1.1x on
// two threads). Row ranges first (a task then reads whole channels-last rows: contiguous
// memory), of at least 4 rows; channel groups for the rest.
NhwcConvPlan dwconv_nhwc_plan(const py::array& x_in, const py::array& w_in,
                              const py::object& b_in, const py::array& y_in,
                              std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
                              std::array<size_t, 2> pads, float lo, float hi, int act_in) {
  const PostAct act = post_act_arg(act_in);
  const F32 x = f32(x_in, "x", 4), w = f32(w_in, "w", 3);
  const F32 y = f32(y_in, "y", 4);
  const size_t n = static_cast<size_t>(x.shape(0)), c = static_cast<size_t>(x.shape(3));
  if (static_cast<size_t>(w.shape(0)) != c || static_cast<size_t>(y.shape(3)) != c ||
      static_cast<size_t>(y.shape(0)) != n) {
    throw py::value_error("x, w and y must have the same batch and channels");
  }
  F32 b;
  const float* bias = optional_bias(b_in, c, b);
  const DwConvGeometry g =
      dw_geometry(x, y, static_cast<size_t>(w.shape(1)), static_cast<size_t>(w.shape(2)),
                  strides, dilations, pads);
  NhwcConvPlan plan;
  plan.in_shape = shape_of(x);
  plan.out_shape = shape_of(y);
  plan.keep = {w, b};
  const float* wp = w.data();   // kept alive by plan.keep, as the bias
  auto prep = std::make_shared<DwPrepared>();   // the weights as the kernel reads them, once
  dw_prepare(wp, bias, c, g.kh * g.kw, *prep);
  plan.run = [wp, bias, n, c, g, lo, hi, act, prep](const float* xp, float* yp, const float*,
                                                    size_t threads) {
    constexpr size_t kMinChunkMacs = 1 << 18, kGroup = 16;
    const size_t groups = (c + kGroup - 1) / kGroup;
    const size_t macs = n * c * g.ho * g.wo * g.kh * g.kw;
    const size_t want = threads > 1 ? std::clamp<size_t>(macs / kMinChunkMacs, threads,
                                                          threads * 4)
                                    : 1;
    const size_t rsplit = std::max<size_t>(1, std::min(g.ho / 4, want));
    const size_t cgroups = std::max<size_t>(1, std::min(groups, (want + rsplit - 1) / rsplit));
    const size_t per_image = cgroups * rsplit;
    const size_t in_image = g.h * g.w * c, out_image = g.ho * g.wo * c;
    parallel_for(n * per_image, threads, [&](size_t t) {
      const size_t i = t / per_image, cg = t % per_image / rsplit, rs = t % rsplit;
      const size_t c0 = std::min(c, groups * cg / cgroups * kGroup);
      const size_t c1 = std::min(c, groups * (cg + 1) / cgroups * kGroup);
      const size_t oy0 = g.ho * rs / rsplit, oy1 = g.ho * (rs + 1) / rsplit;
      float* yi = yp + i * out_image;
      if (act == PostAct::kNone) {
        dwconv_nhwc_f32(xp + i * in_image, wp, bias, yi, c, c0, c1, oy0, oy1, g, lo, hi,
                        prep.get());
        return;
      }
      // With an activation, output rows in chunks of ~32 KB, each activated while it is in
      // L1 (over the task's whole block, out of L1 and L2 on a large map, a SiLU'd 144 x 56
      // x 56 depthwise conv spent as long in the activation as in the conv)
      const size_t row_bytes = g.wo * (c1 - c0) * sizeof(float);
      const size_t chunk = std::max<size_t>(1, (size_t{32} << 10) / std::max<size_t>(1, row_bytes));
      for (size_t r0 = oy0; r0 < oy1; r0 += chunk) {
        const size_t r1 = std::min(oy1, r0 + chunk);
        dwconv_nhwc_f32(xp + i * in_image, wp, bias, yi, c, c0, c1, r0, r1, g, lo, hi,
                        prep.get());
        post_act_f32(act, yi + r0 * g.wo * c + c0, (r1 - r0) * g.wo, c1 - c0, c);
      }
    });
  };
  return plan;
}

// gconv_nhwc_f32's checks, weight layout and setup for arrays of x's and y's shapes, as a plan.
// Tasks: images x output row ranges, one a thread at least, more (up to 4 a thread) while each
// is worth kMinChunkMacs; the activation after the clamp on each task's rows (contiguous).
NhwcConvPlan gconv_nhwc_plan(const py::array& x_in, const py::array& w_in,
                             const py::object& b_in, const py::array& y_in, size_t group,
                             std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
                             std::array<size_t, 2> pads, float lo, float hi, int act_in,
                             bool with_z) {
  const PostAct act = post_act_arg(act_in);
  const F32 x = f32(x_in, "x", 4), w = f32(w_in, "w", 4);
  const F32 y = f32(y_in, "y", 4);
  GConvShape s;
  s.c = static_cast<size_t>(x.shape(3));
  s.m = static_cast<size_t>(w.shape(0));
  s.group = group;
  if (group == 0 || s.c % group != 0 || s.m % group != 0 ||
      static_cast<size_t>(w.shape(1)) * group != s.c) {
    throw py::value_error("w must be [M, C / group, kh, kw] with C and M multiples of group");
  }
  s.cgi = s.c / group;
  s.cgo = s.m / group;
  if (!gconv_nhwc_supported(s.cgo)) {
    throw py::value_error("output channels per group must be a multiple of 4");
  }
  const size_t n = static_cast<size_t>(x.shape(0));
  if (static_cast<size_t>(y.shape(0)) != n || static_cast<size_t>(y.shape(3)) != s.m) {
    throw py::value_error("y must be [N, Ho, Wo, M]");
  }
  F32 b;
  const float* bias = optional_bias(b_in, s.m, b);
  const size_t kh = static_cast<size_t>(w.shape(2)), kw = static_cast<size_t>(w.shape(3));
  const DwConvGeometry g = dw_geometry(x, y, kh, kw, strides, dilations, pads);
  F32 wr(static_cast<py::ssize_t>(gconv_packed_size(s, kh, kw)));
  gconv_pack_weight(w.data(), s, kh, kw, wr.mutable_data());
  NhwcConvPlan plan;
  plan.in_shape = shape_of(x);
  plan.out_shape = shape_of(y);
  plan.with_z = with_z;
  plan.keep = {wr, b};
  const float* wp = wr.data();   // kept alive by plan.keep, as the bias
  plan.run = [wp, bias, n, s, g, lo, hi, act](const float* xp, float* yp, const float* zp,
                                              size_t threads) {
    constexpr size_t kMinChunkMacs = 1 << 18;
    const size_t macs = n * s.m * s.cgi * g.ho * g.wo * g.kh * g.kw;
    const size_t want = threads > 1 ? std::clamp<size_t>(macs / kMinChunkMacs, threads,
                                                          threads * 4)
                                    : 1;
    const size_t rsplit = std::max<size_t>(1, std::min(g.ho, (want + n - 1) / n));
    const size_t in_image = g.h * g.w * s.c, out_image = g.ho * g.wo * s.m;
    parallel_for(n * rsplit, threads, [&](size_t t) {
      const size_t i = t / rsplit, rs = t % rsplit;
      const size_t oy0 = g.ho * rs / rsplit, oy1 = g.ho * (rs + 1) / rsplit;
      float* yi = yp + i * out_image;
      gconv_nhwc_f32(xp + i * in_image, wp, bias, zp == nullptr ? nullptr : zp + i * out_image,
                     yi, s, g, oy0, oy1, lo, hi);
      post_act_f32(act, yi + oy0 * g.wo * s.m, (oy1 - oy0) * g.wo, s.m, s.m);
    });
  };
  return plan;
}

}  // namespace

// dst [cols][rows] = src [rows][cols] (rows lds elements apart) for elements of any type T
// moved as they are (bytes, halves, int64): few rows (a channels-last view of an RGB image,
// rows = 3 planes) one output position at a time, else 32 x 32 blocks (both sides' lines in
// L1).
template <typename T, size_t Rows>
void interleave_rows(const T* src, size_t cols, size_t lds, T* dst) {
  for (size_t j = 0; j < cols; ++j) {
    for (size_t i = 0; i < Rows; ++i) dst[j * Rows + i] = src[i * lds + j];
  }
}

template <typename T>
void transpose_elems(const T* src, size_t rows, size_t cols, size_t lds, T* dst) {
  switch (rows) {
    case 1: return interleave_rows<T, 1>(src, cols, lds, dst);
    case 2: return interleave_rows<T, 2>(src, cols, lds, dst);
    case 3: return interleave_rows<T, 3>(src, cols, lds, dst);
    case 4: return interleave_rows<T, 4>(src, cols, lds, dst);
    default: break;
  }
  constexpr size_t kBlock = 32;
  for (size_t i0 = 0; i0 < rows; i0 += kBlock) {
    const size_t i1 = std::min(rows, i0 + kBlock);
    for (size_t j0 = 0; j0 < cols; j0 += kBlock) {
      const size_t j1 = std::min(cols, j0 + kBlock);
      for (size_t j = j0; j < j1; ++j) {
        for (size_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * lds + j];
      }
    }
  }
}

void register_conv(py::module_& m) {
  m.def("bias_act_f32", [](py::array& y, const py::object& b_in, const py::object& z_in,
                           float lo, float hi) {
    std::ptrdiff_t ys[2], zs[2] = {0, 0};
    outer_strides(y, "y", 3, ys);
    if (!y.writeable()) throw py::value_error("y must be writeable");
    const auto n = static_cast<size_t>(y.shape(0)), c = static_cast<size_t>(y.shape(1)),
               len = static_cast<size_t>(y.shape(2));
    F32 b;
    const float* bias = optional_bias(b_in, c, b);
    const float* z = nullptr;
    py::array za;
    if (!z_in.is_none()) {
      za = z_in.cast<py::array>();
      outer_strides(za, "z", 3, zs);
      for (int i = 0; i < 3; ++i) {
        if (za.shape(i) != y.shape(i)) throw py::value_error("z must have the shape of y");
      }
      z = static_cast<const float*>(za.data());
    }
    float* yp = static_cast<float*>(y.mutable_data());
    py::gil_scoped_release release;
    bias_act_f32(yp, ys, bias, z, zs, n, c, len, lo, hi);
  }, py::arg("y"), py::arg("bias"), py::arg("z"),
     py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(),
     "In place: y [N, C, L] (last axis contiguous) = clamp(y + bias[C] + z, lo, hi); bias and "
     "z may be None.");

  m.def("dwconv_f32", [](const py::array& x_in, const py::array& w_in, const py::object& b_in,
                         py::array& y_in, std::array<size_t, 2> strides,
                         std::array<size_t, 2> dilations, std::array<size_t, 2> pads,
                         float lo, float hi, size_t threads) {
    const F32 x = f32(x_in, "x", 3), w = f32(w_in, "w", 3);
    F32 y = f32(y_in, "y", 3);
    const size_t c = static_cast<size_t>(x.shape(0));
    if (static_cast<size_t>(w.shape(0)) != c || static_cast<size_t>(y.shape(0)) != c) {
      throw py::value_error("x, w and y must have the same number of channels");
    }
    F32 b;
    const float* bias = optional_bias(b_in, c, b);
    const DwConvGeometry g =
        dw_geometry(x, y, static_cast<size_t>(w.shape(1)), static_cast<size_t>(w.shape(2)),
                    strides, dilations, pads);
    const float* xp = x.data();
    const float* wp = w.data();
    float* yp = y.mutable_data();
    // Channel ranges over the native pool, each worth at least kMinChunkMacs, in whole groups
    // of kGroup channels (the kernel vectorizes across up to 16 channels: a range cut inside
    // a group would run its channels one at a time).
    constexpr size_t kMinChunkMacs = 1 << 16, kGroup = 16;
    const size_t macs = c * g.ho * g.wo * g.kh * g.kw, groups = (c + kGroup - 1) / kGroup;
    const size_t chunks = threads > 1 ? std::max<size_t>(1, std::min({groups, threads * 4,
                                                                      macs / kMinChunkMacs}))
                                      : 1;
    py::gil_scoped_release release;
    parallel_for(chunks, threads, [&](size_t i) {
      const size_t c0 = std::min(c, groups * i / chunks * kGroup);
      const size_t c1 = std::min(c, groups * (i + 1) / chunks * kGroup);
      if (c0 == c1) return;
      dwconv_f32(xp + c0 * g.h * g.w, wp + c0 * g.kh * g.kw,
                 bias != nullptr ? bias + c0 : nullptr, yp + c0 * g.ho * g.wo, c1 - c0, g, lo,
                 hi);
    });
  }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("y"), py::arg("strides"),
     py::arg("dilations"), py::arg("pads"),
     py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("threads") = 1,
     "Depthwise 2-D conv of x [C, H, W] with w [C, kh, kw] into y [C, Ho, Wo] (written), "
     "bias [C] or None, begin pads (top, left), then clamp to [lo, hi]; channel ranges run "
     "on up to `threads` threads of the native pool.");

  m.def("dwconv_nhwc_f32", [](const py::array& x_in, const py::array& w_in,
                              const py::object& b_in, py::array& y_in,
                              std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
                              std::array<size_t, 2> pads, float lo, float hi, size_t threads,
                              int act) {
    const NhwcConvPlan plan = dwconv_nhwc_plan(x_in, w_in, b_in, y_in, strides, dilations, pads,
                                               lo, hi, act);
    F32 y = f32(y_in, "y", 4);
    const float* xp = static_cast<const float*>(x_in.data());
    float* yp = y.mutable_data();
    py::gil_scoped_release release;
    plan.run(xp, yp, nullptr, threads);
  }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("y"), py::arg("strides"),
     py::arg("dilations"), py::arg("pads"),
     py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("threads") = 1,
     py::arg("act") = 0,
     "Depthwise 2-D conv of channels-last x [N, H, W, C] with w [C, kh, kw] into y "
     "[N, Ho, Wo, C] (written), bias [C] or None, begin pads (top, left), then clamp to "
     "[lo, hi], then act (0 none, 1 SiLU, 2 HardSwish, 3 HardSigmoid); channel groups and output "
     "row ranges run on up to `threads` threads.");

  m.def("dwconv_nhwc_f32_plan", &dwconv_nhwc_plan, py::arg("x"), py::arg("w"), py::arg("bias"),
        py::arg("y"), py::arg("strides"), py::arg("dilations"), py::arg("pads"),
        py::arg("lo") = -std::numeric_limits<float>::infinity(),
        py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("act") = 0,
        "dwconv_nhwc_f32 planned for arrays of x's and y's shapes (their values are not read): "
        "the plan's __call__(x, threads=threads) returns a new y; act as dwconv_nhwc_f32's.");

  m.def("gconv_nhwc_f32_plan", &gconv_nhwc_plan, py::arg("x"), py::arg("w"), py::arg("bias"),
        py::arg("y"), py::arg("group"), py::arg("strides"), py::arg("dilations"),
        py::arg("pads"), py::arg("lo") = -std::numeric_limits<float>::infinity(),
        py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("act") = 0,
        py::arg("with_z") = false,
        "Grouped 2-D conv of channels-last x [N, H, W, C] with w [M, C / group, kh, kw] (Conv's) "
        "into y [N, Ho, Wo, M], planned for arrays of x's and y's shapes (their values are not "
        "read): begin pads (top, left), bias [M] or None, then z (with_z: every call passes "
        "z [N, Ho, Wo, M]), then clamp to [lo, hi], then act (0 none, 1 SiLU, 2 HardSwish, "
        "3 HardSigmoid). M / group must be a multiple of 4. The plan's __call__(x, z=None, "
        "threads=0) returns a new y.");

  m.def("maxpool_nhwc_f32", [](const py::array& x_in, py::array& y_in,
                               std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                               std::array<size_t, 2> dilations, std::array<size_t, 2> pads,
                               size_t threads) {
    pool_nhwc(x_in, y_in, kernel, strides, dilations, pads, threads,
              [](const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                 const DwConvGeometry& g) { maxpool_nhwc_f32(x, y, c, oy0, oy1, g); });
  }, py::arg("x"), py::arg("y"), py::arg("kernel"), py::arg("strides"), py::arg("dilations"),
     py::arg("pads"), py::arg("threads") = 1,
     "2-D max pooling of channels-last x [N, H, W, C] into y [N, Ho, Wo, C] (written); pads "
     "are the leading (top, left) ones, padding never wins; NaN propagates.");

  m.def("maxpool_nhwc_f32_plan", &maxpool_nhwc_plan, py::arg("x"), py::arg("y"),
        py::arg("kernel"), py::arg("strides"), py::arg("dilations"), py::arg("pads"),
        "maxpool_nhwc_f32 bound to x's and y's shapes: an NhwcConvPlan, called as "
        "plan(x, None, threads) for a new y.");

  m.def("avgpool_nhwc_f32", [](const py::array& x_in, py::array& y_in,
                               std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                               std::array<size_t, 2> dilations, std::array<size_t, 2> pads,
                               std::array<size_t, 2> pads_end, bool count_include_pad,
                               size_t threads) {
    pool_nhwc(x_in, y_in, kernel, strides, dilations, pads, threads,
              [&](const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                  const DwConvGeometry& g) {
                avgpool_nhwc_f32(x, y, c, oy0, oy1, g, count_include_pad, pads_end[0],
                                 pads_end[1]);
              });
  }, py::arg("x"), py::arg("y"), py::arg("kernel"), py::arg("strides"), py::arg("dilations"),
     py::arg("pads"), py::arg("pads_end"), py::arg("count_include_pad"), py::arg("threads") = 1,
     "2-D average pooling of channels-last x [N, H, W, C] into y [N, Ho, Wo, C] (written); "
     "pads: (top, left), pads_end: (bottom, right); each window's sum over the input "
     "positions it covers divided by their count, or with count_include_pad by the taps "
     "inside the padded extent.");

  m.def("resize2d_f32", [](const py::array& x_in, py::array& y_in, const py::array& iy_in,
                           const py::array& wy_in, const py::array& ix_in,
                           const py::array& wx_in, size_t threads) {
    using I64 = py::array_t<int64_t, py::array::c_style>;
    const F32 x = f32(x_in, "x", 3);
    F32 y = f32(y_in, "y", 3);
    if (!y.writeable()) throw py::value_error("y must be writeable");
    // One axis's taps: index [out, taps] (each in [0, in)), weight [out, taps].
    auto taps = [](const py::array& i_in, const py::array& w_in, size_t in, size_t out,
                   const char* axis) {
      if (!py::isinstance<I64>(i_in) || i_in.ndim() != 2) {
        throw py::type_error(std::string(axis) + " indices must be a C-contiguous int64 matrix");
      }
      const I64 idx = i_in.cast<I64>();
      const F32 w = f32(w_in, axis, 2);
      const size_t n = static_cast<size_t>(idx.shape(1));
      if (static_cast<size_t>(idx.shape(0)) != out || n == 0 ||
          w.shape(0) != idx.shape(0) || w.shape(1) != idx.shape(1)) {
        throw py::value_error(std::string(axis) + " taps must be [output length, taps >= 1], "
                              "indices and weights alike");
      }
      const int64_t* ip = idx.data();
      for (size_t k = 0; k < out * n; ++k) {
        if (ip[k] < 0 || static_cast<size_t>(ip[k]) >= in) {
          throw py::value_error(std::string(axis) + " index " + std::to_string(ip[k]) +
                                " is outside the input's " + std::to_string(in));
        }
      }
      return std::make_pair(idx, w);
    };
    const size_t planes = static_cast<size_t>(x.shape(0)), h = static_cast<size_t>(x.shape(1)),
                 w = static_cast<size_t>(x.shape(2));
    if (static_cast<size_t>(y.shape(0)) != planes) {
      throw py::value_error("y must have as many planes as x");
    }
    const auto [iy, wy] = taps(iy_in, wy_in, h, static_cast<size_t>(y.shape(1)), "row");
    const auto [ix, wx] = taps(ix_in, wx_in, w, static_cast<size_t>(y.shape(2)), "column");
    const ResizeTaps ry{iy.data(), wy.data(), static_cast<size_t>(iy.shape(0)),
                        static_cast<size_t>(iy.shape(1))};
    const ResizeTaps rx{ix.data(), wx.data(), static_cast<size_t>(ix.shape(0)),
                        static_cast<size_t>(ix.shape(1))};
    const float* xp = x.data();
    float* yp = y.mutable_data();
    py::gil_scoped_release release;
    resize2d_f32(xp, planes, h, w, yp, ry, rx, threads);
  }, py::arg("x"), py::arg("y"), py::arg("row_index"), py::arg("row_weight"),
     py::arg("col_index"), py::arg("col_weight"), py::arg("threads") = 1,
     "Separable resampling of planes x [P, H, W] into y [P, OH, OW] (C-contiguous float32, "
     "written): y[p, oy, ox] = sum_r row_weight[oy, r] * sum_c col_weight[ox, c] * "
     "x[p, row_index[oy, r], col_index[ox, c]], the column taps summed first, each in order "
     "(resize.h); indices int64 [OH, taps] and [OW, taps], weights float32 alike.");

  m.def("transpose_f32", [](const py::array& x_in, py::array& y_in) {
    std::ptrdiff_t xs[2];
    outer_strides(x_in, "x", 3, xs);
    F32 y = f32(y_in, "y", 3);
    const size_t n = static_cast<size_t>(x_in.shape(0)), rows = static_cast<size_t>(x_in.shape(1)),
                 cols = static_cast<size_t>(x_in.shape(2));
    if (static_cast<size_t>(y.shape(0)) != n || static_cast<size_t>(y.shape(1)) != cols ||
        static_cast<size_t>(y.shape(2)) != rows) {
      throw py::value_error("y must have the shape of x with its last two axes swapped");
    }
    const float* xp = static_cast<const float*>(x_in.data());
    float* yp = y.mutable_data();
    if (xs[1] < 0 || xs[0] < 0) throw py::value_error("x must have non-negative strides");
    py::gil_scoped_release release;
    for (size_t i = 0; i < n; ++i) {
      transpose_f32(xp + i * static_cast<size_t>(xs[0]), rows, cols, static_cast<size_t>(xs[1]),
                    yp + i * rows * cols, rows, false, -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::infinity());
    }
  }, py::arg("x"), py::arg("y"),
     "y[i] = x[i].T for x [N, R, C] (rows contiguous, any outer strides) and y [N, C, R] "
     "(C-contiguous float32): a batch of 2-D transposes in register tiles.");

  m.def("transpose_f32_plan", [](const std::vector<py::ssize_t>& in_shape,
                                 const std::vector<py::ssize_t>& out_shape, size_t n,
                                 size_t rows, size_t cols) {
    auto count = [](const std::vector<py::ssize_t>& shape) {
      size_t c = 1;
      for (py::ssize_t d : shape) {
        if (d < 0) throw py::value_error("shapes must not be negative");
        c *= static_cast<size_t>(d);
      }
      return c;
    };
    if (count(in_shape) != n * rows * cols || count(out_shape) != n * rows * cols) {
      throw py::value_error("in_shape and out_shape must each hold n * rows * cols values");
    }
    NhwcConvPlan plan;
    plan.in_shape = in_shape;
    plan.out_shape = out_shape;
    plan.run = [n, rows, cols](const float* xp, float* yp, const float*, size_t) {
      for (size_t i = 0; i < n; ++i) {
        transpose_f32(xp + i * rows * cols, rows, cols, cols, yp + i * rows * cols, rows, false,
                      -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::infinity());
      }
    };
    return plan;
  }, py::arg("in_shape"), py::arg("out_shape"), py::arg("n"), py::arg("rows"), py::arg("cols"),
     "transpose_f32 of a contiguous x of in_shape, seen as [n, rows, cols], into a new y of "
     "out_shape ([n, cols, rows]'s values): an NhwcConvPlan, called as plan(x) (what a "
     "PlannedStep runs without Python).");

  m.def("transpose_elems", [](const py::array& x, py::array& y) {
    // (any element type, moved as its bytes: 8-bit images, halves, int64 indices)
    const auto size = static_cast<size_t>(x.itemsize());
    if (x.ndim() != 3 || y.ndim() != 3 || !x.dtype().is(y.dtype())) {
      throw py::value_error("x and y must be rank-3 arrays of one dtype");
    }
    if (size != 1 && size != 2 && size != 4 && size != 8) {
      throw py::value_error("elements of 1, 2, 4 or 8 bytes only");
    }
    if (!(x.flags() & py::array::c_style) || !(y.flags() & py::array::c_style) ||
        !y.writeable()) {
      throw py::value_error("x must be C-contiguous, y C-contiguous and writeable");
    }
    const size_t n = static_cast<size_t>(x.shape(0)), rows = static_cast<size_t>(x.shape(1)),
                 cols = static_cast<size_t>(x.shape(2));
    if (static_cast<size_t>(y.shape(0)) != n || static_cast<size_t>(y.shape(1)) != cols ||
        static_cast<size_t>(y.shape(2)) != rows) {
      throw py::value_error("y must have the shape of x with its last two axes swapped");
    }
    const auto* xp = static_cast<const unsigned char*>(x.data());
    auto* yp = static_cast<unsigned char*>(y.mutable_data());
    py::gil_scoped_release release;
    for (size_t i = 0; i < n; ++i) {
      const size_t at = i * rows * cols * size;
      switch (size) {
        case 1:   // (bytes in 16 x 16 tiles, but for a few planes interleaved)
          if (rows <= 4) {
            transpose_elems(reinterpret_cast<const uint8_t*>(xp + at), rows, cols, cols,
                            reinterpret_cast<uint8_t*>(yp + at));
          } else {
            transpose_bytes(xp + at, rows, cols, cols, yp + at);
          }
          break;
        case 2: transpose_elems(reinterpret_cast<const uint16_t*>(xp + at), rows, cols, cols,
                                reinterpret_cast<uint16_t*>(yp + at)); break;
        case 4: transpose_elems(reinterpret_cast<const uint32_t*>(xp + at), rows, cols, cols,
                                reinterpret_cast<uint32_t*>(yp + at)); break;
        default: transpose_elems(reinterpret_cast<const uint64_t*>(xp + at), rows, cols, cols,
                                 reinterpret_cast<uint64_t*>(yp + at)); break;
      }
    }
  }, py::arg("x"), py::arg("y"),
     "y[i] = x[i].T for C-contiguous x [N, R, C] and y [N, C, R] of one dtype whose elements "
     "are 1, 2, 4 or 8 bytes, moved as they are (transpose_f32's tiles are float32's).");

  m.def("maxpool_f32", [](const py::array& x_in, py::array& y_in, std::array<size_t, 2> kernel,
                          std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
                          std::array<size_t, 2> pads) {
    const F32 x = f32(x_in, "x", 3);
    F32 y = f32(y_in, "y", 3);
    if (!y.writeable()) throw py::value_error("y must be writeable");
    const size_t c = static_cast<size_t>(x.shape(0));
    if (static_cast<size_t>(y.shape(0)) != c) {
      throw py::value_error("x and y must have the same number of channels");
    }
    if (kernel[0] == 0 || kernel[1] == 0 || strides[0] == 0 || strides[1] == 0 ||
        dilations[0] == 0 || dilations[1] == 0) {
      throw py::value_error("kernel, strides and dilations must be positive");
    }
    DwConvGeometry g{static_cast<size_t>(x.shape(1)), static_cast<size_t>(x.shape(2)),
                     static_cast<size_t>(y.shape(1)), static_cast<size_t>(y.shape(2)),
                     kernel[0], kernel[1], strides[0], strides[1], dilations[0], dilations[1],
                     pads[0], pads[1]};
    const float* xp = x.data();
    float* yp = y.mutable_data();
    py::gil_scoped_release release;
    maxpool_f32(xp, yp, c, g);
  }, py::arg("x"), py::arg("y"), py::arg("kernel"), py::arg("strides"), py::arg("dilations"),
     py::arg("pads"),
     "2-D max pooling of x [C, H, W] into y [C, Ho, Wo] (written): begin pads (top, left), "
     "padding never wins, NaN propagates.");

  m.def("softmax_f32", [](const py::array& x_in, bool log) {
    if (!py::isinstance<F32>(x_in) || x_in.ndim() < 1) {
      throw py::type_error("x must be a C-contiguous float32 array of rank >= 1");
    }
    const F32 x = x_in.cast<F32>();
    const auto cols = static_cast<size_t>(x.shape(x.ndim() - 1));
    F32 y(shape_of(x));
    if (cols != 0) {
      const float* xp = x.data();
      float* yp = y.mutable_data();
      const size_t rows = static_cast<size_t>(x.size()) / cols;
      if (x.size() >= (1 << 14)) {
        py::gil_scoped_release release;
        softmax_rows(xp, yp, rows, cols, log);
      } else {
        softmax_rows(xp, yp, rows, cols, log);
      }
    }
    return y;
  }, py::arg("x"), py::arg("log"),
     "(Log)Softmax of x over its last axis, in a new array, with the CPU's vector exp (AVX2, "
     "AVX-512; elsewhere scalar rows; no threads); a row whose max is not finite or that "
     "holds a NaN is NaN.");

  m.def("gelu_f32", [](const py::array& x_in, const py::object& b_in, py::array& y_in,
                       const py::array& coeffs_in, float clamp, size_t threads) {
    if (!py::isinstance<F32>(x_in) || !py::isinstance<F32>(y_in)) {
      throw py::type_error("x and y must be C-contiguous float32 arrays");
    }
    const F32 x = x_in.cast<F32>();
    F32 y = y_in.cast<F32>();
    if (x.size() != y.size()) throw py::value_error("x and y must have the same size");
    if (!y.writeable()) throw py::value_error("y must be writeable");
    const F32 coeffs = f32(coeffs_in, "coeffs", 1);
    if (coeffs.size() == 0) throw py::value_error("coeffs must not be empty");
    F32 b;
    size_t bias_count = 0;
    if (!b_in.is_none()) {
      b = f32(b_in.cast<py::array>(), "bias", 1);
      bias_count = static_cast<size_t>(b.size());
      const size_t last = x.ndim() > 0 ? static_cast<size_t>(x.shape(x.ndim() - 1)) : 1;
      if (bias_count == 0 || bias_count != last) {
        throw py::value_error("bias must have as many values as x's last axis");
      }
    }
    const GeluForm form{coeffs.data(), static_cast<size_t>(coeffs.size()), clamp};
    const float* xp = x.data();
    const float* bp = bias_count != 0 ? b.data() : nullptr;
    float* yp = y.mutable_data();
    const auto n = static_cast<size_t>(x.size());
    py::gil_scoped_release release;
    gelu_f32(xp, bp, bias_count, yp, n, form, threads);
  }, py::arg("x"), py::arg("bias"), py::arg("y"), py::arg("coeffs"), py::arg("clamp"),
     py::arg("threads") = 0,
     "y = gelu(x + bias) as x * sigmoid(2 x Q(min(x^2, clamp))), Q's coefficients highest "
     "power first; bias (None or x's last axis) broadcast along the last axis; y may be x.");

  m.def("attention_f32", [](const py::array& q, const py::array& k, const py::array& v,
                            py::array& y_in, float scale, const py::object& bias_in,
                            size_t threads) {
    std::ptrdiff_t qs[3], ks[3], vs[3], bs[3] = {0, 0, 0};
    outer_strides(q, "q", 4, qs);
    outer_strides(k, "k", 4, ks);
    outer_strides(v, "v", 4, vs);
    F32 y = f32(y_in, "y", 4);
    if (!y.writeable()) throw py::value_error("y must be writeable");
    const auto dim = [](const py::array& a, int i) { return static_cast<size_t>(a.shape(i)); };
    const size_t b = dim(q, 0), h = dim(q, 1), s = dim(q, 2), dh = dim(q, 3);
    const size_t t = dim(k, 2), dv = dim(v, 3);
    if (dim(k, 0) != b || dim(k, 1) != h || dim(k, 3) != dh || dim(v, 0) != b ||
        dim(v, 1) != h || dim(v, 2) != t) {
      throw py::value_error("q [B, H, S, Dh], k [B, H, T, Dh] and v [B, H, T, Dv] disagree");
    }
    if (dim(y, 0) != b || dim(y, 1) != s || dim(y, 2) != h || dim(y, 3) != dv) {
      throw py::value_error("y must be [B, S, H, Dv]");
    }
    const float* bias = nullptr;
    py::array bias_arr;
    if (!bias_in.is_none()) {
      bias_arr = bias_in.cast<py::array>();
      outer_strides(bias_arr, "bias", 4, bs);
      for (int i = 0; i < 3; ++i) {
        const size_t want = i == 0 ? b : i == 1 ? h : s;
        if (dim(bias_arr, i) != want && dim(bias_arr, i) != 1) {
          throw py::value_error("bias must broadcast to [B, H, S, T]");
        }
      }
      if (dim(bias_arr, 3) != t) throw py::value_error("bias must have T values a row");
      bias = static_cast<const float*>(bias_arr.data());
    }
    const AttentionArgs a{static_cast<const float*>(q.data()), qs[0], qs[1], qs[2],
                          static_cast<const float*>(k.data()), ks[0], ks[1], ks[2],
                          static_cast<const float*>(v.data()), vs[0], vs[1], vs[2],
                          bias, bs[0], bs[1], bs[2], y.mutable_data(), b, h, s, t, dh, dv,
                          scale};
    py::gil_scoped_release release;
    attention_f32(a, threads);
  }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("y"), py::arg("scale"),
     py::arg("bias") = py::none(), py::arg("threads") = 0,
     "Scaled dot-product attention into y [B, S, H, Dv] (C-contiguous): per batch and head, "
     "softmax(scale * q k^T + bias) v, for q [B, H, S, Dh], k [B, H, T, Dh], v [B, H, T, Dv] "
     "(float32, any strides, rows contiguous) and bias None or float32 broadcast to "
     "[B, H, S, T] (rows contiguous).");

  m.def("layer_norm_f32", [](const py::array& x_in, const py::object& skip_in,
                             const py::object& bias_in, const py::array& gamma_in,
                             const py::object& beta_in, py::array& y_in, const py::object& sum_in,
                             const py::object& mean_in, const py::object& inv_in, float eps,
                             bool rms, size_t threads) {
    // Arrays of any rank: x's rows are its last axis (a [B, S, D] activation needs no
    // reshaping, each a numpy call, in a transformer's every layer).
    const F32 x = f32_rows(x_in, "x");
    F32 y = f32_rows(y_in, "y");
    const size_t d = static_cast<size_t>(x.shape(x.ndim() - 1));
    const size_t rows = d == 0 ? 0 : static_cast<size_t>(x.size()) / d;
    auto same_rows = [&](const F32& a, const char* what) {
      if (a.ndim() != x.ndim() || !std::equal(a.shape(), a.shape() + a.ndim(), x.shape())) {
        throw py::value_error(std::string(what) + " must have x's shape");
      }
      if (!a.writeable()) throw py::value_error(std::string(what) + " must be writeable");
    };
    auto per_value = [&](const py::object& a, const char* what) -> F32 {
      if (a.is_none()) return F32();
      F32 v = f32_rows(a.cast<py::array>(), what);
      if (static_cast<size_t>(v.size()) != d) {
        throw py::value_error(std::string(what) + " must have one value per column of x");
      }
      return v;
    };
    auto per_row = [&](const py::object& a, const char* what) -> F32 {
      if (a.is_none()) return F32();
      F32 v = f32_rows(a.cast<py::array>(), what);
      if (static_cast<size_t>(v.size()) != rows || !v.writeable()) {
        throw py::value_error(std::string(what) + " must be a writeable array of one value a row");
      }
      return v;
    };
    same_rows(y, "y");
    const F32 gamma = per_value(gamma_in, "gamma"), bias = per_value(bias_in, "bias");
    const F32 beta = per_value(beta_in, "beta");
    if (rms && !beta_in.is_none()) throw py::value_error("the RMS form takes no beta");
    F32 skip, sum, mean = per_row(mean_in, "mean"), inv = per_row(inv_in, "inv");
    size_t skip_rows = 0;
    if (!skip_in.is_none()) {
      skip = f32_rows(skip_in.cast<py::array>(), "skip");
      const size_t sd = static_cast<size_t>(skip.shape(skip.ndim() - 1));
      skip_rows = sd == 0 ? 0 : static_cast<size_t>(skip.size()) / sd;
      if (sd != d || skip_rows == 0 || rows % skip_rows != 0) {
        throw py::value_error("skip must have x's row length and a row count dividing x's");
      }
    }
    if (!sum_in.is_none()) {
      sum = f32_rows(sum_in.cast<py::array>(), "sum");
      same_rows(sum, "sum");
    }
    LayerNormArgs a{x.data(), skip_rows ? skip.data() : nullptr, skip_rows,
                    bias_in.is_none() ? nullptr : bias.data(), gamma.data(),
                    beta_in.is_none() ? nullptr : beta.data(), y.mutable_data(),
                    sum_in.is_none() ? nullptr : sum.mutable_data(),
                    mean_in.is_none() ? nullptr : mean.mutable_data(),
                    inv_in.is_none() ? nullptr : inv.mutable_data(), rows, d, eps, rms};
    py::gil_scoped_release release;
    layer_norm_f32(a, threads);
  }, py::arg("x"), py::arg("skip"), py::arg("bias"), py::arg("gamma"), py::arg("beta"),
     py::arg("y"), py::arg("sum") = py::none(), py::arg("mean") = py::none(),
     py::arg("inv") = py::none(), py::arg("eps") = 1e-5f, py::arg("rms") = false,
     py::arg("threads") = 0,
     "Row layer normalization of x [..., d] (its rows the last axis; any rank) into y (x's "
     "shape; may be x): s = x + skip + bias (skip [..., d] of k rows repeats every k rows; "
     "skip, bias None to leave out), then ((s - mean) * inv) * gamma + beta, or with rms "
     "(s * inv) * gamma; mean and variance summed in double. sum (x's shape), mean and inv "
     "(one value a row, any shape) receive s and the row statistics when given. gamma, beta "
     "and bias: d values each.");
}

}  // namespace onnxplex::mlas::bind
