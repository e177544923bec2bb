// Integer GEMM for the quantized matmuls of cpu_mlas (MatMulInteger, MatMulIntegerToFloat,
// DynamicQuantizeMatMul). Knows nothing about Python.
//
// Every variant computes C = (A - a_zp) @ (B - b_zp) exactly in int32 (wrapping on overflow),
// with A uint8 or int8, B int8 or uint8. Operands are brought to one form first:
//   A as uint8 (int8 A + 128, zero point + 128), B as int8 (uint8 B - 128, zero point - 128),
// and the raw product sum(a*b) is corrected with the row sums of A and the column sums of B:
//   C[m,n] = sum_k a*b + a_zp[m] * (K * b_zp[n] - colsum_b[n]) - b_zp[n] * rowsum_a[m].
// The float epilogue is C * scale[n] (+ bias[n]), one float32 rounding per operation (no FMA),
// as numpy computes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dwconv.h"
#include "weight_buffer.h"

namespace onnxplex::mlas {

enum class QgemmIsa { kScalar = 0, kAvx2 = 1, kAvx512Vnni = 2, kAmx = 3 };

const char* isa_name(QgemmIsa isa);
// The best variant this CPU runs (and this build has), or the one the environment variable
// ONNXPLEX_MLAS_ISA (scalar|avx2|avx512vnni|amx) names, if the CPU runs it.
QgemmIsa best_isa();
bool isa_available(QgemmIsa isa);
// Parses a variant name; throws std::invalid_argument for an unknown or unavailable one.
QgemmIsa parse_isa(const std::string& name);

// How a variant lays out its operands.
struct QgemmLayout {
  size_t panel;      // columns of B per packed panel (N is padded to a multiple)
  size_t kgroup;     // consecutive k values per column in a panel (K padded to a multiple)
  size_t b_bytes;    // bytes per packed B element: 1 (int8) or 2 (int16)
  size_t a_bytes;    // bytes per packed A element: 1 (uint8) or 2 (uint16)
  size_t mr;         // rows per micro-tile (PackedA rows are padded to a multiple)
  size_t kpad;       // K is padded to a multiple of this (a multiple of kgroup)
};
QgemmLayout layout_of(QgemmIsa isa);

// B, centered and laid out once (constant weights: at kernel-factory time).
struct PackedB {
  QgemmIsa isa = QgemmIsa::kScalar;
  size_t k = 0, n = 0, kp = 0, np = 0;
  WeightBuffer<uint8_t> data;    // np / panel panels of [kp / kgroup][panel][kgroup] elements
  std::vector<int32_t> zp;       // [np] zero point in the int8 domain (0 past n)
  std::vector<int32_t> corr;     // [np] K * zp - colsum (wrapping)
  bool zp_zero = true;           // every zero point (in the int8 domain) 0
};

// b: [k, n] row-major (row stride ldb elements), int8 if b_signed else uint8. zero_points: 1
// (per tensor) or n values (per column) in B's own domain, or none (count 0).
// Panels are packed on up to `threads` threads (0 = all).
PackedB pack_b(const void* b, bool b_signed, size_t k, size_t n, size_t ldb,
               const int32_t* zero_points, size_t zp_count, QgemmIsa isa, size_t threads = 1);

// A, converted to the variant's unsigned form, K padded with zeros, with its row sums.
struct PackedA {
  size_t m = 0, kp = 0;
  std::vector<uint8_t> data;     // [m][kp] elements of layout.a_bytes bytes
  std::vector<int32_t> row_sum;  // [m]
  std::vector<int32_t> zp;       // [m] zero point in the uint8 domain
  const uint8_t* view = nullptr;   // rows read in place instead of data (view_a)
};

// a: [m, k] row-major, int8 if a_signed else uint8; zero_points: none, 1 or m values.
void pack_a(const void* a, bool a_signed, size_t m, size_t k, const int32_t* zero_points,
            size_t zp_count, QgemmIsa isa, size_t threads, PackedA& out);

// uint8 rows a [m, k] as A without copying them, where the variant reads such rows as they
// are (one byte an element, K a multiple of its k group): false otherwise. The row sums are
// not computed, so the A is only for a B whose zero points are all 0 (qgemm refuses others).
bool view_a(const uint8_t* a, size_t m, size_t k, int32_t zero_point, QgemmIsa isa,
            PackedA& out);

// DynamicQuantizeLinear of float32 a [m, k] into A (uint8, one scale and zero point):
// scale = (max(0, max a) - min(0, min a)) / 255 (1 if that is 0), zp = round(clip(-min/scale)),
// q = clip(round(a / scale), -zp, 255 - zp) + zp, rounding half to even.
void quantize_pack_a(const float* a, size_t m, size_t k, QgemmIsa isa, size_t threads,
                     PackedA& out, float& scale, int32_t& zero_point);

// C = A @ B corrected for the zero points; int32 out [m, n] (row stride ldc).
void qgemm_i32(const PackedA& a, const PackedB& b, int32_t* c, size_t ldc, size_t threads);
// C = A @ B corrected, plus bias[n], requantized as requantize_i32 (multiplier[n], finite) in
// the micro-kernel's epilogue: 8-bit out [m, n] (row stride ldc bytes), no int32 sums in
// memory. bias and multiplier hold b.np values (whole panels; zeros past n). Only for a B
// packed for AVX-512 VNNI (qgemm_requant_available).
// With every row of A under one zero point and B's zero points all 0, the corrections are
// folded into the bias here (per call: n values) and the epilogue only adds it.
bool qgemm_requant_available(const PackedB& b);
void qgemm_requant_u8(const PackedA& a, const PackedB& b, const int32_t* bias,
                      const float* multiplier, float zero_point, bool out_signed, uint8_t* c,
                      size_t ldc, size_t threads);
// float32 out: C * scale[n or 0] (+ bias[n]); scale_count 1 (per tensor) or n.
void qgemm_f32(const PackedA& a, const PackedB& b, const float* scale, size_t scale_count,
               const float* bias, float* c, size_t ldc, size_t threads);

// A one-group 2-D conv of 8-bit images x [n][c][h][w] with a packed weight (W^T [kh * kw * c,
// m], pack_b): im2col rows (padding holding x_zero_point), the integer GEMM, then
// requantize_i32 into out [n][m][oh][ow] (channels_last: x is [n][h][w][c] and out
// [n][oh][ow][m], a pointwise conv's GEMM reading x as it is). Its im2col rows, packed A and int32 sums live in
// buffers of the calling thread kept between calls (a conv's were fresh megabytes on every
// call, paid for in page faults).
void qlinear_conv_u8(const uint8_t* x, bool x_signed, size_t n, size_t c, size_t h, size_t w,
                     int32_t x_zero_point, const PackedB& wt, size_t kh, size_t kw, size_t sh,
                     size_t sw, size_t dh, size_t dw, size_t pt, size_t pl, size_t pb,
                     size_t pr, size_t oh, size_t ow, const int32_t* bias,
                     const double* multiplier, size_t multiplier_count, int32_t y_zero_point,
                     bool out_signed, bool channels_last, void* out, size_t threads);

// Requantization of int32 sums acc [images][positions][channels] (channels-last) into 8-bit
// out: saturate(round_half_even(float(acc + bias[c]) * multiplier[c or 0]) + zero_point), to
// int8 (out_signed) or uint8, written channels-first [images][channels][positions] when
// channels_first, else in acc's layout. bias (int32, added with wrap-around as numpy's int32
// add) may be null; multiplier_count 1 (per tensor) or channels.
void requantize_i32(const int32_t* acc, size_t images, size_t positions, size_t channels,
                    const int32_t* bias, const double* multiplier, size_t multiplier_count,
                    int32_t zero_point, bool out_signed, bool channels_first, void* out,
                    size_t threads = 1);

namespace detail {

// saturate(round_half_even(f) + zp) for a finite float32 f, as a float: f is clamped first to
// a range past [lo - zp, hi - zp] (the result saturates there anyway), inside which adding
// and taking away 1.5 * 2^23 rounds to the nearest integer, ties to even, in the default
// rounding mode. Branch-free: loops over it vectorize. Static (as the functions below): each
// including translation unit (the generic one, the AVX-512 one) keeps its own copy, compiled
// with its own flags (the copies of a plain inline function are merged into one).
[[maybe_unused]] static inline float requant_value(float f, float zp, float lo, float hi) {
  constexpr float kMagic = 12582912.0f;   // 1.5 * 2^23
  f = std::min(std::max(f, lo - 1.0f - zp), hi + 1.0f - zp);
  f = (f + kMagic) - kMagic + zp;
  return std::min(std::max(f, lo), hi);
}

// The int32 sum v plus the bias with wrap-around (as numpy's int32 add).
[[maybe_unused]] static inline int32_t add_wrapped(int32_t v, int32_t bias) {
  return static_cast<int32_t>(static_cast<uint32_t>(v) + static_cast<uint32_t>(bias));
}

// One row of channels, as onnxruntime requantizes (MLAS, float32 throughout):
// out[c] = saturate(round_half_even(float(a[c] + bias[c]) * m[c]) + zp), for finite
// multipliers; the conversion of the sum and the product are each rounded to float32.
[[maybe_unused]] static inline void requant_row(const int32_t* a, const int32_t* bias,
                                                const float* m, size_t n, float zp, float lo,
                                                float hi, uint8_t* out) {
  for (size_t c = 0; c < n; ++c) {
    const float f = requant_value(static_cast<float>(add_wrapped(a[c], bias[c])) * m[c], zp,
                                  lo, hi);
    out[c] = static_cast<uint8_t>(static_cast<int32_t>(f));
  }
}

// A run of one channel's sums held as float32 integers (a float convolution of centered 8-bit
// values, exact below 2^24): requant_row's arithmetic with one bias and one multiplier.
[[maybe_unused]] static inline void requant_run_f32(const float* y, size_t n, int32_t bias,
                                                    float m, float zp, float lo, float hi,
                                                    uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const float f = requant_value(
        static_cast<float>(add_wrapped(static_cast<int32_t>(y[i]), bias)) * m, zp, lo, hi);
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(f));
  }
}

// The same for one value and any multiplier (an infinite or NaN one, whose product may not be
// a number: that gives lo, as onnxruntime's max against lo - zp does), element by element.
[[maybe_unused]] static inline uint8_t requant_any(int32_t v, float m, float zp, float lo,
                                                   float hi) {
  const float f = static_cast<float>(v) * m;
  const float r = f != f ? lo : std::min(std::max(std::nearbyint(f) + zp, lo), hi);
  return static_cast<uint8_t>(static_cast<int32_t>(r));
}

// requant_row over `rows` rows of n channels (a and out rows n apart): one call a block.
[[maybe_unused]] static inline void requant_rows(const int32_t* a, size_t rows,
                                                 const int32_t* bias, const float* m,
                                                 size_t n, float zp, float lo, float hi,
                                                 uint8_t* out) {
  for (size_t r = 0; r < rows; ++r) requant_row(a + r * n, bias, m, n, zp, lo, hi, out + r * n);
}

// Per-tensor 8-bit (de)quantization of a run of n values, as the ONNX ops compute them in
// float32: y = (float(x) - zp) * scale; q = saturate(round_half_even(x / scale) + zp) (a
// division, as onnxruntime's QuantizeLinear; NaN gives the bottom of the range, as
// onnxruntime's MLAS gives it on x86: its max with the lower bound takes the bound). The quotient is clamped first to a range past [lo - zp, hi - zp], inside
// which adding and taking away 1.5 * 2^23 rounds to the nearest integer, ties to even.
template <typename T>
[[maybe_unused]] static inline void dequantize_run(const T* x, size_t n, float scale, float zp,
                                                   float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - zp) * scale;
}

template <typename T>
[[maybe_unused]] static inline void quantize_run(const float* x, size_t n, float scale,
                                                 float zp, T* q) {
  constexpr float kMagic = 12582912.0f;   // 1.5 * 2^23
  constexpr float lo = sizeof(T) == 1 && static_cast<T>(-1) < 0 ? -128.0f : 0.0f;
  constexpr float hi = lo < 0.0f ? 127.0f : 255.0f;
  const float below = lo - zp - 1.0f, above = hi - zp + 1.0f;
  for (size_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    const bool nan = v != v;
    v = std::min(std::max(v, below), above);
    v = (v + kMagic) - kMagic + zp;
    v = std::min(std::max(v, lo), hi);
    q[i] = static_cast<T>(nan ? static_cast<int32_t>(lo) : static_cast<int32_t>(v));
  }
}


// QLinearAdd's constant part, as onnxruntime's MLAS (AVX2) computes it: with the ratios
// rac = sa / sc and rbc = sb / sc, zc - (rac * za + rbc * zb), its sum of products fused
// (one rounding: how onnxruntime's build compiles it).
[[maybe_unused]] static inline float qlinear_add_fixed(float rac, float za, float rbc, float zb,
                                                       float zc) {
  return zc - std::fma(rac, za, rbc * zb);
}

// MLAS's conversion of a QLinearAdd / QLinearMul value: half to even, saturated to the 8-bit
// type; NaN or a magnitude past int32 converts to INT32_MIN (the bottom of the range).
template <typename TY>
[[maybe_unused]] static inline TY qlinear_round(float f) {
  constexpr int32_t lo = static_cast<TY>(-1) < 0 ? -128 : 0, hi = lo < 0 ? 127 : 255;
  const int32_t r = (f == f && std::fabs(f) < 2147483648.0f)
                        ? static_cast<int32_t>(std::nearbyint(f)) : INT32_MIN;
  return static_cast<TY>(std::min(std::max(r, lo), hi));
}

// QLinearMul's output for the exact integer product p = (a - za) * (b - zb), as onnxruntime's
// MLAS computes it: float(p) * ratio + zc in float32 (ratio = sa * sb / sc, unfused), then
// qlinear_round: half to even, saturated; NaN or a magnitude past int32 converts to INT32_MIN
// (the bottom of the range).
template <typename TY>
[[maybe_unused]] static inline TY qlinear_mul_value(int32_t p, float ratio, float zc) {
  return qlinear_round<TY>(static_cast<float>(p) * ratio + zc);
}

// QLinearAdd / QLinearMul of per-tensor 8-bit operands as onnxruntime's MLAS computes them.
// Add in float32 on the raw 8-bit values: fma(a, rac, fma(b, rbc, fixed)) (qlinear_add_fixed);
// where a is one value per row (b's run) the roles swap, as onnxruntime runs a broadcast first
// input: fma(b, rbc, fma(a, rac, fixed with the terms swapped)). Mul on the exact integer
// product (qlinear_mul_value). (Checked against onnxruntime 1.32 element by element.)
// `rows` rows of `inner` outputs; an operand with a_full / b_full false holds one value per
// row (broadcast along it: a squeeze-excite gate), else one per output.
// An operand with a_cyc / b_cyc (and full) holds `inner` values, the same for every row.
template <typename TA, typename TB, typename TY>
[[maybe_unused]] static inline void qlinear_binary_rows(
    const TA* a, bool a_full, float sa, float za, const TB* b, bool b_full, float sb, float zb,
    float sc, float zc, bool mul, size_t row0, size_t row1, size_t inner, TY* y,
    bool a_cyc = false, bool b_cyc = false) {
  if (mul) {
    const float ratio = (sa * sb) / sc;
    const auto iza = static_cast<int32_t>(za), izb = static_cast<int32_t>(zb);
    for (size_t r = row0; r < row1; ++r) {
      const int32_t ra = a_full ? 0 : static_cast<int32_t>(a[r]) - iza;
      const int32_t rb = b_full ? 0 : static_cast<int32_t>(b[r]) - izb;
      for (size_t i = 0; i < inner; ++i) {
        const size_t at = r * inner + i;
        const int32_t pa = a_full ? static_cast<int32_t>(a[a_cyc ? i : at]) - iza : ra;
        const int32_t pb = b_full ? static_cast<int32_t>(b[b_cyc ? i : at]) - izb : rb;
        y[at] = qlinear_mul_value<TY>(pa * pb, ratio, zc);
      }
    }
    return;
  }
  const float rac = sa / sc, rbc = sb / sc;
  const float fixed = qlinear_add_fixed(rac, za, rbc, zb, zc);
  for (size_t r = row0; r < row1; ++r) {
    if (a_full && b_full) {
      for (size_t i = 0; i < inner; ++i) {
        const size_t at = r * inner + i;
        y[at] = qlinear_round<TY>(std::fma(static_cast<float>(a[a_cyc ? i : at]), rac,
                                           std::fma(static_cast<float>(b[b_cyc ? i : at]), rbc,
                                                    fixed)));
      }
    } else if (a_full) {   // b one value this row
      const float part = std::fma(static_cast<float>(b[r]), rbc, fixed);
      for (size_t i = 0; i < inner; ++i) {
        const size_t at = r * inner + i;
        y[at] = qlinear_round<TY>(std::fma(static_cast<float>(a[a_cyc ? i : at]), rac, part));
      }
    } else if (b_full) {   // a one value this row: the roles swap
      const float part =
          std::fma(static_cast<float>(a[r]), rac, qlinear_add_fixed(rbc, zb, rac, za, zc));
      for (size_t i = 0; i < inner; ++i) {
        const size_t at = r * inner + i;
        y[at] = qlinear_round<TY>(std::fma(static_cast<float>(b[b_cyc ? i : at]), rbc, part));
      }
    } else {
      const TY v = qlinear_round<TY>(std::fma(static_cast<float>(a[r]), rac,
                                              std::fma(static_cast<float>(b[r]), rbc, fixed)));
      for (size_t i = 0; i < inner; ++i) y[r * inner + i] = v;
    }
  }
}

// qlinear_binary_rows for the operands' and the output's 8-bit types.
[[maybe_unused]] static inline void qlinear_binary_typed(
    const void* a, bool a_signed, bool a_full, float sa, float za, const void* b, bool b_signed,
    bool b_full, float sb, float zb, float sc, float zc, bool out_signed, bool mul, size_t row0,
    size_t row1, size_t inner, void* y, bool a_cyc = false, bool b_cyc = false) {
  auto with_y = [&](auto* ta, auto* tb) {
    if (out_signed) {
      qlinear_binary_rows(ta, a_full, sa, za, tb, b_full, sb, zb, sc, zc, mul, row0, row1,
                          inner, static_cast<int8_t*>(y), a_cyc, b_cyc);
    } else {
      qlinear_binary_rows(ta, a_full, sa, za, tb, b_full, sb, zb, sc, zc, mul, row0, row1,
                          inner, static_cast<uint8_t*>(y), a_cyc, b_cyc);
    }
  };
  auto with_b = [&](auto* ta) {
    if (b_signed) {
      with_y(ta, static_cast<const int8_t*>(b));
    } else {
      with_y(ta, static_cast<const uint8_t*>(b));
    }
  };
  if (a_signed) {
    with_b(static_cast<const int8_t*>(a));
  } else {
    with_b(static_cast<const uint8_t*>(a));
  }
}

}  // namespace detail

// A depthwise 2-D QLinearConv of 8-bit images x [n][c][h][w] (per-tensor x_zero_point) with
// centered float weights wf [c][kh][kw] (w - w_zero_point): per task, a few channel planes
// of one image are centered into float32 (exactly), convolved by the float depthwise kernel
// (exact: 8-bit taps' sums below 2^24) and requantized as requantize_f32_channels into out
// [n][c][oh][ow], all in buffers of the task's thread. channels_last: x [n][h][w][c] and out
// [n][oh][ow][c]; an image is centered at once, the channels-last float kernel runs blocks of
// output rows (vectors across channels), each block's sums requantized as the GEMM's.
// The weights of a depthwise conv packed for qdwconv_nhwc_rows_vnni once (qdw_pack_vnni):
// wq [G][kw][cp][4] int8 and each channel's sum of weights; empty when they do not fit int8
// or the CPU has no AVX-512 VNNI.
struct QdwVnniWeights {
  size_t c = 0, kh = 0, kw = 0;
  std::vector<int8_t> wq;
  std::vector<int32_t> sums;
};
QdwVnniWeights qdw_pack_vnni(const float* wf, size_t c, size_t kh, size_t kw);

// (packed: qdw_pack_vnni of wf, or nullptr to pack per call)
void qdwconv_u8(const uint8_t* x, bool x_signed, size_t n, size_t c, size_t h, size_t w,
                int32_t x_zero_point, const float* wf, size_t kh, size_t kw, size_t sh,
                size_t sw, size_t dh, size_t dw, size_t pt, size_t pl, size_t oh, size_t ow,
                const int32_t* bias, const double* multiplier, size_t multiplier_count,
                int32_t y_zero_point, bool out_signed, bool channels_last, void* out,
                size_t threads, const QdwVnniWeights* packed = nullptr);

// dst [cols][rows] = src [rows][cols] (rows lds bytes apart), bytes: 16 x 16 tiles through
// SSE2 unpacks on x86, the edges (and other CPUs) byte by byte.
void transpose_bytes(const uint8_t* src, size_t rows, size_t cols, size_t lds, uint8_t* dst);

// Per-tensor 8-bit QLinearAdd / QLinearMul (detail::qlinear_binary_rows), rows over threads.
struct QBinaryOperand {
  const void* data;
  bool is_signed, full;
  float scale, zero_point;
  bool cyclic = false;   // (with full) `inner` values, the same for every row: a channels-last
                         // squeeze-excite gate [1, 1, 1, C] against [1, H, W, C]
};
void qlinear_binary_8bit(const QBinaryOperand& a, const QBinaryOperand& b, float sc, float zc,
                         bool out_signed, bool mul, size_t rows, size_t inner, void* y,
                         size_t threads);

// com.microsoft QLinearGlobalAveragePool over channels-last x [images][rows][cols] (rows > 0,
// below 2^23: int32 sums cannot overflow): per column, mean = float32(double(sum) / rows), then as the op's float32 steps:
// q = saturate(round_half_even(((mean - x_zp) * x_scale) / y_scale) + y_zp), into out
// [images][cols] (int8 when out_signed).
void qlinear_global_average_pool_8bit(const void* x, bool x_signed, size_t images, size_t rows,
                                      size_t cols, float x_zero_point, float x_scale,
                                      float y_scale, float y_zero_point, bool out_signed,
                                      void* out, size_t threads);

// out[i] = table[byte of x[i]] for n 8-bit values: an 8-bit elementwise op as a lookup table
// (QLinearSigmoid, QLinearLeakyRelu), chunks over threads.
void lookup_8bit(const uint8_t* x, size_t n, const uint8_t* table, uint8_t* out,
                 size_t threads);

// Per-tensor 8-bit DequantizeLinear / QuantizeLinear of n contiguous values (x_signed / q_signed:
// int8, else uint8); see detail::dequantize_run and quantize_run.
void dequantize_8bit(const void* x, bool x_signed, size_t n, float scale, int32_t zero_point,
                     float* y);
void quantize_8bit(const float* x, size_t n, float scale, int32_t zero_point, bool q_signed,
                   void* q);
// requantize_i32 for sums held as float32 integers in y [images][channels][positions]
// (channels-first, as a float convolution of centered 8-bit values writes them; each |y| below
// 2^24), into out of the same layout.
void requantize_f32_channels(const float* y, size_t images, size_t channels, size_t positions,
                             const int32_t* bias, const double* multiplier,
                             size_t multiplier_count, int32_t zero_point, bool out_signed,
                             void* out, size_t threads = 1);

// ---- The per-variant micro-kernels (internal; one translation unit per ISA) ----------------

struct QgemmTile {
  const uint8_t* a;        // first row of the tile in PackedA::data
  size_t lda;              // bytes per packed A row
  size_t rows;             // 1..mr
  const int32_t* a_zp;     // [rows]
  const int32_t* a_sum;    // [rows]
  const uint8_t* b;        // the panel in PackedB::data
  size_t kp;               // padded K
  const int32_t* b_zp;     // [panel] from the panel's first column
  const int32_t* b_corr;   // [panel]
  size_t cols;             // valid columns in the panel (1..panel)
  int32_t* c_i32;          // int32 out, or
  float* c_f32;            // float out (one of the two is null)
  size_t ldc;              // elements
  const float* scale;      // [panel] (float out)
  const float* bias;       // [panel] or null
  // requantized 8-bit out (AVX-512 VNNI tiles only; c_i32 and c_f32 null): c_u8 rows ldc
  // bytes apart, q_bias [panel] added to the corrected sums, then as requant_row with
  // q_mult [panel], q_zp, q_lo, q_hi (int8 when q_lo < 0)
  uint8_t* c_u8;
  const int32_t* q_bias;
  const float* q_mult;
  float q_zp, q_lo, q_hi;
  // q_bias already holds the zero-point corrections (every row's A zero point the same, B's
  // all zero): the epilogue adds it to the sums and requantizes
  bool q_folded;
};

void qgemm_tile_scalar(const QgemmTile& t);
void quantize_row_scalar(const float* x, size_t k, float scale, float zp, uint8_t* q,
                         int32_t* sum);
void minmax_scalar(const float* x, size_t n, float* lo, float* hi);
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
void qgemm_tile_avx2(const QgemmTile& t);
void quantize_row_avx2(const float* x, size_t k, float scale, float zp, uint16_t* q,
                       int32_t* sum);
void minmax_avx2(const float* x, size_t n, float* lo, float* hi);
void qgemm_tile_avx512vnni(const QgemmTile& t);
// AMX (TDPBUSD on 16 x 16 int32 tiles): needs the OS's permission for tile data, which
// amx_enable() requests once per process (false when refused or not built).
bool amx_enable();
void qgemm_tile_amx(const QgemmTile& t);
// Around the tile calls of one task on one thread (nothing else runs on it in between): the
// tile configuration loaded once, the tiles released at the end.
void amx_task_begin();
void amx_task_end();
void quantize_row_avx512(const float* x, size_t k, float scale, float zp, uint8_t* q,
                         int32_t* sum);
void minmax_avx512(const float* x, size_t n, float* lo, float* hi);
// qlinear_binary_8bit's rows, compiled for AVX-512.
void qlinear_binary_rows_avx512(const QBinaryOperand& a, const QBinaryOperand& b, float sc,
                                float zc, bool out_signed, bool mul, size_t row0, size_t row1,
                                size_t inner, void* y);
// dequantize_8bit and quantize_8bit, compiled for AVX-512.
void dequantize_8bit_avx512(const void* x, bool x_signed, size_t n, float scale, float zp,
                            float* y);
void quantize_8bit_avx512(const float* x, size_t n, float scale, float zp, bool q_signed,
                          void* q);
// requantize_f32_channels' run (qgemm.h's requant_run_f32), compiled for AVX-512.
void requant_run_f32_avx512(const float* y, size_t n, int32_t bias, float m, float zp,
                            float lo, float hi, uint8_t* out);
// lookup_8bit's loop on AVX-512 VBMI byte permutes (call only where cpu_features says so).
void lookup_8bit_vbmi(const uint8_t* x, size_t n, const uint8_t* table, uint8_t* out);

// requant_rows, compiled for AVX-512.
void requant_rows_avx512(const int32_t* a, size_t rows, const int32_t* bias, const float* m,
                         size_t n, float zp, float lo, float hi, uint8_t* out);
// Output rows [oy0, oy1) of a depthwise QLinearConv over channels-last rows xf [h][w][c]
// already centered into float32 (x - x_zero_point, exact), requantized in the same pass
// (AVX-512): wt [kh * kw][cp] the centered weights, tap-major, cp = c rounded up to 16 (zeros
// past c); out [oh][ow][c]. Per position, 16 channels at a time, the taps inside the image
// summed in float32 (exact: integers below 2^24 while kh * kw <= 256; a tap in the padding
// adds (zero point - zero point) * w = 0 and is skipped), then the sums + bias requantized as
// requant_rows_avx512 does the GEMM's: the bytes of the unfused path.
void qdwconv_nhwc_rows_avx512(const float* xf, const DwConvGeometry& g, size_t c,
                              const float* wt, const int32_t* bias, const float* m, float zp,
                              float lo, float hi, uint8_t* out, size_t oy0, size_t oy1);
// The same output rows computed on the 8-bit input itself with vpdpbusd (AVX-512 VNNI), for
// weights that are int8 once centered: x [h][w][c] (int8 when x_signed: flipped to uint8 by
// adding 128, x_zero_point with it), wq the weights packed by pack_qdw_weights_vnni, corr[c] =
// bias[c] - x_zero_point * (sum of channel c's weights) (see there). Per output row, each
// input column's kernel rows are interleaved four to an int32 lane ([G][columns][cp] quads,
// columns and rows outside the image holding the zero point, whose products the correction
// cancels), so that one vpdpbusd adds four taps of 16 channels: exact integer sums, the same
// requantization, the bytes of the float path.
void qdwconv_nhwc_rows_vnni(const uint8_t* x, bool x_signed, int32_t x_zero_point,
                            const DwConvGeometry& g, size_t c, const int8_t* wq,
                            const int32_t* corr, const float* m, float zp, float lo, float hi,
                            uint8_t* out, size_t oy0, size_t oy1);
// wf [c][kh][kw] centered float weights -> wq [G][kw][cp][4] int8 (G = ceil(kh / 4): kernel
// rows 4 g .. 4 g + 3 in one lane, zeros past kh and past c) and sums[c] (every tap's
// weight); false (nothing usable) when a weight is no integer in [-128, 127].
bool pack_qdw_weights_vnni(const float* wf, size_t c, size_t kh, size_t kw,
                           std::vector<int8_t>& wq, std::vector<int32_t>& sums);
#endif

}  // namespace onnxplex::mlas
