// Bindings of the float32 GEMM: packed operands as opaque objects, strided views of arrays,
// shape and dtype checks, GIL released around compute.
#include <pybind11/stl.h>

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "bind_util.h"
#include "sgemm.h"

namespace onnxplex::mlas::bind {

namespace {

// Below this many multiply-adds a bound GEMM runs on the calling thread, holding the GIL.
constexpr size_t kKeepGilMacs = size_t{1} << 15;

SgemmIsa sgemm_isa_arg(const std::string& name) {
  try {
    return name.empty() ? sgemm_best_isa() : sgemm_parse_isa(name);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

// A float32 matrix of rank 2, any strides (a multiple of the element size).
MatrixView view_2d(const py::array& x, const char* what, size_t& rows, size_t& cols) {
  if (!is_float32(x) || x.ndim() != 2) {
    throw py::type_error(std::string(what) + " must be a float32 array of rank 2");
  }
  constexpr auto kSize = static_cast<py::ssize_t>(sizeof(float));
  if (x.strides(0) % kSize != 0 || x.strides(1) % kSize != 0) {
    throw py::value_error(std::string(what) + " has unaligned strides");
  }
  rows = static_cast<size_t>(x.shape(0));
  cols = static_cast<size_t>(x.shape(1));
  return {static_cast<const float*>(x.data()), x.strides(0) / kSize, x.strides(1) / kSize};
}

// An operand of sgemm: a packed one of the right kind, or a float32 matrix.
struct Operand {
  MatrixView view;
  const SgemmPacked* packed = nullptr;
  size_t rows = 0, cols = 0;
};

Operand operand(const py::object& x, bool is_a, const char* what) {
  Operand op;
  if (py::isinstance<SgemmPacked>(x)) {
    op.packed = x.cast<const SgemmPacked*>();
    if (op.packed->is_a != is_a) {
      throw py::value_error(std::string(what) + " was packed as the " +
                            (op.packed->is_a ? "left (A)" : "right (B)") + " operand");
    }
    op.rows = op.packed->rows;
    op.cols = op.packed->cols;
  } else {
    op.view = view_2d(x.cast<py::array>(), what, op.rows, op.cols);
  }
  return op;
}

// An optional float32 bias of `want` values (kept alive by `keep`), or nullptr.
const float* bias_of(const py::object& bias_in, size_t want,
                     py::array_t<float, py::array::c_style | py::array::forcecast>& keep) {
  if (bias_in.is_none()) return nullptr;
  keep = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(bias_in);
  if (!keep) throw py::type_error("bias must be a float array");
  if (static_cast<size_t>(keep.size()) != want) {
    throw py::value_error("bias must have " + std::to_string(want) + " values");
  }
  return keep.data();
}

// A C-contiguous float32 array of rank 4.
void check_nchw(const py::array& x, const char* what) {
  if (!is_float32(x) || x.ndim() != 4 || !(x.flags() & py::array::c_style)) {
    throw py::type_error(std::string(what) + " must be a C-contiguous float32 array of rank 4");
  }
}

// A conv's geometry from its arrays' spatial sizes (x: channels c, plane h x w; out: oh x ow)
// and its attributes; kernel, strides and dilations must be positive.
Conv2dGeometry conv_geometry(size_t c, size_t h, size_t w, size_t oh, size_t ow,
                             std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                             std::array<size_t, 2> dilations,
                             std::array<std::ptrdiff_t, 2> pads) {
  Conv2dGeometry g;
  g.c = c;
  g.h = h;
  g.w = w;
  g.kh = kernel[0];
  g.kw = kernel[1];
  g.sh = strides[0];
  g.sw = strides[1];
  g.dh = dilations[0];
  g.dw = dilations[1];
  g.pt = pads[0];
  g.pl = pads[1];
  g.oh = oh;
  g.ow = ow;
  if (g.kh == 0 || g.kw == 0 || g.sh == 0 || g.sw == 0 || g.dh == 0 || g.dw == 0) {
    throw py::value_error("kernel, strides and dilations must be positive");
  }
  return g;
}

// An optional Z input of out's shape (C-contiguous float32): its data, or nullptr for None.
const float* z_of(const py::object& z_in, const py::array& out) {
  if (z_in.is_none()) return nullptr;
  const py::array z = z_in.cast<py::array>();
  check_nchw(z, "z");
  for (int i = 0; i < 4; ++i) {
    if (z.shape(i) != out.shape(i)) throw py::value_error("z must have the shape of out");
  }
  return static_cast<const float*>(z.data());
}

// A conv's GEMM epilogue: clamp to [lo, hi], the bias (cout values, kept alive by `keep`)
// along `axis` when given.
SgemmEpilogue conv_epilogue(const py::object& bias_in, size_t cout, BiasAxis axis, float lo,
                            float hi,
                            py::array_t<float, py::array::c_style | py::array::forcecast>& keep) {
  SgemmEpilogue ep;
  ep.lo = lo;
  ep.hi = hi;
  ep.bias = bias_of(bias_in, cout, keep);
  ep.axis = ep.bias != nullptr ? axis : BiasAxis::kNone;
  return ep;
}

// conv2d_nhwc_f32's checks and setup for arrays of x's and out's shapes, as a plan.
NhwcConvPlan conv2d_nhwc_plan(const py::array& x, const py::object& wt_in, const py::array& out,
                              std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                              std::array<size_t, 2> dilations, std::array<std::ptrdiff_t, 2> pads,
                              const py::object& bias_in, float lo, float hi,
                              const std::string& isa, bool with_z, int act,
                              bool with_scale) {
  check_nchw(x, "x");
  check_nchw(out, "out");
  if (!py::isinstance<SgemmPacked>(wt_in)) throw py::type_error("wt must be a SgemmPacked");
  const SgemmPacked& wt = wt_in.cast<const SgemmPacked&>();
  if (wt.is_a) throw py::value_error("wt must be W^T packed as the right (B) operand");
  const Conv2dGeometry g = conv_geometry(
      static_cast<size_t>(x.shape(3)), static_cast<size_t>(x.shape(1)),
      static_cast<size_t>(x.shape(2)), static_cast<size_t>(out.shape(1)),
      static_cast<size_t>(out.shape(2)), kernel, strides, dilations, pads);
  const size_t batch = static_cast<size_t>(x.shape(0)), cout = wt.cols;
  if (wt.rows != g.c * g.kh * g.kw) {
    throw py::value_error("wt has K = " + std::to_string(wt.rows) + ", x needs kh*kw*C = " +
                          std::to_string(g.c * g.kh * g.kw));
  }
  if (static_cast<size_t>(out.shape(0)) != batch || static_cast<size_t>(out.shape(3)) != cout) {
    throw py::value_error("out must have shape (N, OH, OW, Cout) = (" +
                          std::to_string(batch) + ", ..., " + std::to_string(cout) + ")");
  }
  py::array_t<float, py::array::c_style | py::array::forcecast> bias;
  SgemmEpilogue ep = conv_epilogue(bias_in, cout, BiasAxis::kCol, lo, hi, bias);
  ep.act = post_act_arg(act);
  const SgemmIsa v = sgemm_isa_arg(isa);
  NhwcConvPlan plan;
  plan.in_shape = shape_of(x);
  plan.out_shape = shape_of(out);
  plan.with_z = with_z;
  plan.keep = {wt_in, bias};
  const size_t l = g.oh * g.ow, image = g.h * g.w * g.c;
  const SgemmPacked* w = &wt;   // kept alive by plan.keep
  plan.run = [g, w, ep, v, batch, cout, l, image](const float* xp, float* yp, const float* zp,
                                                 size_t threads) {
    SgemmEpilogue e = ep;
    for (size_t i = 0; i < batch; ++i) {
      if (zp != nullptr) {
        e.z = zp + i * l * cout;
        e.ldz = cout;
      }
      conv2d_nhwc_f32(xp + i * image, g, *w, yp + i * l * cout, e, threads, v);
    }
  };
  if (with_scale) {
    if (!g.pointwise()) throw py::value_error("with_scale needs a 1x1 stride-1 unpadded conv");
    plan.with_scale = true;
    plan.run_scaled = [g, w, ep, v, batch, cout, l, image](const float* xp, float* yp,
                                                           const float* zp, const float* sp,
                                                           size_t s_step, size_t threads) {
      SgemmEpilogue e = ep;
      for (size_t i = 0; i < batch; ++i) {
        if (zp != nullptr) {
          e.z = zp + i * l * cout;
          e.ldz = cout;
        }
        conv2d_nhwc_f32(xp + i * image, g, *w, yp + i * l * cout, e, threads, v,
                        sp + i * s_step);
      }
    };
  }
  return plan;
}

}  // namespace

void register_sgemm(py::module_& m) {
  py::class_<SgemmPacked, std::shared_ptr<SgemmPacked>>(m, "SgemmPacked",
      "A float32 GEMM operand packed once (a weight): panels of 12 rows (A) or 32 columns (B).")
      .def_property_readonly("shape", [](const SgemmPacked& p) {
        return py::make_tuple(p.rows, p.cols);
      })
      .def_property_readonly("is_a", [](const SgemmPacked& p) { return p.is_a; })
      .def_property_readonly("nbytes", [](const SgemmPacked& p) {
        const size_t width = p.is_a ? kSgemmMr : kSgemmNr;
        const size_t outer = p.is_a ? p.rows : p.cols;
        return (outer + width - 1) / width * width * p.k * sizeof(float);
      });

  m.def("sgemm_isa", [] { return std::string(sgemm_isa_name(sgemm_best_isa())); },
        "The float32 GEMM variant used by default: avx512, avx2 or scalar (ONNXPLEX_MLAS_SGEMM_ISA may force one).");

  m.def("sgemm_pack_a", [](const py::array& a, size_t threads) {
    size_t rows = 0, cols = 0;
    const MatrixView v = view_2d(a, "a", rows, cols);
    py::gil_scoped_release release;
    return sgemm_pack_a(v, rows, cols, threads);
  }, py::arg("a"), py::arg("threads") = 1,
     "Packs a constant left operand A [M, K] (any strides), its panels on up to `threads` threads.");

  m.def("sgemm_pack_b", [](const py::array& b, size_t threads) {
    size_t rows = 0, cols = 0;
    const MatrixView v = view_2d(b, "b", rows, cols);
    py::gil_scoped_release release;
    return sgemm_pack_b(v, rows, cols, threads);
  }, py::arg("b"), py::arg("threads") = 1,
     "Packs a constant right operand B [K, N] (any strides), its panels on up to `threads` threads.");

  py::class_<SgemmNBits4, std::shared_ptr<SgemmNBits4>>(m, "SgemmNBits4",
      "A constant 4-bit B [K, N] (MatMulNBits) for sgemm, kept at 4 bits: panels of 32 "
      "columns dequantized as the GEMM reads them.")
      .def_property_readonly("shape", [](const SgemmNBits4& p) {
        return py::make_tuple(p.k, p.n);
      })
      .def_property_readonly("nbytes", &SgemmNBits4::nbytes);

  m.def("sgemm_pack_b_nbits4", [](const py::array& q_in, const py::array& scales_in,
                                  const py::array& zp_in, size_t k, size_t n, size_t block) {
    using U8 = py::array_t<uint8_t, py::array::c_style>;
    using F = py::array_t<float, py::array::c_style>;
    if (block < 2 || block % 2 != 0) throw py::value_error("block must be even and >= 2");
    const size_t kb = (k + block - 1) / block;
    if (!py::isinstance<U8>(q_in) || static_cast<size_t>(q_in.size()) != n * kb * (block / 2)) {
      throw py::value_error("q must be C-contiguous uint8 of N * k_blocks * block / 2 bytes");
    }
    for (const py::array* a : {&scales_in, &zp_in}) {
      if (!py::isinstance<F>(*a) || static_cast<size_t>(a->size()) != n * kb) {
        throw py::value_error("scales and zero points must be C-contiguous float32 [N, k_blocks]");
      }
    }
    const auto* q = static_cast<const uint8_t*>(q_in.data());
    const auto* sc = static_cast<const float*>(scales_in.data());
    const auto* zp = static_cast<const float*>(zp_in.data());
    py::gil_scoped_release release;
    return sgemm_pack_b_nbits4(q, sc, zp, k, n, block);
  }, py::arg("q"), py::arg("scales"), py::arg("zero_points"), py::arg("k"), py::arg("n"),
     py::arg("block"),
     "MatMulNBits 4-bit weights (q [N, k_blocks, block/2] uint8, scales and zero points "
     "[N, k_blocks] float32) as sgemm's B [K, N], kept at 4 bits.");

  m.def("sgemm", [](const py::object& a_in, const py::object& b_in, py::object out_in,
                    const py::object& bias_in, const std::string& bias_axis, float lo, float hi,
                    bool accumulate, size_t threads, const std::string& isa) {
    const SgemmNBits4* nb = py::isinstance<SgemmNBits4>(b_in) ? b_in.cast<const SgemmNBits4*>()
                                                                : nullptr;
    const Operand a = operand(a_in, true, "a");
    Operand b;
    if (nb != nullptr) {
      b.rows = nb->k;
      b.cols = nb->n;
    } else {
      b = operand(b_in, false, "b");
    }
    if (a.cols != b.rows) {
      throw py::value_error("a has K=" + std::to_string(a.cols) + ", b has K=" +
                            std::to_string(b.rows));
    }
    const size_t m_ = a.rows, n = b.cols, k = a.cols;
    py::array out;
    if (out_in.is_none()) {
      out = py::array_t<float>({static_cast<py::ssize_t>(m_), static_cast<py::ssize_t>(n)});
    } else {
      out = out_in.cast<py::array>();
      if (!is_float32(out) || out.ndim() != 2 ||
          static_cast<size_t>(out.shape(0)) != m_ || static_cast<size_t>(out.shape(1)) != n) {
        throw py::value_error("out must be a float32 array of shape (" + std::to_string(m_) +
                              ", " + std::to_string(n) + ")");
      }
      if (!out.writeable()) throw py::value_error("out must be writeable");
      if ((n > 1 && out.strides(1) != static_cast<py::ssize_t>(sizeof(float))) ||
          out.strides(0) % static_cast<py::ssize_t>(sizeof(float)) != 0 ||
          out.strides(0) < static_cast<py::ssize_t>(n * sizeof(float))) {
        throw py::value_error("out must have contiguous rows");
      }
    }
    const size_t ldc = m_ > 1 ? static_cast<size_t>(out.strides(0)) / sizeof(float) : n;
    if (accumulate && out_in.is_none()) {
      throw py::value_error("accumulate=True needs out (the C added to)");
    }
    SgemmEpilogue ep;
    ep.accumulate = accumulate;
    ep.lo = lo;
    ep.hi = hi;
    py::array_t<float, py::array::c_style | py::array::forcecast> bias;
    if (!bias_in.is_none()) {
      if (bias_axis == "row") {
        ep.axis = BiasAxis::kRow;
      } else if (bias_axis == "col") {
        ep.axis = BiasAxis::kCol;
      } else {
        throw py::value_error("bias_axis must be 'row' or 'col'");
      }
      ep.bias = bias_of(bias_in, ep.axis == BiasAxis::kRow ? m_ : n, bias);
    }
    const SgemmIsa v = sgemm_isa_arg(isa);
    float* c = static_cast<float*>(out.mutable_data());
    {
      py::gil_scoped_release release;
      if (nb != nullptr) {
        sgemm(a.view, a.packed, NBits4Source(*nb, v), m_, n, k, c, ldc, ep, threads, v);
      } else {
        sgemm(a.view, a.packed, b.view, b.packed, m_, n, k, c, ldc, ep, threads, v);
      }
    }
    return out;
  }, py::arg("a"), py::arg("b"), py::arg("out") = py::none(), py::arg("bias") = py::none(),
     py::arg("bias_axis") = "col", py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("accumulate") = false,
     py::arg("threads") = 0,
     py::arg("isa") = "",
     "out = clip(A @ B (+ out if accumulate) + bias, lo, hi); A/B a float32 matrix (any strides) or an SgemmPacked (B also an SgemmNBits4); "
     "bias per row ('row', M values) or per column ('col', N values); threads 0 = all.");

  // x @ B + bias, clamped, with everything but x bound once: a batch-1 Gemm's call was
  // mostly pybind11 converting sgemm's ten arguments (two of them strings).
  struct GemmPlan {
    std::shared_ptr<SgemmPacked> b;
    py::array_t<float, py::array::c_style | py::array::forcecast> bias;
    SgemmEpilogue ep;
    SgemmIsa isa;
  };
  py::class_<GemmPlan>(m, "SgemmPlan",
      "clip(x @ B + bias, lo, hi) for a packed right operand B, bias per column (or none), "
      "bounds and variant fixed: call it with x (a float32 matrix, any strides) and the "
      "threads; returns a new [M, N] array.")
      .def(py::init([](std::shared_ptr<SgemmPacked> b, const py::object& bias_in, float lo,
                       float hi, const std::string& isa) {
             if (b->is_a) throw py::value_error("b was packed as the left (A) operand");
             auto plan = std::make_unique<GemmPlan>();
             plan->b = std::move(b);
             plan->ep.lo = lo;
             plan->ep.hi = hi;
             plan->ep.axis = BiasAxis::kCol;
             plan->ep.bias = bias_of(bias_in, plan->b->cols, plan->bias);
             plan->isa = sgemm_isa_arg(isa);
             return plan;
           }), py::arg("b"), py::arg("bias"), py::arg("lo"), py::arg("hi"),
           py::arg("isa") = "")
      .def("__call__", [](const GemmPlan& plan, const py::array& x, size_t threads) {
        size_t m_ = 0, k = 0;
        const MatrixView a = view_2d(x, "x", m_, k);
        if (k != plan.b->rows) {
          throw py::value_error("x has K=" + std::to_string(k) + ", b has K=" +
                                std::to_string(plan.b->rows));
        }
        const size_t n = plan.b->cols;
        py::array_t<float> out({static_cast<py::ssize_t>(m_), static_cast<py::ssize_t>(n)});
        float* c = out.mutable_data();
        if (m_ * n * k < kKeepGilMacs) {
          sgemm(a, nullptr, MatrixView{}, plan.b.get(), m_, n, k, c, n, plan.ep, 1, plan.isa);
        } else {
          py::gil_scoped_release release;
          sgemm(a, nullptr, MatrixView{}, plan.b.get(), m_, n, k, c, n, plan.ep, threads,
                plan.isa);
        }
        return out;
      }, py::arg("x"), py::arg("threads"));

  m.def("conv2d_f32", [](const py::array& x, const SgemmPacked& w, py::array& out,
                         std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                         std::array<size_t, 2> dilations, std::array<std::ptrdiff_t, 2> pads,
                         const py::object& bias_in, float lo, float hi, bool accumulate,
                         size_t threads, const std::string& isa, const py::object& z_in) {
    check_nchw(x, "x");
    check_nchw(out, "out");
    if (!out.writeable()) throw py::value_error("out must be writeable");
    // w packed as A [Cout, C*kh*kw] (the direct orientation) or as B [C*kh*kw, Cout] (W^T: the
    // transposed one, conv2d_f32_transposed).
    const bool transposed = !w.is_a;
    const Conv2dGeometry g = conv_geometry(
        static_cast<size_t>(x.shape(1)), static_cast<size_t>(x.shape(2)),
        static_cast<size_t>(x.shape(3)), static_cast<size_t>(out.shape(2)),
        static_cast<size_t>(out.shape(3)), kernel, strides, dilations, pads);
    const size_t batch = static_cast<size_t>(x.shape(0)), cout = transposed ? w.cols : w.rows;
    const size_t wk = transposed ? w.rows : w.cols;
    if (wk != g.c * g.kh * g.kw) {
      throw py::value_error("w has K = " + std::to_string(wk) + ", x needs C*kh*kw = " +
                            std::to_string(g.c * g.kh * g.kw));
    }
    if (static_cast<size_t>(out.shape(0)) != batch || static_cast<size_t>(out.shape(1)) != cout) {
      throw py::value_error("out must have shape (N, Cout, OH, OW) = (" + std::to_string(batch) +
                            ", " + std::to_string(cout) + ", ...)");
    }
    const float* zp = z_of(z_in, out);
    if (zp != nullptr && accumulate) throw py::value_error("give z or accumulate, not both");
    py::array_t<float, py::array::c_style | py::array::forcecast> bias;
    SgemmEpilogue ep = conv_epilogue(bias_in, cout, BiasAxis::kRow, lo, hi, bias);
    ep.accumulate = accumulate;
    const SgemmIsa v = sgemm_isa_arg(isa);
    const float* xp = static_cast<const float*>(x.data());
    float* yp = static_cast<float*>(out.mutable_data());
    const size_t l = g.oh * g.ow, image = g.c * g.h * g.w;
    {
      py::gil_scoped_release release;
      // A 1x1 stride-1 unpadded conv is a plain GEMM on the image as a [C, H*W] matrix.
      const bool pointwise = g.pointwise();
      for (size_t i = 0; i < batch; ++i) {
        const float* xi = xp + i * image;
        float* yi = yp + i * cout * l;
        if (zp != nullptr) {
          ep.z = zp + i * cout * l;
          ep.ldz = l;
        }
        if (transposed) {
          conv2d_f32_transposed(xi, g, w, yi, ep, threads, v);
        } else if (pointwise) {
          const MatrixView xm{xi, static_cast<std::ptrdiff_t>(l), 1};
          sgemm(MatrixView{}, &w, xm, nullptr, cout, l, w.cols, yi, l, ep, threads, v);
        } else {
          sgemm(MatrixView{}, &w, Conv2dSource(xi, g, v), cout, l, w.cols, yi, l, ep, threads,
                v);
        }
      }
    }
    return out;
  }, py::arg("x"), py::arg("w"), py::arg("out"), py::arg("kernel"), py::arg("strides"),
     py::arg("dilations"), py::arg("pads"), py::arg("bias") = py::none(),
     py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("accumulate") = false,
     py::arg("threads") = 0, py::arg("isa") = "", py::arg("z") = py::none(),
     "2-D convolution (group 1) of x [N, C, H, W] with w packed as A [Cout, C*kh*kw] into out "
     "[N, Cout, OH, OW] (or w^T packed as B [C*kh*kw, Cout]: out^T = col^T @ w^T, then "
     "transposed, for small output planes): the GEMM reads im2col panels straight from x (taps in the padding "
     "read as 0); pads are the leading (top, left) ones; bias per output channel, clamp, "
     "accumulate as sgemm; z [N, Cout, OH, OW] (C-contiguous float32) is added before the clamp "
     "(read in place of out's values: out = clamp(conv + bias + z)).");

  m.def("conv2d_nhwc_f32", [](const py::array& x, const py::object& wt, py::array& out,
                              std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                              std::array<size_t, 2> dilations,
                              std::array<std::ptrdiff_t, 2> pads, const py::object& bias_in,
                              float lo, float hi, size_t threads, const std::string& isa,
                              const py::object& z_in, int act) {
    if (!out.writeable()) throw py::value_error("out must be writeable");
    const NhwcConvPlan plan = conv2d_nhwc_plan(x, wt, out, kernel, strides, dilations, pads,
                                               bias_in, lo, hi, isa, !z_in.is_none(), act,
                                               false);
    const float* zp = z_of(z_in, out);
    const float* xp = static_cast<const float*>(x.data());
    float* yp = static_cast<float*>(out.mutable_data());
    {
      py::gil_scoped_release release;
      plan.run(xp, yp, zp, threads);
    }
    return out;
  }, py::arg("x"), py::arg("wt"), py::arg("out"), py::arg("kernel"), py::arg("strides"),
     py::arg("dilations"), py::arg("pads"), py::arg("bias") = py::none(),
     py::arg("lo") = -std::numeric_limits<float>::infinity(),
     py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("threads") = 0,
     py::arg("isa") = "", py::arg("z") = py::none(), py::arg("act") = 0,
     "2-D convolution (group 1) of channels-last x [N, H, W, C] into out [N, OH, OW, Cout]: "
     "wt is W^T in (kh, kw, C) order, [kh*kw*C, Cout], packed as B; pads are the leading "
     "(top, left) ones; bias per output channel, then z [N, OH, OW, Cout] (C-contiguous "
     "float32) added, then the clamp: out = clamp(conv + bias + z, lo, hi); then act (0 none, "
     "1 SiLU x * sigmoid(x), 2 HardSwish x * clip(x / 6 + 0.5, 0, 1), 3 HardSigmoid clip(x / 6 + "
     "0.5, 0, 1)) on each finished tile.");

  m.def("conv2d_nhwc_f32_plan", &conv2d_nhwc_plan, py::arg("x"), py::arg("wt"), py::arg("out"),
        py::arg("kernel"), py::arg("strides"), py::arg("dilations"), py::arg("pads"),
        py::arg("bias") = py::none(), py::arg("lo") = -std::numeric_limits<float>::infinity(),
        py::arg("hi") = std::numeric_limits<float>::infinity(), py::arg("isa") = "",
        py::arg("with_z") = false, py::arg("act") = 0, py::arg("with_scale") = false,
        "conv2d_nhwc_f32 planned for arrays of x's and out's shapes (their values are not "
        "read): the plan's __call__(x, z=None, threads=0, s=None) returns a new out. with_z: "
        "every call passes z; act as conv2d_nhwc_f32's; with_scale (a 1x1 stride-1 unpadded "
        "conv): every call passes s [N or 1, 1, 1, C], x's channels read times s's values "
        "(a squeeze-excite gate's Mul, fused).");

  py::class_<NhwcConvPlan>(m, "NhwcConvPlan",
                           "A channels-last conv bound to one input shape (conv2d_nhwc_f32_plan, "
                           "dwconv_nhwc_f32_plan).")
      .def("__call__", &NhwcConvPlan::call, py::arg("x"), py::arg("z") = py::none(),
           py::arg("threads") = 0, py::arg("s") = py::none())
      .def_property_readonly("out_shape", [](const NhwcConvPlan& p) {
        return py::tuple(py::cast(p.out_shape));
      });
}

}  // namespace onnxplex::mlas::bind
