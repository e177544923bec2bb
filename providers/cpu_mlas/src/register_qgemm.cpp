// Bindings of the integer GEMM: arrays in, shape and dtype checks, GIL released around compute.
#include <array>
#include <memory>
#include <stdexcept>

#include <pybind11/stl.h>

#include "bind_util.h"
#include "qgemm.h"

namespace onnxplex::mlas::bind {

namespace {

QgemmIsa isa_arg(const std::string& name) {
  try {
    return name.empty() ? best_isa() : parse_isa(name);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
}

// ValueError unless value is in int8's range (is_signed) or uint8's.
void check_8bit(int64_t value, bool is_signed, const std::string& what) {
  if (value < (is_signed ? -128 : 0) || value > (is_signed ? 127 : 255)) {
    throw py::value_error(what + " outside the 8-bit type's range");
  }
}

// The requantization bindings' shared arguments, checked: bias (None or one int32 a
// channel), multiplier (1 or one float64 a channel), zero point in the output's range.
struct RequantArgs {
  std::vector<int32_t> bias;
  py::array_t<double, py::array::c_style | py::array::forcecast> multiplier;
  py::dtype out_type;

  RequantArgs(const py::object& bias_in, const py::object& multiplier_in, size_t channels,
              int32_t zero_point, bool out_signed)
      : bias(int32_values(bias_in)),
        multiplier(py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(
            multiplier_in)),
        out_type(out_signed ? py::dtype::of<int8_t>() : py::dtype::of<uint8_t>()) {
    if (!bias.empty() && bias.size() != channels) {
      throw py::value_error("bias must have one value per channel");
    }
    if (!multiplier ||
        (multiplier.size() != 1 && static_cast<size_t>(multiplier.size()) != channels)) {
      throw py::value_error("multiplier must have 1 or one value per channel");
    }
    check_8bit(zero_point, out_signed, "zero_point");
  }
};

// ValueError unless a 2-D conv of that geometry reads only inside the padded h x w input.
void check_conv_geometry(size_t h, size_t w, const std::array<size_t, 2>& kernel,
                         const std::array<size_t, 2>& strides,
                         const std::array<size_t, 2>& dilations,
                         const std::array<size_t, 4>& pads, const std::array<size_t, 2>& out_hw) {
  const size_t padded[2] = {h + pads[0] + pads[2], w + pads[1] + pads[3]};
  for (int i = 0; i < 2; ++i) {
    const size_t span = (kernel[i] - 1) * dilations[i] + 1;
    if (kernel[i] == 0 || strides[i] == 0 || dilations[i] == 0 ||
        (out_hw[i] > 0 && (out_hw[i] - 1) * strides[i] + span > padded[i])) {
      throw py::value_error("the conv geometry reads past the padded input");
    }
  }
}

// An 8-bit NCHW image batch argument and its zero point, checked: the C-contiguous array,
// its signedness and its dims.
struct Image8 {
  bool is_signed = false;   // (before x: int8_array sets it as x is initialized)
  py::array x;
  size_t n, c, h, w;

  // channels_last: x is [N, H, W, C]
  Image8(const py::array& x_in, int32_t zero_point, bool channels_last = false)
      : x(int8_array(x_in, "x", is_signed)) {
    if (x.ndim() != 4) {
      throw py::value_error(channels_last ? "x must be [N, H, W, C]" : "x must be [N, C, H, W]");
    }
    check_8bit(zero_point, is_signed, "x_zero_point");
    n = static_cast<size_t>(x.shape(0));
    c = static_cast<size_t>(x.shape(channels_last ? 3 : 1));
    h = static_cast<size_t>(x.shape(channels_last ? 1 : 2));
    w = static_cast<size_t>(x.shape(channels_last ? 2 : 3));
  }

  const uint8_t* data() const { return static_cast<const uint8_t*>(x.data()); }
};

void check_2d(const py::array& a, const char* what) {
  if (a.ndim() != 2) throw py::value_error(std::string(what) + " must be 2-D");
}

void pack_a_checked(const py::array& a_in, const py::object& a_zp, const PackedB& b,
                    size_t threads, PackedA& pa) {
  check_2d(a_in, "a");
  bool a_signed = false;
  const py::array a = int8_array(a_in, "a", a_signed);
  const auto m = static_cast<size_t>(a.shape(0)), k = static_cast<size_t>(a.shape(1));
  if (k != b.k) throw py::value_error("a has K=" + std::to_string(k) + ", b has K=" +
                                      std::to_string(b.k));
  const std::vector<int32_t> zp = int32_values(a_zp);
  if (!zp.empty() && zp.size() != 1 && zp.size() != m) {
    throw py::value_error("a_zero_point must have 1 or M values");
  }
  const void* ptr = a.data();
  py::gil_scoped_release release;
  pack_a(ptr, a_signed, m, k, zp.data(), zp.size(), b.isa, threads, pa);
}

}  // namespace

void register_qgemm(py::module_& m) {
  py::class_<PackedB, std::shared_ptr<PackedB>>(m, "PackedB",
      "B of an integer GEMM, centered, laid out for one qgemm variant (immutable).")
      .def_property_readonly("k", [](const PackedB& p) { return p.k; })
      .def_property_readonly("n", [](const PackedB& p) { return p.n; })
      .def_property_readonly("isa", [](const PackedB& p) { return isa_name(p.isa); })
      .def_property_readonly("nbytes", [](const PackedB& p) { return p.data.size(); });

  m.def("pack_b", [](const py::array& b_in, const py::object& zero_point,
                     const std::string& isa, size_t threads) {
    check_2d(b_in, "b");
    bool b_signed = false;
    const py::array b = int8_array(b_in, "b", b_signed);
    const std::vector<int32_t> zp = int32_values(zero_point);
    const auto k = static_cast<size_t>(b.shape(0)), n = static_cast<size_t>(b.shape(1));
    if (!zp.empty() && zp.size() != 1 && zp.size() != n) {
      throw py::value_error("b_zero_point must have 1 or N values");
    }
    const QgemmIsa v = isa_arg(isa);
    const void* ptr = b.data();
    py::gil_scoped_release release;
    return std::make_shared<PackedB>(
        pack_b(ptr, b_signed, k, n, n, zp.data(), zp.size(), v, threads));
  }, py::arg("b"), py::arg("zero_point") = py::none(), py::arg("isa") = "",
     py::arg("threads") = 1,
     "Packs int8/uint8 B [K, N] with its zero point (None, 1 or N values) for a variant "
     "('' = the best this CPU runs), on up to `threads` threads (0 = all).");

  m.def("qgemm_i32", [](const py::array& a, const py::object& a_zp, const PackedB& b,
                        size_t threads) {
    PackedA pa;
    pack_a_checked(a, a_zp, b, threads, pa);
    py::array_t<int32_t> c({static_cast<py::ssize_t>(pa.m), static_cast<py::ssize_t>(b.n)});
    int32_t* out = c.mutable_data();
    {
      py::gil_scoped_release release;
      qgemm_i32(pa, b, out, b.n, threads);
    }
    return c;
  }, py::arg("a"), py::arg("a_zero_point"), py::arg("b"), py::arg("threads") = 0,
     "(A - a_zp) @ (B - b_zp) in int32 (a_zp: None, 1 or M values; threads 0 = all).");

  m.def("qlinear_binary_8bit", [](const py::array& a_in, float a_scale, int32_t a_zero_point,
                                  bool a_full, const py::array& b_in, float b_scale,
                                  int32_t b_zero_point, bool b_full, float c_scale,
                                  int32_t c_zero_point, bool out_signed, bool mul,
                                  std::vector<py::ssize_t> out_shape, size_t rows,
                                  size_t inner, size_t threads, bool a_cyclic, bool b_cyclic) {
    bool a_signed = false, b_signed = false;
    const py::array a = int8_array(a_in, "a", a_signed);
    const py::array b = int8_array(b_in, "b", b_signed);
    check_8bit(a_zero_point, a_signed, "a_zero_point");
    check_8bit(b_zero_point, b_signed, "b_zero_point");
    check_8bit(c_zero_point, out_signed, "c_zero_point");
    size_t total = 1;
    for (py::ssize_t d : out_shape) {
      if (d < 0) throw py::value_error("out_shape has a negative dimension");
      total *= static_cast<size_t>(d);
    }
    if (rows * inner != total) throw py::value_error("rows * inner is not out_shape's size");
    if ((a_cyclic && !a_full) || (b_cyclic && !b_full)) {
      throw py::value_error("a cyclic operand is a full one (one value per element of a row)");
    }
    if (static_cast<size_t>(a.size()) != (a_cyclic ? inner : a_full ? total : rows) ||
        static_cast<size_t>(b.size()) != (b_cyclic ? inner : b_full ? total : rows)) {
      throw py::value_error("an operand's size does not match its broadcast");
    }
    py::array y(out_signed ? py::dtype::of<int8_t>() : py::dtype::of<uint8_t>(), out_shape);
    const QBinaryOperand qa{a.data(), a_signed, a_full, a_scale,
                            static_cast<float>(a_zero_point), a_cyclic};
    const QBinaryOperand qb{b.data(), b_signed, b_full, b_scale,
                            static_cast<float>(b_zero_point), b_cyclic};
    void* yp = y.mutable_data();
    {
      py::gil_scoped_release release;
      qlinear_binary_8bit(qa, qb, c_scale, static_cast<float>(c_zero_point), out_signed, mul,
                          rows, inner, yp, threads);
    }
    return y;
  }, py::arg("a"), py::arg("a_scale"), py::arg("a_zero_point"), py::arg("a_full"),
     py::arg("b"), py::arg("b_scale"), py::arg("b_zero_point"), py::arg("b_full"),
     py::arg("c_scale"), py::arg("c_zero_point"), py::arg("out_signed"), py::arg("mul"),
     py::arg("out_shape"), py::arg("rows"), py::arg("inner"), py::arg("threads") = 1,
     py::arg("a_cyclic") = false, py::arg("b_cyclic") = false,
     "com.microsoft QLinearAdd / QLinearMul (mul) of per-tensor 8-bit a and b into "
     "out_shape, computed as the numpy kernel does in float32: rows x inner outputs; an "
     "operand not full holds one value per row, a cyclic one (full) inner values repeated "
     "every row.");

  m.def("lookup_8bit", [](const py::array& x_in, const py::array& table_in, size_t threads) {
    bool x_signed = false, t_signed = false;
    const py::array x = int8_array(x_in, "x", x_signed);
    const py::array table = int8_array(table_in, "table", t_signed);
    if (table.size() != 256) throw py::value_error("table must hold 256 values");
    std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
    py::array out(table.dtype(), shape);
    const auto* xp = static_cast<const uint8_t*>(x.data());
    const auto* tp = static_cast<const uint8_t*>(table.data());
    auto* op = static_cast<uint8_t*>(out.mutable_data());
    const auto n = static_cast<size_t>(x.size());
    {
      py::gil_scoped_release release;
      lookup_8bit(xp, n, tp, op, threads);
    }
    return out;
  }, py::arg("x"), py::arg("table"), py::arg("threads") = 1,
     "out[i] = table[x[i]'s byte] for an int8/uint8 x and a 256-value int8/uint8 table "
     "(indexed by the byte: an int8 -1 reads entry 255); the table's type, x's shape.");

  m.def("qlinear_global_average_pool_8bit", [](const py::array& x_in, float x_zero_point,
                                                float x_scale, float y_scale,
                                                float y_zero_point, bool out_signed,
                                                size_t threads) {
    bool x_signed = false;
    const py::array x = int8_array(x_in, "x", x_signed);
    if (x.ndim() != 3 || x.shape(1) == 0) {
      throw py::value_error("x must be 3-D [images, rows, columns] with rows");
    }
    const auto images = static_cast<size_t>(x.shape(0)), rows = static_cast<size_t>(x.shape(1)),
               cols = static_cast<size_t>(x.shape(2));
    if (rows >= (size_t{1} << 23)) throw py::value_error("more than 2^23 rows: int32 sums overflow");
    const auto dt = out_signed ? py::dtype::of<int8_t>() : py::dtype::of<uint8_t>();
    py::array out(dt, std::vector<py::ssize_t>{x.shape(0), x.shape(2)});
    const void* xp = x.data();
    void* op = out.mutable_data();
    {
      py::gil_scoped_release release;
      qlinear_global_average_pool_8bit(xp, x_signed, images, rows, cols, x_zero_point, x_scale,
                                       y_scale, y_zero_point, out_signed, op, threads);
    }
    return out;
  }, py::arg("x"), py::arg("x_zero_point"), py::arg("x_scale"), py::arg("y_scale"),
     py::arg("y_zero_point"), py::arg("out_signed"), py::arg("threads") = 1,
     "com.microsoft QLinearGlobalAveragePool of channels-last int8/uint8 x [images, rows, "
     "columns]: [images, columns] of int8 (out_signed) or uint8.");

  m.def("dequantize_8bit", [](const py::array& x_in, float scale, int32_t zero_point) {
    bool x_signed = false;
    const py::array x = int8_array(x_in, "x", x_signed);
    check_8bit(zero_point, x_signed, "zero_point");
    std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
    py::array_t<float> y(shape);
    const void* xp = x.data();
    float* yp = y.mutable_data();
    const auto n = static_cast<size_t>(x.size());
    {
      py::gil_scoped_release release;
      dequantize_8bit(xp, x_signed, n, scale, zero_point, yp);
    }
    return y;
  }, py::arg("x"), py::arg("scale"), py::arg("zero_point"),
     "Per-tensor DequantizeLinear of an int8/uint8 array: (float(x) - zero_point) * scale in "
     "float32, x's shape.");

  m.def("quantize_8bit", [](const py::array_t<float, py::array::c_style>& x, float scale,
                            int32_t zero_point, bool q_signed) {
    check_8bit(zero_point, q_signed, "zero_point");
    std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
    const auto dt = q_signed ? py::dtype::of<int8_t>() : py::dtype::of<uint8_t>();
    py::array q(dt, shape);
    const float* xp = x.data();
    void* qp = q.mutable_data();
    const auto n = static_cast<size_t>(x.size());
    {
      py::gil_scoped_release release;
      quantize_8bit(xp, n, scale, zero_point, q_signed, qp);
    }
    return q;
  }, py::arg("x"), py::arg("scale"), py::arg("zero_point"), py::arg("q_signed"),
     "Per-tensor QuantizeLinear of a float32 array to int8 (q_signed) or uint8: "
     "saturate(round_half_even(x / scale) + zero_point), x's shape (NaN gives 0).");

  m.def("qlinear_conv_u8", [](const py::array& x_in, int32_t x_zero_point, const PackedB& wt,
                              std::array<size_t, 2> kernel, std::array<size_t, 2> strides,
                              std::array<size_t, 2> dilations, std::array<size_t, 4> pads,
                              std::array<size_t, 2> out_hw, const py::object& bias_in,
                              const py::object& multiplier_in, int32_t y_zero_point,
                              bool out_signed, size_t threads, bool channels_last) {
    const Image8 x(x_in, x_zero_point, channels_last);
    check_conv_geometry(x.h, x.w, kernel, strides, dilations, pads, out_hw);
    if (kernel[0] * kernel[1] * x.c != wt.k) {
      throw py::value_error("the packed weight's K is not kh * kw * C");
    }
    const RequantArgs r(bias_in, multiplier_in, wt.n, y_zero_point, out_signed);
    const auto m = static_cast<py::ssize_t>(wt.n), oh = static_cast<py::ssize_t>(out_hw[0]),
               ow = static_cast<py::ssize_t>(out_hw[1]);
    py::array out(r.out_type, channels_last
                                  ? std::vector<py::ssize_t>{x.x.shape(0), oh, ow, m}
                                  : std::vector<py::ssize_t>{x.x.shape(0), m, oh, ow});
    void* op = out.mutable_data();
    const size_t mc = static_cast<size_t>(r.multiplier.size());
    {
      py::gil_scoped_release release;
      qlinear_conv_u8(x.data(), x.is_signed, x.n, x.c, x.h, x.w, x_zero_point, wt, kernel[0],
                      kernel[1], strides[0], strides[1], dilations[0], dilations[1], pads[0],
                      pads[1], pads[2], pads[3], out_hw[0], out_hw[1],
                      r.bias.empty() ? nullptr : r.bias.data(), r.multiplier.data(), mc,
                      y_zero_point, out_signed, channels_last, op, threads);
    }
    return out;
  }, py::arg("x"), py::arg("x_zero_point"), py::arg("wt"), py::arg("kernel"),
     py::arg("strides"), py::arg("dilations"), py::arg("pads"), py::arg("out_hw"),
     py::arg("bias"), py::arg("multiplier"), py::arg("y_zero_point"), py::arg("out_signed"),
     py::arg("threads") = 1, py::arg("channels_last") = false,
     "A one-group 2-D QLinearConv of 8-bit x [N, C, H, W] ([N, H, W, C] when channels_last; "
     "per-tensor x_zero_point) with a packed weight wt (W^T in (ky, kx, C) order, pack_b): "
     "im2col rows, the integer GEMM and requantize_i32 (bias, multiplier, y_zero_point as "
     "there) into [N, M, OH, OW] ([N, OH, OW, M] when channels_last); its scratch buffers are "
     "the calling thread's, kept between calls.");

  py::class_<QdwVnniWeights, std::shared_ptr<QdwVnniWeights>>(m, "QdwPacked",
      "A depthwise conv's weights packed for the 8-bit kernel (qdw_pack_vnni; immutable).")
      .def_property_readonly("usable", [](const QdwVnniWeights& p) { return !p.wq.empty(); });

  m.def("qdw_pack_vnni", [](const py::array_t<float, py::array::c_style | py::array::forcecast>&
                                wf) {
    if (wf.ndim() != 3) throw py::value_error("wf must be [C, kh, kw]");
    return std::make_shared<QdwVnniWeights>(qdw_pack_vnni(
        wf.data(), static_cast<size_t>(wf.shape(0)), static_cast<size_t>(wf.shape(1)),
        static_cast<size_t>(wf.shape(2))));
  }, py::arg("wf"),
     "qdwconv_u8's weights wf [C, kh, kw] packed once for its 8-bit AVX-512 VNNI kernel (int8 "
     "quads of kernel rows and each channel's weight sum); not usable (the float path runs) "
     "when a weight is no integer in [-128, 127] or the CPU has no VNNI.");

  m.def("qdwconv_u8", [](const py::array& x_in, int32_t x_zero_point,
                         const py::array_t<float, py::array::c_style | py::array::forcecast>& wf,
                         std::array<size_t, 2> strides, std::array<size_t, 2> dilations,
                         std::array<size_t, 4> pads, std::array<size_t, 2> out_hw,
                         const py::object& bias_in, const py::object& multiplier_in,
                         int32_t y_zero_point, bool out_signed, size_t threads,
                         bool channels_last, const std::shared_ptr<QdwVnniWeights>& packed) {
    const Image8 x(x_in, x_zero_point, channels_last);
    if (wf.ndim() != 3 || static_cast<size_t>(wf.shape(0)) != x.c) {
      throw py::value_error("wf must be [C, kh, kw]");
    }
    const std::array<size_t, 2> kernel{static_cast<size_t>(wf.shape(1)),
                                       static_cast<size_t>(wf.shape(2))};
    check_conv_geometry(x.h, x.w, kernel, strides, dilations, pads, out_hw);
    const RequantArgs r(bias_in, multiplier_in, x.c, y_zero_point, out_signed);
    const auto c = static_cast<py::ssize_t>(x.c), oh = static_cast<py::ssize_t>(out_hw[0]),
               ow = static_cast<py::ssize_t>(out_hw[1]);
    py::array out(r.out_type, channels_last
                                  ? std::vector<py::ssize_t>{x.x.shape(0), oh, ow, c}
                                  : std::vector<py::ssize_t>{x.x.shape(0), c, oh, ow});
    const float* wp = wf.data();
    void* op = out.mutable_data();
    const size_t mc = static_cast<size_t>(r.multiplier.size());
    {
      py::gil_scoped_release release;
      qdwconv_u8(x.data(), x.is_signed, x.n, x.c, x.h, x.w, x_zero_point, wp, kernel[0],
                 kernel[1], strides[0], strides[1], dilations[0], dilations[1], pads[0], pads[1],
                 out_hw[0], out_hw[1], r.bias.empty() ? nullptr : r.bias.data(),
                 r.multiplier.data(), mc, y_zero_point, out_signed, channels_last, op,
                 threads, packed.get());
    }
    return out;
  }, py::arg("x"), py::arg("x_zero_point"), py::arg("wf"), py::arg("strides"),
     py::arg("dilations"), py::arg("pads"), py::arg("out_hw"), py::arg("bias"),
     py::arg("multiplier"), py::arg("y_zero_point"), py::arg("out_signed"),
     py::arg("threads") = 1, py::arg("channels_last") = false,
     py::arg("packed") = std::shared_ptr<QdwVnniWeights>(),
     "A depthwise 2-D QLinearConv of 8-bit x [N, C, H, W] ([N, H, W, C] when channels_last; "
     "per-tensor x_zero_point) with centered float weights wf [C, kh, kw] (w - w_zero_point): "
     "centered, convolved in float32 (exact) and requantized as requantize_i32, a few channels "
     "(channels-last: output rows) a task, into [N, C, OH, OW] ([N, OH, OW, C]). Channels-last "
     "with AVX-512 VNNI and int8 weights: on the 8-bit input itself (vpdpbusd), the same bytes; "
     "packed: qdw_pack_vnni(wf), done once (else per call).");

  m.def("requantize_f32_channels", [](const py::array_t<float, py::array::c_style>& y,
                                      const py::object& bias_in,
                                      const py::object& multiplier_in, int32_t zero_point,
                                      bool out_signed, size_t threads) {
    if (y.ndim() != 3) throw py::value_error("y must be [images, channels, positions]");
    const auto images = static_cast<size_t>(y.shape(0));
    const auto channels = static_cast<size_t>(y.shape(1));
    const auto positions = static_cast<size_t>(y.shape(2));
    const RequantArgs r(bias_in, multiplier_in, channels, zero_point, out_signed);
    const std::vector<int32_t>& bias = r.bias;
    const auto& mult = r.multiplier;
    const py::dtype dt = r.out_type;
    py::array out(dt, std::vector<py::ssize_t>{y.shape(0), y.shape(1), y.shape(2)});
    const float* yp = y.data();
    const double* mp = mult.data();
    const size_t mc = static_cast<size_t>(mult.size());
    void* op = out.mutable_data();
    {
      py::gil_scoped_release release;
      requantize_f32_channels(yp, images, channels, positions,
                              bias.empty() ? nullptr : bias.data(), mp, mc, zero_point,
                              out_signed, op, threads);
    }
    return out;
  }, py::arg("y"), py::arg("bias"), py::arg("multiplier"), py::arg("zero_point"),
     py::arg("out_signed"), py::arg("threads") = 1,
     "requantize_i32 for sums held as float32 integers (each below 2^24 in magnitude) in y "
     "[images, channels, positions], into an 8-bit array of y's shape.");

  m.def("requantize_i32", [](const py::array_t<int32_t, py::array::c_style>& acc,
                             const py::object& bias_in, const py::object& multiplier_in,
                             int32_t zero_point, bool out_signed, bool channels_first,
                             size_t threads) {
    if (acc.ndim() != 3) throw py::value_error("acc must be [images, positions, channels]");
    const auto images = static_cast<size_t>(acc.shape(0));
    const auto positions = static_cast<size_t>(acc.shape(1));
    const auto channels = static_cast<size_t>(acc.shape(2));
    const RequantArgs r(bias_in, multiplier_in, channels, zero_point, out_signed);
    const std::vector<int32_t>& bias = r.bias;
    const auto& mult = r.multiplier;
    const py::dtype dt = r.out_type;
    py::array out(dt, channels_first
                          ? std::vector<py::ssize_t>{acc.shape(0), acc.shape(2), acc.shape(1)}
                          : std::vector<py::ssize_t>{acc.shape(0), acc.shape(1), acc.shape(2)});
    const int32_t* ap = acc.data();
    const double* mp = mult.data();
    const size_t mc = static_cast<size_t>(mult.size());
    void* op = out.mutable_data();
    {
      py::gil_scoped_release release;
      requantize_i32(ap, images, positions, channels, bias.empty() ? nullptr : bias.data(), mp,
                     mc, zero_point, out_signed, channels_first, op, threads);
    }
    return out;
  }, py::arg("acc"), py::arg("bias"), py::arg("multiplier"), py::arg("zero_point"),
     py::arg("out_signed"), py::arg("channels_first"), py::arg("threads") = 1,
     "8-bit saturate(round_half_even(float64(acc + bias) * multiplier) + zero_point) of int32 "
     "acc [images, positions, channels]; out [images, channels, positions] when "
     "channels_first, else acc's shape (bias: None or per channel; multiplier: 1 or per "
     "channel).");

  m.def("qgemm_f32", [](const py::array& a, const py::object& a_zp, const PackedB& b,
                        const py::object& scale, const py::object& bias, size_t threads) {
    const std::vector<float> s = float_values(scale), bi = float_values(bias);
    if (s.size() != 1 && s.size() != b.n) throw py::value_error("scale must have 1 or N values");
    if (!bi.empty() && bi.size() != b.n) throw py::value_error("bias must have N values");
    PackedA pa;
    pack_a_checked(a, a_zp, b, threads, pa);
    py::array_t<float> c({static_cast<py::ssize_t>(pa.m), static_cast<py::ssize_t>(b.n)});
    float* out = c.mutable_data();
    {
      py::gil_scoped_release release;
      qgemm_f32(pa, b, s.data(), s.size(), bi.empty() ? nullptr : bi.data(), out, b.n,
                threads);
    }
    return c;
  }, py::arg("a"), py::arg("a_zero_point"), py::arg("b"), py::arg("scale"),
     py::arg("bias") = py::none(), py::arg("threads") = 0,
     "float32((A - a_zp) @ (B - b_zp)) * scale (+ bias); scale 1 or N values.");

  m.def("dynamic_qgemm_f32", [](const py::array_t<float, py::array::c_style |
                                                        py::array::forcecast>& a,
                                const PackedB& b, const py::object& b_scale,
                                const py::object& bias, size_t threads) {
    if (a.ndim() != 2) throw py::value_error("a must be 2-D");
    const auto m = static_cast<size_t>(a.shape(0)), k = static_cast<size_t>(a.shape(1));
    if (k != b.k) throw py::value_error("a has K=" + std::to_string(k) + ", b has K=" +
                                        std::to_string(b.k));
    std::vector<float> s = float_values(b_scale);
    const std::vector<float> bi = float_values(bias);
    if (s.size() != 1 && s.size() != b.n) {
      throw py::value_error("b_scale must have 1 or N values");
    }
    if (!bi.empty() && bi.size() != b.n) throw py::value_error("bias must have N values");
    py::array_t<float> c({static_cast<py::ssize_t>(m), static_cast<py::ssize_t>(b.n)});
    float* out = c.mutable_data();
    const float* x = a.data();
    float a_scale = 1.0f;
    int32_t a_zp = 0;
    {
      py::gil_scoped_release release;
      PackedA pa;
      quantize_pack_a(x, m, k, b.isa, threads, pa, a_scale, a_zp);
      for (float& v : s) v = a_scale * v;  // float32(a_scale * b_scale), as numpy
      qgemm_f32(pa, b, s.data(), s.size(), bi.empty() ? nullptr : bi.data(), out, b.n,
                threads);
    }
    return py::make_tuple(c, a_scale, a_zp);
  }, py::arg("a"), py::arg("b"), py::arg("b_scale"), py::arg("bias") = py::none(),
     py::arg("threads") = 0,
     "DynamicQuantizeLinear(a) (uint8), then its integer product with B, times "
     "a_scale * b_scale (+ bias). Returns (y, a_scale, a_zero_point).");
}

}  // namespace onnxplex::mlas::bind
