// The depthwise convolution loop nest, included by one translation unit per ISA (each
// compiled with its own -m flags, so the compiler vectorizes the row loops for that ISA).
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <vector>

#include "dwconv.h"
#include "gather_impl.h"

namespace onnxplex::mlas::detail {
// Internal linkage: each including translation unit (one per ISA, each with its own -m flags)
// must keep its own copies. As plain inline functions the linker kept one copy for all, so the
// AVX-512 and AVX2 entry points ran the portable (SSE2) code.
namespace {

inline void dwconv_f32_rows(const float* x, const float* w, const float* bias, float* y,
                            size_t channels, const DwConvGeometry& g, float lo, float hi) {
  const auto h = static_cast<std::ptrdiff_t>(g.h);
  const auto wi = static_cast<std::ptrdiff_t>(g.w);
  for (size_t c = 0; c < channels; ++c) {
    const float* xc = x + c * g.h * g.w;
    const float* wc = w + c * g.kh * g.kw;
    float* yc = y + c * g.ho * g.wo;
    const float b = bias != nullptr ? bias[c] : 0.0f;
    for (size_t oh = 0; oh < g.ho; ++oh) {
      float* out = yc + oh * g.wo;
      for (size_t ow = 0; ow < g.wo; ++ow) out[ow] = b;
      for (size_t th = 0; th < g.kh; ++th) {
        const std::ptrdiff_t ih = static_cast<std::ptrdiff_t>(oh * g.sh + th * g.dh) -
                                  static_cast<std::ptrdiff_t>(g.pt);
        if (ih < 0 || ih >= h) continue;
        const float* row = xc + ih * wi;
        for (size_t tw = 0; tw < g.kw; ++tw) {
          const float wt = wc[th * g.kw + tw];
          // Input column of output column ow: ow * sw + off; keep it inside [0, w).
          const std::ptrdiff_t off = static_cast<std::ptrdiff_t>(tw * g.dw) -
                                     static_cast<std::ptrdiff_t>(g.pl);
          const auto sw = static_cast<std::ptrdiff_t>(g.sw);
          const std::ptrdiff_t first = off >= 0 ? 0 : (-off + sw - 1) / sw;
          const std::ptrdiff_t last = wi - 1 - off < 0
              ? 0 : std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(g.wo),
                                             (wi - 1 - off) / sw + 1);
          if (sw == 1) {
            const float* r = row + off;
            for (std::ptrdiff_t ow = first; ow < last; ++ow) out[ow] += wt * r[ow];
          } else {
            for (std::ptrdiff_t ow = first; ow < last; ++ow) out[ow] += wt * row[ow * sw + off];
          }
        }
      }
      for (size_t ow = 0; ow < g.wo; ++ow) {
        const float v = out[ow];
        // std::max/min return their first argument for a NaN: NaN stays NaN.
        out[ow] = std::min(std::max(v, lo), hi);
      }
    }
  }
}

// `NV` vectors of `V`'s lanes (a register, or half of one) from tap sources `src` (offset
// `at`), tap by tap: NV independent sums in registers (one vector at a time chains all T
// multiply-adds: latency-bound, ~4 MACs per cycle). GCC vector types: each ISA's translation
// unit lowers them to its registers. Adds in the same order as the scalar loop of
// dw_rows_fixed. The width is the translation unit's register width: a wider GCC vector is
// lowered piecewise, and its broadcasts go through the stack (16 scalar stores per tap: 7x
// slower on AVX2).
#if defined(__AVX512F__)
#define ONNXPLEX_DW_VEC_BYTES 64
#elif defined(__AVX__)
#define ONNXPLEX_DW_VEC_BYTES 32
#else
#define ONNXPLEX_DW_VEC_BYTES 16
#endif
using DwVec = float __attribute__((vector_size(ONNXPLEX_DW_VEC_BYTES), aligned(4), may_alias));
using DwHalf =
    float __attribute__((vector_size(ONNXPLEX_DW_VEC_BYTES / 2), aligned(4), may_alias));
#undef ONNXPLEX_DW_VEC_BYTES
constexpr size_t kDwLanes = sizeof(DwVec) / sizeof(float);

// clamp(a, lo, hi) lane by lane as std::max then std::min: a NaN stays NaN.
template <typename V>
inline V clamp_lanes(V a, V lo, V hi) {
  const V m = a < lo ? lo : a;
  return hi < m ? hi : m;
}

template <size_t T, size_t NV, typename V>
inline void dw_block(const float* const* src, const float* wt, float bias, size_t at,
                     float* out, float lo_s, float hi_s) {
  const V lo = V{} + lo_s, hi = V{} + hi_s;
  V a[NV];
  // A scalar broadcast is written x - V{}: exact (x - 0 is x, -0 and NaN included), so the
  // compiler emits a bare vbroadcastss; V{} + x is not (-0 + 0 is +0) and costs an add on the
  // FMA pipes before each broadcast (the grouped conv ran at half its rate for it).
#pragma GCC unroll 4
  for (size_t v = 0; v < NV; ++v) a[v] = bias - V{};
#pragma GCC unroll 25
  for (size_t t = 0; t < T; ++t) {
    const V wv = wt[t] - V{};
    const V* s = reinterpret_cast<const V*>(src[t] + at);
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) a[v] += wv * s[v];
  }
  V* o = reinterpret_cast<V*>(out);
#pragma GCC unroll 4
  for (size_t v = 0; v < NV; ++v) {
    const V m = a[v] < lo ? lo : a[v];   // as std::max then std::min: NaN stays NaN
    o[v] = hi < m ? hi : m;
  }
}

// Output rows from per-tap source pointers into phase planes (rows wp apart): T taps. Rows
// run in blocks of 4 vectors, then 2, 1 and a half; a row ends with one block overlapping the
// previous when it is at least as wide (outputs are recomputed, not accumulated, so that is
// exact): only rows narrower than half a vector are left to the scalar loop.
// Blocks of NV vectors of V along one output row from `ow`; with `finish`, a row at least a
// block wide that is left with a partial block ends with one overlapping the previous, and the
// row is done (true).
template <size_t T, size_t NV, typename V>
inline bool dw_blocks(const float* const* src, const float* wt, float bias, size_t base,
                      float* out, size_t& ow, size_t wo, bool finish, float lo, float hi) {
  constexpr size_t width = NV * sizeof(V) / sizeof(float);
  for (; ow + width <= wo; ow += width) {
    dw_block<T, NV, V>(src, wt, bias, base + ow, out + ow, lo, hi);
  }
  if (!finish || ow == wo || wo < width) return ow == wo;
  dw_block<T, NV, V>(src, wt, bias, base + wo - width, out + wo - width, lo, hi);
  ow = wo;
  return true;
}

// Output rows from per-tap source pointers into phase planes (rows wp apart): T taps. Rows
// run in blocks of 4 vectors, then 2, 1 and a half; a row ends with one block overlapping the
// previous when it is at least as wide (outputs are recomputed, not accumulated, so that is
// exact): only rows narrower than half a vector are left to the scalar loop.
template <size_t T>
void dw_rows_fixed(const float* const* src, const float* w, float bias, float* y, size_t ho,
                   size_t wo, size_t wp, float lo, float hi) {
  float wt[T];
  for (size_t t = 0; t < T; ++t) wt[t] = w[t];
  for (size_t oh = 0; oh < ho; ++oh) {
    const size_t base = oh * wp;
    float* out = y + oh * wo;
    size_t ow = 0;
    if (dw_blocks<T, 4, DwVec>(src, wt, bias, base, out, ow, wo, true, lo, hi)) continue;
    dw_blocks<T, 2, DwVec>(src, wt, bias, base, out, ow, wo, false, lo, hi);
    if (dw_blocks<T, 1, DwVec>(src, wt, bias, base, out, ow, wo, true, lo, hi)) continue;
    if (dw_blocks<T, 1, DwHalf>(src, wt, bias, base, out, ow, wo, true, lo, hi)) continue;
    for (; ow < wo; ++ow) {
      float a = bias;
#pragma GCC unroll 25
      for (size_t t = 0; t < T; ++t) a += wt[t] * src[t][base + ow];
      // std::max/min return their first argument for a NaN: NaN stays NaN.
      out[ow] = std::min(std::max(a, lo), hi);
    }
  }
}

// The same for any tap count: sums of a row in `acc` (wo floats), tap by tap.
inline void dw_rows_any(const float* const* src, size_t taps, const float* w, float bias,
                        float* y, size_t ho, size_t wo, size_t wp, float* acc, float lo,
                        float hi) {
  for (size_t oh = 0; oh < ho; ++oh) {
    const size_t base = oh * wp;
    for (size_t ow = 0; ow < wo; ++ow) acc[ow] = bias;
    for (size_t t = 0; t < taps; ++t) {
      const float wt = w[t];
      const float* s = src[t] + base;
      for (size_t ow = 0; ow < wo; ++ow) acc[ow] += wt * s[ow];
    }
    float* out = y + oh * wo;
    for (size_t ow = 0; ow < wo; ++ow) out[ow] = std::min(std::max(acc[ow], lo), hi);
  }
}

// Any stride, through "phase planes": the padded input of a channel split by row index mod sh
// and column index mod sw into sh * sw planes of rows wp = wo + ((kw - 1) * dw) / sw wide (the
// padding holds `pad`). Tap (th, tw) then reads one phase plane at a fixed offset for every
// output position: an output row is a contiguous loop over all taps at once (vectorized along
// the row, results in registers), whatever the stride. Stride 1 is the single-plane case.
class PhasePlanes {
 public:
  PhasePlanes(const DwConvGeometry& g, float pad) : g_(g), pad_(pad) {
    const size_t qh_max = (g.kh - 1) * g.dh / g.sh, qw_max = (g.kw - 1) * g.dw / g.sw;
    hp_ = g.ho + qh_max;
    wp = g.wo + qw_max;
    plane_size_ = hp_ * wp + qw_max;  // (the last row's garbage columns read past it)
    planes_.assign(g.sh * g.sw * plane_size_, pad);
    taps = g.kh * g.kw;
    tap_src.resize(taps);
    for (size_t t = 0; t < taps; ++t) {
      const size_t ph = t / g.kw * g.dh, pw = t % g.kw * g.dw;
      tap_src[t] = planes_.data() + ((ph % g.sh) * g.sw + pw % g.sw) * plane_size_ +
                   (ph / g.sh) * wp + pw / g.sw;
    }
    // Per column phase b: plane columns j in [lo, hi) read input column j * sw + off.
    const auto wi = static_cast<std::ptrdiff_t>(g.w), sw = static_cast<std::ptrdiff_t>(g.sw);
    const auto n_out = static_cast<std::ptrdiff_t>(wp);
    cols_.resize(g.sw);
    for (size_t b = 0; b < g.sw; ++b) {
      const auto off = static_cast<std::ptrdiff_t>(b) - static_cast<std::ptrdiff_t>(g.pl);
      const std::ptrdiff_t lo = off >= 0 ? 0 : std::min(n_out, (-off + sw - 1) / sw);
      const std::ptrdiff_t hi =
          off >= wi ? lo : std::max(lo, std::min(n_out, (wi - off + sw - 1) / sw));
      cols_[b] = {off, lo, hi};
    }
  }

  // The planes of one channel xc [h, w].
  void fill(const float* xc) {
    const auto h = static_cast<std::ptrdiff_t>(g_.h), wi = static_cast<std::ptrdiff_t>(g_.w);
    const auto sw = static_cast<std::ptrdiff_t>(g_.sw), n_out = static_cast<std::ptrdiff_t>(wp);
    for (size_t a = 0; a < g_.sh; ++a) {
      for (size_t b = 0; b < g_.sw; ++b) {
        float* plane = planes_.data() + (a * g_.sw + b) * plane_size_;
        const std::ptrdiff_t off = cols_[b].off, jlo = cols_[b].lo, jhi = cols_[b].hi;
        for (size_t i = 0; i < hp_; ++i) {
          float* dst = plane + i * wp;
          const auto ih = static_cast<std::ptrdiff_t>(i * g_.sh + a) -
                          static_cast<std::ptrdiff_t>(g_.pt);
          if (ih < 0 || ih >= h) {
            std::fill(dst, dst + wp, pad_);
            continue;
          }
          const float* src = xc + ih * wi;
          for (std::ptrdiff_t j = 0; j < jlo; ++j) dst[j] = pad_;
          if (sw == 1) {
            std::copy(src + jlo + off, src + jhi + off, dst + jlo);
          } else if (sw == 2) {  // a literal stride: the compiler vectorizes the gather
            gather_stride2(dst + jlo, src + 2 * jlo + off, jhi - jlo, wi - (2 * jlo + off));
          } else {
            for (std::ptrdiff_t j = jlo; j < jhi; ++j) dst[j] = src[j * sw + off];
          }
          for (std::ptrdiff_t j = jhi; j < n_out; ++j) dst[j] = pad_;
        }
      }
    }
  }

  size_t wp = 0;                     // plane row width
  size_t taps = 0;
  std::vector<const float*> tap_src;  // where each tap reads (the same for every channel)

 private:
  struct ColRange {
    std::ptrdiff_t off, lo, hi;
  };
  DwConvGeometry g_;
  float pad_;
  size_t hp_ = 0, plane_size_ = 0;
  std::vector<float> planes_;
  std::vector<ColRange> cols_;
};

// Output rows of one channel from phase planes, through `rows_fn(dst, rows, cols)` (which
// reads the planes' tap_src rows wp apart); short rows run as one flat row of ho * wp
// positions (garbage columns included, dropped here) so the vector loop runs long.
template <typename RowsFn>
void phase_rows(const PhasePlanes& pp, const DwConvGeometry& g, float* yc, float* scratch,
                RowsFn rows_fn) {
  const bool flat = g.wo < 64;
  float* dst = flat ? scratch : yc;
  rows_fn(dst, flat ? 1 : g.ho, flat ? g.ho * pp.wp : g.wo);
  if (flat) {
    for (size_t oh = 0; oh < g.ho; ++oh) {
      std::copy(dst + oh * pp.wp, dst + oh * pp.wp + g.wo, yc + oh * g.wo);
    }
  }
}

inline void dwconv_f32_flat(const float* x, const float* w, const float* bias, float* y,
                            size_t channels, const DwConvGeometry& g, float lo, float hi) {
  PhasePlanes pp(g, 0.0f);
  std::vector<float> acc(g.ho * pp.wp), flat_out(g.ho * pp.wp);
  const float* const* src = pp.tap_src.data();
  for (size_t c = 0; c < channels; ++c) {
    pp.fill(x + c * g.h * g.w);
    const float* wc = w + c * pp.taps;
    const float bv = bias != nullptr ? bias[c] : 0.0f;
    phase_rows(pp, g, y + c * g.ho * g.wo, flat_out.data(),
               [&](float* dst, size_t rows, size_t cols) {
      switch (pp.taps) {  // the common kernels with the tap loop unrolled
        case 9: dw_rows_fixed<9>(src, wc, bv, dst, rows, cols, pp.wp, lo, hi); break;
        case 25: dw_rows_fixed<25>(src, wc, bv, dst, rows, cols, pp.wp, lo, hi); break;
        default: dw_rows_any(src, pp.taps, wc, bv, dst, rows, cols, pp.wp, acc.data(), lo, hi);
      }
    });
  }
}

// Max pooling of every channel: y[c] = max over the window (padding is -inf, so it never
// wins; a window entirely in the padding gives -inf). NaN propagates.
inline void maxpool_f32_flat(const float* x, float* y, size_t channels, const DwConvGeometry& g) {
  PhasePlanes pp(g, -std::numeric_limits<float>::infinity());
  std::vector<float> flat_out(g.ho * pp.wp);
  const float* const* src = pp.tap_src.data();
  for (size_t c = 0; c < channels; ++c) {
    pp.fill(x + c * g.h * g.w);
    phase_rows(pp, g, y + c * g.ho * g.wo, flat_out.data(),
               [&](float* dst, size_t rows, size_t cols) {
      for (size_t r = 0; r < rows; ++r) {
        float* out = dst + r * cols;
        const size_t base = r * pp.wp;
        for (size_t i = 0; i < cols; ++i) out[i] = src[0][base + i];
        for (size_t t = 1; t < pp.taps; ++t) {
          const float* s = src[t] + base;
          for (size_t i = 0; i < cols; ++i) {
            const float v = s[i];
            out[i] = (v > out[i] || v != v) ? v : out[i];
          }
        }
      }
    });
  }
}

// ---- Channel blocks ----------------------------------------------------------------------
// kDwLanes channels at a time, channels-last: the block's input rows are transposed into a
// zero-padded buffer [rows][wb][kDwLanes], so every output position is one vector of the
// block's channels and every tap one vector multiply-add, whatever the plane size, stride or
// dilation (a channel-at-a-time loop pays per-channel set-up and leaves lanes idle on small
// planes: 7 x 7 outputs fill 3 of 16 lanes per row). The outputs go through a vector buffer
// and are transposed back into the channel planes. Output rows run in bands that keep the
// input buffer in L1/L2.

// dst[j][i] = src[i][j] for i, j < kDwLanes: src[i] and dst[j] point at kDwLanes floats each.
inline void transpose_lanes(const float* const* src, float* const* dst) {
#if defined(__AVX512F__)
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src[i]);
  for (int i = 0; i < 16; i += 2) {  // 2 x 2 blocks of single floats
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // of float pairs
    for (int j = 0; j < 2; ++j) {
      const __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int i = 0; i < 16; i += 8) {  // of 128-bit lanes, then of 256-bit halves
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    _mm512_storeu_ps(dst[j], _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
    _mm512_storeu_ps(dst[j + 8], _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
  }
#elif defined(__AVX__)
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src[i]);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst[j], _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(dst[j + 4], _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
#else
  float tmp[kDwLanes][kDwLanes];
  for (size_t i = 0; i < kDwLanes; ++i) {
    for (size_t j = 0; j < kDwLanes; ++j) tmp[j][i] = src[i][j];
  }
  for (size_t j = 0; j < kDwLanes; ++j) std::copy(tmp[j], tmp[j] + kDwLanes, dst[j]);
#endif
}

// Vector loads and stores at any float address (DwVec is aligned(4), may_alias).
inline DwVec ldv(const float* p) { return *reinterpret_cast<const DwVec*>(p); }
inline void stv(float* p, DwVec v) { *reinterpret_cast<DwVec*>(p) = v; }

// One output row of a channel block: out[ow * ops] (vectors) = clamp(bias + sum over taps of
// wv[t] * in[ow * sw * ps + toff[t]]), where `in` is the row's first input vector, ps the
// distance between input positions and toff the taps' offsets (all in floats: kDwLanes in a
// buffer of vectors, C in a channels-last band). T > 0: that many taps, unrolled (weights stay
// in registers); T == 0: `taps` of them. Four outputs at a time share each weight load.
template <size_t T>
inline void cl_row(const float* in, size_t ps, const std::ptrdiff_t* toff, size_t taps,
                   const DwVec* wv, DwVec bias, DwVec lo, DwVec hi, size_t wo, size_t sw,
                   float* out, size_t ops) {
  const size_t n = T > 0 ? T : taps, step = sw * ps;
  auto finish = [&](DwVec a) { return clamp_lanes(a, lo, hi); };
  size_t ow = 0;
  for (; ow + 4 <= wo; ow += 4) {
    const float* p = in + ow * step;
    DwVec a0 = bias, a1 = bias, a2 = bias, a3 = bias;
#pragma GCC unroll 25
    for (size_t t = 0; t < n; ++t) {
      const DwVec wt = wv[t];
      const float* q = p + toff[t];
      a0 += wt * ldv(q);
      a1 += wt * ldv(q + step);
      a2 += wt * ldv(q + 2 * step);
      a3 += wt * ldv(q + 3 * step);
    }
    stv(out + ow * ops, finish(a0));
    stv(out + (ow + 1) * ops, finish(a1));
    stv(out + (ow + 2) * ops, finish(a2));
    stv(out + (ow + 3) * ops, finish(a3));
  }
  for (; ow < wo; ++ow) {
    const float* p = in + ow * step;
    DwVec a = bias;
#pragma GCC unroll 25
    for (size_t t = 0; t < n; ++t) a += wv[t] * ldv(p + toff[t]);
    stv(out + ow * ops, finish(a));
  }
}

// cl_row for the common 3 x 3 kernel (dilation 1, stride SW of 1 or 2): NB outputs at a time
// load each input vector of a kernel row once for the three taps that read it, and the nine
// weights stay in registers (the generic row loads every tap's input and weight anew: 45 vector
// loads for 36 multiply-adds at 4 outputs; here 3 x (NB - 1) * SW + 9 loads for 9 x NB).
// The same sums in the same order as cl_row<9>: bias, then the taps row by row. rs: the
// distance between input rows (floats).
#if defined(__AVX512F__)
constexpr size_t kDw3x3Block = 8;   // 9 weights + 8 sums + 10 inputs of 32 registers
#else
constexpr size_t kDw3x3Block = 4;
#endif

template <size_t SW>
inline void cl_row_3x3(const float* in, size_t ps, size_t rs, const DwVec* wv, DwVec bias,
                       DwVec lo, DwVec hi, size_t wo, float* out, size_t ops) {
  constexpr size_t NB = kDw3x3Block, NIN = (NB - 1) * SW + 3;
  DwVec k[9];
  for (size_t t = 0; t < 9; ++t) k[t] = wv[t];
  auto finish = [&](DwVec a) { return clamp_lanes(a, lo, hi); };
  size_t ow = 0;
  for (; ow + NB <= wo; ow += NB) {
    DwVec a[NB];
#pragma GCC unroll 8
    for (size_t j = 0; j < NB; ++j) a[j] = bias;
#pragma GCC unroll 3
    for (size_t th = 0; th < 3; ++th) {
      const float* r = in + th * rs + ow * SW * ps;
      DwVec v[NIN];
#pragma GCC unroll 24
      for (size_t i = 0; i < NIN; ++i) v[i] = ldv(r + i * ps);
#pragma GCC unroll 8
      for (size_t j = 0; j < NB; ++j) {
        a[j] += k[3 * th] * v[j * SW];
        a[j] += k[3 * th + 1] * v[j * SW + 1];
        a[j] += k[3 * th + 2] * v[j * SW + 2];
      }
    }
#pragma GCC unroll 8
    for (size_t j = 0; j < NB; ++j) stv(out + (ow + j) * ops, finish(a[j]));
  }
  for (; ow < wo; ++ow) {
    DwVec a = bias;
#pragma GCC unroll 3
    for (size_t th = 0; th < 3; ++th) {
      const float* r = in + th * rs + ow * SW * ps;
      a += k[3 * th] * ldv(r);
      a += k[3 * th + 1] * ldv(r + ps);
      a += k[3 * th + 2] * ldv(r + 2 * ps);
    }
    stv(out + ow * ops, finish(a));
  }
}

// One output row of a channel block, the kernel for the geometry (the same sums in the same
// order whichever runs): input positions ps floats apart, rows rs apart, toff the taps'
// offsets; outputs ops floats apart.
inline void cl_row_any(const float* in, size_t ps, size_t rs, const std::ptrdiff_t* toff,
                       size_t taps, const DwVec* wv, DwVec bv, DwVec lo, DwVec hi,
                       const DwConvGeometry& g, float* out, size_t ops) {
  const bool plain3x3 = g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1;
  if (plain3x3 && g.sw == 1) return cl_row_3x3<1>(in, ps, rs, wv, bv, lo, hi, g.wo, out, ops);
  if (plain3x3 && g.sw == 2) return cl_row_3x3<2>(in, ps, rs, wv, bv, lo, hi, g.wo, out, ops);
  switch (taps) {
    case 9: return cl_row<9>(in, ps, toff, taps, wv, bv, lo, hi, g.wo, g.sw, out, ops);
    case 25: return cl_row<25>(in, ps, toff, taps, wv, bv, lo, hi, g.wo, g.sw, out, ops);
    default: return cl_row<0>(in, ps, toff, taps, wv, bv, lo, hi, g.wo, g.sw, out, ops);
  }
}

// Channels [0, blocks * kDwLanes) of dwconv_f32's contract, a block of kDwLanes at a time.
inline void dwconv_f32_blocked(const float* x, const float* w, const float* bias, float* y,
                               size_t blocks, const DwConvGeometry& g, float lo_s,
                               float hi_s) {
  constexpr size_t L = kDwLanes;
  if (g.ho == 0 || g.wo == 0) return;
  const size_t plane = g.h * g.w, oplane = g.ho * g.wo, taps = g.kh * g.kw;
  // Buffer columns: input column iw sits at iw + pl; the last tap of the last output reads
  // column (wo - 1) * sw + (kw - 1) * dw.
  const size_t wb = (g.wo - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  const size_t cols = std::min(g.w, wb > g.pl ? wb - g.pl : 0);  // input columns kept
  // Bands of output rows: their input rows within ~96 KiB (at least one output row).
  const size_t row_bytes = wb * L * sizeof(float);
  const size_t span = (g.kh - 1) * g.dh + 1;
  const size_t fit = std::max<size_t>(1, (size_t{96} << 10) / row_bytes);
  const size_t band = std::min(g.ho, fit > span ? (fit - span) / g.sh + 1 : 1);
  const size_t rows_max = (band - 1) * g.sh + span;
  // (float storage: a std::vector of DwVec would drop its alignment and aliasing attributes)
  std::vector<float> buf_f((rows_max * wb + 1) * L, 0.0f), obuf_f((band * g.wo + 1) * L),
      wv_f(taps * L);
  DwVec* const bufp = reinterpret_cast<DwVec*>(buf_f.data());
  DwVec* const obuf = reinterpret_cast<DwVec*>(obuf_f.data());
  DwVec* const wv = reinterpret_cast<DwVec*>(wv_f.data());
  DwVec* const trash = bufp + rows_max * wb;  // where columns past the buffer go
  std::vector<std::ptrdiff_t> toff(taps);
  for (size_t t = 0; t < taps; ++t) {
    toff[t] = static_cast<std::ptrdiff_t>(((t / g.kw) * g.dh * wb + (t % g.kw) * g.dw) * L);
  }
  const DwVec lo = DwVec{} + lo_s, hi = DwVec{} + hi_s;
  const float* src[L];
  float* dst[L];
  for (size_t cb = 0; cb < blocks; ++cb) {
    const size_t c0 = cb * L;
    const float* xb = x + c0 * plane;
    float* yb = y + c0 * oplane;
    for (size_t t = 0; t < taps; ++t) {
      for (size_t i = 0; i < L; ++i) wv[t][i] = w[(c0 + i) * taps + t];
    }
    DwVec bv{};
    if (bias != nullptr) {
      for (size_t i = 0; i < L; ++i) bv[i] = bias[c0 + i];
    }
    for (size_t oh0 = 0; oh0 < g.ho; oh0 += band) {
      const size_t rows_out = std::min(band, g.ho - oh0);
      const size_t rows_in = (rows_out - 1) * g.sh + span;
      const auto ih0 = static_cast<std::ptrdiff_t>(oh0 * g.sh) -
                       static_cast<std::ptrdiff_t>(g.pt);
      // Buffer rows outside the input: zeros. The pad columns are zero from the start: the
      // fills below write only columns [pl, pl + cols).
      const std::ptrdiff_t r_lo = std::clamp<std::ptrdiff_t>(-ih0, 0, rows_in);
      const std::ptrdiff_t r_hi = std::clamp<std::ptrdiff_t>(
          static_cast<std::ptrdiff_t>(g.h) - ih0, r_lo, rows_in);
      std::fill(bufp, bufp + r_lo * wb, DwVec{});
      std::fill(bufp + r_hi * wb, bufp + rows_in * wb, DwVec{});
      // The input rows [ih0 + r_lo, ih0 + r_hi) as flat positions, kDwLanes at a time; (r, iw)
      // tracks the buffer row and input column of the next position.
      const size_t n_in = static_cast<size_t>(r_hi - r_lo) * g.w;
      const float* xp = xb + static_cast<size_t>(ih0 + r_lo) * g.w;
      size_t r = static_cast<size_t>(r_lo), iw = 0;
      auto next_slot = [&]() -> DwVec* {
        DwVec* d = iw < cols ? bufp + r * wb + g.pl + iw : trash;
        if (++iw == g.w) iw = 0, ++r;
        return d;
      };
      size_t p = 0;
      for (; p + L <= n_in; p += L) {
        for (size_t i = 0; i < L; ++i) {
          src[i] = xp + i * plane + p;
          dst[i] = reinterpret_cast<float*>(next_slot());
        }
        transpose_lanes(src, dst);
      }
      for (; p < n_in; ++p) {
        DwVec* d = next_slot();
        for (size_t i = 0; i < L; ++i) (*d)[i] = xp[i * plane + p];
      }
      // Output rows of the band into obuf, then back into the channel planes.
      for (size_t ro = 0; ro < rows_out; ++ro) {
        cl_row_any(reinterpret_cast<const float*>(bufp + ro * g.sh * wb), L, wb * L,
                   toff.data(), taps, wv, bv, lo, hi, g,
                   reinterpret_cast<float*>(obuf + ro * g.wo), L);
      }
      const size_t q0 = oh0 * g.wo, n = rows_out * g.wo;
      size_t q = 0;
      for (; q + L <= n; q += L) {
        for (size_t i = 0; i < L; ++i) {
          src[i] = reinterpret_cast<const float*>(obuf + q + i);
          dst[i] = yb + i * oplane + q0 + q;
        }
        transpose_lanes(src, dst);
      }
      for (; q < n; ++q) {
        for (size_t i = 0; i < L; ++i) yb[i * oplane + q0 + q] = obuf[q][i];
      }
    }
  }
}

// Channels-last depthwise, whole blocks of kDwLanes channels: output rows [oy0, oy1), channels
// [c0, c1) with (c1 - c0) a multiple of kDwLanes, read from x in place. Per output row, the
// kernel rows inside the input; per output position, the kernel columns inside it: padding
// taps are skipped, not multiplied by copied zeros, so nothing is copied. Positions whose
// windows lie inside the input's columns go P at a time, each weight vector loaded once for the
// P of them; the channel blocks are the innermost loop over a position's taps (consecutive
// vectors of one cache line run). wv: [blocks][taps] weight vectors, bv: [blocks] biases.
// The same sums in the same order as the band path (bias, then the taps row by row); a skipped
// padding tap there adds w * 0.
template <size_t P, size_t KW, typename V = DwVec>
inline void dw_nhwc_pixels(const float* x, const V* wv, const V* bv, float* y, size_t ld,
                           size_t c0, size_t c1, size_t oy0, size_t oy1, const DwConvGeometry& g,
                           V lo, V hi) {
  constexpr size_t L = sizeof(V) / sizeof(float);   // a register, or half of one
  auto ldv = [](const float* p) { return *reinterpret_cast<const V*>(p); };
  auto stv = [](float* p, V v) { *reinterpret_cast<V*>(p) = v; };
  const size_t blocks = (c1 - c0) / L, kw = KW > 0 ? KW : g.kw, taps = g.kh * kw;
  // Output columns whose windows lie inside the input's columns: [ox_lo, ox_hi).
  const size_t span_w = (kw - 1) * g.dw + 1;
  const size_t ox_lo = std::min(g.wo, (g.pl + g.sw - 1) / g.sw);
  const size_t ox_hi = g.w + g.pl >= span_w
                           ? std::max(ox_lo, std::min(g.wo, (g.w + g.pl - span_w) / g.sw + 1))
                           : ox_lo;
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  const auto sld = static_cast<std::ptrdiff_t>(ld);
  const size_t step = g.sw * ld, tap_step = g.dw * ld;
  const bool reuse = g.dw == 1 && (g.sw == 1 || g.sw == 2);
  auto finish = [&](V a) { return clamp_lanes(a, lo, hi); };
  // An output row's first input row and its kernel rows inside the input [ky0, ky1).
  struct Row {
    std::ptrdiff_t iy0;
    size_t ky0, ky1;
  };
  auto row_of = [&](size_t oy) {
    Row r{static_cast<std::ptrdiff_t>(oy * g.sh) - static_cast<std::ptrdiff_t>(g.pt), 0, g.kh};
    while (r.ky0 < r.ky1 && r.iy0 + static_cast<std::ptrdiff_t>(r.ky0 * g.dh) < 0) ++r.ky0;
    while (r.ky1 > r.ky0 && r.iy0 + static_cast<std::ptrdiff_t>((r.ky1 - 1) * g.dh) >= h) --r.ky1;
    return r;
  };
  // the input row of kernel row ky at input column ix, channel block b
  auto at = [&](const Row& r, size_t ky, std::ptrdiff_t ix, size_t b) {
    return x + ((r.iy0 + static_cast<std::ptrdiff_t>(ky * g.dh)) * w + ix) * sld +
           static_cast<std::ptrdiff_t>(c0 + b * L);
  };
  // Pn positions of output row oy from ox, channel block b, every kernel column inside
  auto group = [&](auto pn, const Row& r, float* yrow, size_t ox, size_t b) {
    constexpr size_t Pn = decltype(pn)::value;
    const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox * g.sw) -
                               static_cast<std::ptrdiff_t>(g.pl);
    V a[Pn];
#pragma GCC unroll 8
    for (size_t j = 0; j < Pn; ++j) a[j] = bv[b];
    const V* wb = wv + b * taps;
    if constexpr (KW > 0) {
      if (reuse) {
        // A kernel width known at compile time, dilation 1, stride 1 or 2: the (Pn - 1) * S +
        // KW input vectors of a kernel row are loaded once for all its taps (a tap loaded its
        // Pn vectors itself: KW * Pn loads a row, the loads and not the multiply-adds bounding
        // the loop). The same sums in the same order.
        auto rows = [&](auto stride) {
          constexpr size_t S = decltype(stride)::value, NIN = (Pn - 1) * S + KW;
          for (size_t ky = r.ky0; ky < r.ky1; ++ky) {
            const float* row = at(r, ky, ix0, b);
            const V* wk = wb + ky * KW;
            V in[NIN];
#pragma GCC unroll 32
            for (size_t j = 0; j < NIN; ++j) in[j] = ldv(row + j * ld);
#pragma GCC unroll 8
            for (size_t j = 0; j < Pn; ++j) {
#pragma GCC unroll 7
              for (size_t kx = 0; kx < KW; ++kx) a[j] += wk[kx] * in[j * S + kx];
            }
          }
        };
        if (g.sw == 1) {
          rows(std::integral_constant<size_t, 1>{});
        } else {
          rows(std::integral_constant<size_t, 2>{});
        }
#pragma GCC unroll 8
        for (size_t j = 0; j < Pn; ++j) stv(yrow + (ox + j) * ld + b * L, finish(a[j]));
        return;
      }
    }
    for (size_t ky = r.ky0; ky < r.ky1; ++ky) {
      const float* row = at(r, ky, ix0, b);
#pragma GCC unroll 7
      for (size_t kx = 0; kx < kw; ++kx) {
        const V wt = wb[ky * kw + kx];
        const float* q = row + kx * tap_step;
#pragma GCC unroll 8
        for (size_t j = 0; j < Pn; ++j) a[j] += wt * ldv(q + j * step);
      }
    }
#pragma GCC unroll 8
    for (size_t j = 0; j < Pn; ++j) stv(yrow + (ox + j) * ld + b * L, finish(a[j]));
  };
  // The inside positions P at a time, then 4, 2, 1 for the rest of a row's inside (no inside
  // position goes through the edge path); a group's channel blocks one after the other.
  // (Blocks outermost, a block's input rows kept in L1 from one output row to the next, was
  // no faster on a 576-channel 28 x 28 plane, nor blocks within each output row.)
  for (size_t oy = oy0; oy < oy1; ++oy) {
    const Row r = row_of(oy);
    float* yrow = y + oy * g.wo * ld + c0;
    size_t ox = ox_lo;
    for (; ox + P <= ox_hi; ox += P) {
      for (size_t b = 0; b < blocks; ++b) {
        group(std::integral_constant<size_t, P>{}, r, yrow, ox, b);
      }
    }
    if constexpr (P > 4) {
      for (; ox + 4 <= ox_hi; ox += 4) {
        for (size_t b = 0; b < blocks; ++b) {
          group(std::integral_constant<size_t, 4>{}, r, yrow, ox, b);
        }
      }
    }
    for (; ox + 2 <= ox_hi; ox += 2) {
      for (size_t b = 0; b < blocks; ++b) {
        group(std::integral_constant<size_t, 2>{}, r, yrow, ox, b);
      }
    }
    for (; ox < ox_hi; ++ox) {
      for (size_t b = 0; b < blocks; ++b) {
        group(std::integral_constant<size_t, 1>{}, r, yrow, ox, b);
      }
    }
  }
  // The edge positions (a kernel column in the padding): one position at a time, its own
  // kernel columns; four channel blocks at a time, four independent sums in flight (one
  // block's is a chain of dependent multiply-adds: latency-bound). The same sums in the same
  // order as the inside positions'.
  for (size_t oy = oy0; oy < oy1; ++oy) {
    const Row r = row_of(oy);
    float* yrow = y + oy * g.wo * ld + c0;
    auto edge = [&](size_t ox) {
      const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox * g.sw) -
                                 static_cast<std::ptrdiff_t>(g.pl);
      size_t kx0 = 0, kx1 = kw;
      while (kx0 < kx1 && ix0 + static_cast<std::ptrdiff_t>(kx0 * g.dw) < 0) ++kx0;
      while (kx1 > kx0 && ix0 + static_cast<std::ptrdiff_t>((kx1 - 1) * g.dw) >= w) --kx1;
      size_t b = 0;
      for (; b + 4 <= blocks; b += 4) {
        V a0 = bv[b], a1 = bv[b + 1], a2 = bv[b + 2], a3 = bv[b + 3];
        const V* w0 = wv + b * taps;
        for (size_t ky = r.ky0; ky < r.ky1; ++ky) {
          const float* row = at(r, ky, ix0, b);
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const float* q = row + kx * tap_step;
            const size_t t = ky * kw + kx;
            a0 += w0[t] * ldv(q);
            a1 += w0[taps + t] * ldv(q + L);
            a2 += w0[2 * taps + t] * ldv(q + 2 * L);
            a3 += w0[3 * taps + t] * ldv(q + 3 * L);
          }
        }
        float* out = yrow + ox * ld + b * L;
        stv(out, finish(a0));
        stv(out + L, finish(a1));
        stv(out + 2 * L, finish(a2));
        stv(out + 3 * L, finish(a3));
      }
      for (; b < blocks; ++b) {
        V a = bv[b];
        const V* wb = wv + b * taps;
        for (size_t ky = r.ky0; ky < r.ky1; ++ky) {
          const float* row = at(r, ky, ix0, b);
          for (size_t kx = kx0; kx < kx1; ++kx) a += wb[ky * kw + kx] * ldv(row + kx * tap_step);
        }
        stv(yrow + ox * ld + b * L, finish(a));
      }
    };
    for (size_t ox = 0; ox < ox_lo; ++ox) edge(ox);
    for (size_t ox = ox_hi; ox < g.wo; ++ox) edge(ox);
  }
}

// Channels-last depthwise, whole blocks of kDwLanes channels, on a small plane with a large
// kernel (most positions are edges there: a 7 x 7 plane and a 5 x 5 kernel leave 9 of 49
// inside): one channel block at a time through a zero-padded contiguous copy of its rows,
// [rows][wb][L], where every position is an inside one and a position's vector is L floats
// from its neighbour's. Sums in the band path's order (bias, then the taps row by row; a
// padding tap adds w * 0).
inline void dw_nhwc_small_plane(const float* x, const DwVec* wv, const DwVec* bv, float* y,
                                size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                                const DwConvGeometry& g, DwVec lo, DwVec hi) {
  constexpr size_t L = kDwLanes;
  const size_t blocks = (c1 - c0) / L, kw = g.kw, taps = g.kh * kw;
  const size_t wb = (g.wo - 1) * g.sw + (kw - 1) * g.dw + 1;   // band columns
  const size_t rows_in = (oy1 - oy0 - 1) * g.sh + (g.kh - 1) * g.dh + 1;
  static thread_local std::vector<float> band_buf;
  if (band_buf.size() < rows_in * wb * L) band_buf.resize(rows_in * wb * L);
  float* const buf = band_buf.data();
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  const size_t pstep = g.sw * L, tstep = g.dw * L;
  auto finish = [&](DwVec a) { return clamp_lanes(a, lo, hi); };
  const auto ih0 = static_cast<std::ptrdiff_t>(oy0 * g.sh) - static_cast<std::ptrdiff_t>(g.pt);
  for (size_t b = 0; b < blocks; ++b) {
    const float* xb = x + c0 + b * L;
    for (size_t r = 0; r < rows_in; ++r) {   // the block's rows, zero-padded
      float* row = buf + r * wb * L;
      const std::ptrdiff_t iy = ih0 + static_cast<std::ptrdiff_t>(r);
      for (size_t col = 0; col < wb; ++col) {
        const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(col) -
                                  static_cast<std::ptrdiff_t>(g.pl);
        stv(row + col * L, iy < 0 || iy >= h || ix < 0 || ix >= w
                               ? DwVec{} : ldv(xb + (iy * w + ix) * static_cast<std::ptrdiff_t>(ld)));
      }
    }
    const DwVec* wvb = wv + b * taps;
    const DwVec bias = bv[b];
    for (size_t oy = oy0; oy < oy1; ++oy) {
      const float* top = buf + (oy - oy0) * g.sh * wb * L;
      float* yrow = y + oy * g.wo * ld + c0 + b * L;
      auto group = [&](auto pn, size_t ox) {
        constexpr size_t Pn = decltype(pn)::value;
        DwVec a[Pn];
#pragma GCC unroll 8
        for (size_t j = 0; j < Pn; ++j) a[j] = bias;
        for (size_t ky = 0; ky < g.kh; ++ky) {
          const float* rowp = top + ky * g.dh * wb * L + ox * pstep;
          for (size_t kx = 0; kx < kw; ++kx) {
            const DwVec wt = wvb[ky * kw + kx];
            const float* q = rowp + kx * tstep;
#pragma GCC unroll 8
            for (size_t j = 0; j < Pn; ++j) a[j] += wt * ldv(q + j * pstep);
          }
        }
#pragma GCC unroll 8
        for (size_t j = 0; j < Pn; ++j) stv(yrow + (ox + j) * ld, finish(a[j]));
      };
      size_t ox = 0;
      for (; ox + 4 <= g.wo; ox += 4) group(std::integral_constant<size_t, 4>{}, ox);
      for (; ox + 2 <= g.wo; ox += 2) group(std::integral_constant<size_t, 2>{}, ox);
      for (; ox < g.wo; ++ox) group(std::integral_constant<size_t, 1>{}, ox);
    }
  }
}

// Whether dw_nhwc_small_plane serves a conv: planes of at most 14 columns, stride 1, 5 x 5
// kernels or larger (measured against the in-place path: 576ch 7x7 and 240ch 14x14 5x5
// faster; stride 2 and 3 x 3 kernels slower, the copy costing more than the edges).
inline bool dw_small_plane(const DwConvGeometry& g) {
  return g.wo <= 14 && g.sw == 1 && g.sh == 1 && g.kh * g.kw >= 25;
}

// dw_nhwc_pixels for the conv: eight positions a group on planes 28 wide and more, four on
// narrower ones; 3- and 5-wide kernels unrolled (their rows' inputs loaded once for all taps),
// other widths at run time.
template <typename V>
inline void dw_nhwc_pick(const float* x, const V* wv, const V* bv, float* y, size_t ld,
                         size_t c0, size_t c1, size_t oy0, size_t oy1, const DwConvGeometry& g,
                         V lo, V hi) {
  auto run = [&](auto p) {
    constexpr size_t P = decltype(p)::value;
    if (g.kw == 3) return dw_nhwc_pixels<P, 3, V>(x, wv, bv, y, ld, c0, c1, oy0, oy1, g, lo, hi);
    if (g.kw == 5) return dw_nhwc_pixels<P, 5, V>(x, wv, bv, y, ld, c0, c1, oy0, oy1, g, lo, hi);
    dw_nhwc_pixels<P, 0, V>(x, wv, bv, y, ld, c0, c1, oy0, oy1, g, lo, hi);
  };
  if (g.wo >= 28) {
    run(std::integral_constant<size_t, 8>{});
  } else {
    run(std::integral_constant<size_t, 4>{});
  }
}

// Channels [c0, c1) and output rows [oy0, oy1) of one channels-last (NHWC) image: x [h][w][ld]
// and y [ho][wo][ld] (channel c of position p at p * ld + c); w [ld channels][kh][kw] and bias
// (or nullptr) indexed by channel. Whole blocks of kDwLanes channels read x in place
// (dw_nhwc_pixels). With a partial block, a band of output rows at a time: its input rows,
// channels [c0, c1), are copied into a zero-padded band [rows][wb][cs] (row by row, contiguous
// copies), then every block runs the row kernels on it (positions cs floats apart) and stores
// its vectors into y; the partial one runs with its spare lanes' weights and bias zero,
// reading the band's slack (zeros) or its neighbours' channels there, and stores its own lanes
// only. The same sums in the same order as dwconv_f32.
inline void dwconv_nhwc_f32_any(const float* x, const float* w, const float* bias, float* y,
                                size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                                const DwConvGeometry& g, float lo_s, float hi_s,
                                const DwPrepared* prep = nullptr) {
  constexpr size_t L = kDwLanes;
  oy1 = std::min(oy1, g.ho);
  if (oy0 >= oy1 || g.wo == 0 || c0 >= c1) return;
  if ((c1 - c0) % L != 0 && c1 - c0 > L) {
    // The whole blocks read in place, the last few channels through the band path below
    // (MobileNetV3's 72- and 88-channel convs copied all their channels into bands: 3.3x and
    // 1.9x onnxruntime's time)
    const size_t split = c0 + (c1 - c0) / L * L;
    dwconv_nhwc_f32_any(x, w, bias, y, ld, c0, split, oy0, oy1, g, lo_s, hi_s, prep);
    dwconv_nhwc_f32_any(x, w, bias, y, ld, split, c1, oy0, oy1, g, lo_s, hi_s);
    return;
  }
  const size_t taps = g.kh * g.kw, nc = c1 - c0, blocks = (nc + L - 1) / L;
  const DwVec lo = DwVec{} + lo_s, hi = DwVec{} + hi_s;
  if (nc % L == 0 && prep != nullptr && prep->lanes == L && prep->taps == taps && c0 % L == 0) {
    // the weights as the plan laid them out (rebuilt on every call they were a strided read
    // of the weights and a scattered write of as many floats: ~5-15 us a call in a model,
    // caches cold)
    const auto* wv = reinterpret_cast<const DwVec*>(prep->wv.data()) + (c0 / L) * taps;
    const auto* bv = reinterpret_cast<const DwVec*>(prep->bv.data()) + c0 / L;
    if (dw_small_plane(g)) {
      dw_nhwc_small_plane(x, wv, bv, y, ld, c0, c1, oy0, oy1, g, lo, hi);
    } else {
      dw_nhwc_pick<DwVec>(x, wv, bv, y, ld, c0, c1, oy0, oy1, g, lo, hi);
    }
    return;
  }
  if (2 * nc == L) {
    // Half a block (the 8 channels past a multiple of 16 that MobileNetV3's, EfficientNet's
    // and MNASNet's 24, 40, 72, 88 and 120 channels leave on AVX-512): read in place with
    // half vectors, as whole blocks are (through the band path below, all of the image's
    // positions were copied for them first: a 24-channel 112 x 112 stride-2 conv took 1.8x
    // its 16-channel part's time)
    constexpr size_t H = L / 2;
    std::vector<float> wh(taps * H), bh(H, 0.0f);
    for (size_t i = 0; i < H; ++i) {
      for (size_t t = 0; t < taps; ++t) wh[t * H + i] = w[(c0 + i) * taps + t];
      if (bias != nullptr) bh[i] = bias[c0 + i];
    }
    const auto* wvh = reinterpret_cast<const DwHalf*>(wh.data());
    const auto* bvh = reinterpret_cast<const DwHalf*>(bh.data());
    const DwHalf lo_h = DwHalf{} + lo_s, hi_h = DwHalf{} + hi_s;
    dw_nhwc_pick<DwHalf>(x, wvh, bvh, y, ld, c0, c1, oy0, oy1, g, lo_h, hi_h);
    return;
  }
  std::vector<float> wv_f(blocks * taps * L, 0.0f), bv_f(blocks * L, 0.0f);
  DwVec* const wv_all = reinterpret_cast<DwVec*>(wv_f.data());
  const DwVec* const bv_all = reinterpret_cast<const DwVec*>(bv_f.data());
  for (size_t b = 0; b < blocks; ++b) {  // weights as vectors, spare lanes zero
    // (written as floats: a vector's lane written through a subscript was a load, an insert
    // and a store per weight, ~40 us for a 576-channel 5 x 5 conv's weights on every call)
    float* wb = wv_f.data() + b * taps * L;
    for (size_t i = 0; i < L && c0 + b * L + i < c1; ++i) {
      const size_t c = c0 + b * L + i;
      const float* wc = w + c * taps;
      for (size_t t = 0; t < taps; ++t) wb[t * L + i] = wc[t];
      if (bias != nullptr) bv_f[b * L + i] = bias[c];
    }
  }
  if (nc % L == 0) {
    // Whole blocks: read in place (single convs, one thread, against the band path below:
    // 576ch 14x14 76 -> 55 us, 960ch 7x7 32 -> 25, 96ch 112x112 stride 2 219 -> 173, 144ch
    // 56x56 about even). Eight positions a group on wider planes, four on narrow ones.
    if (dw_small_plane(g)) {
      dw_nhwc_small_plane(x, wv_all, bv_all, y, ld, c0, c1, oy0, oy1, g, lo, hi);
    } else {
      dw_nhwc_pick<DwVec>(x, wv_all, bv_all, y, ld, c0, c1, oy0, oy1, g, lo, hi);
    }
    return;
  }
  const size_t cs = nc;   // floats between a band's positions
  const size_t wb = (g.wo - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  const size_t cols = std::min(g.w, wb > g.pl ? wb - g.pl : 0);
  const size_t span = (g.kh - 1) * g.dh + 1;
  // Bands: their input rows within ~256 KiB (L2), at least one output row.
  const size_t row_bytes = wb * cs * sizeof(float);
  const size_t fit = std::max<size_t>(1, (size_t{256} << 10) / row_bytes);
  const size_t band = std::min(oy1 - oy0, fit > span ? (fit - span) / g.sh + 1 : 1);
  const size_t rows_max = (band - 1) * g.sh + span;
  std::vector<std::ptrdiff_t> toff(taps);
  for (size_t t = 0; t < taps; ++t) {
    toff[t] = static_cast<std::ptrdiff_t>(((t / g.kw) * g.dh * wb + (t % g.kw) * g.dw) * cs);
  }
  // (+ L: a partial last block's vector reads past the last position's channels)
  // The band buffer is this thread's, kept between calls and not cleared: every element a
  // kernel reads is written first (the fills write the pad columns' and rows' zeros too), but
  // the slack past the last position a partial block's spare lanes read (times zero weights,
  // never stored). A buffer per call cost a 300 KiB allocation and clear per task.
  static thread_local std::vector<float> band_buf;
  if (band_buf.size() < rows_max * wb * cs + L) band_buf.resize(rows_max * wb * cs + L);
  float* const buf = band_buf.data();
  std::vector<float> obuf_v(g.wo * L);
  float* const obuf = obuf_v.data();
  for (size_t oh0 = oy0; oh0 < oy1; oh0 += band) {
    const size_t rows_out = std::min(band, oy1 - oh0);
    const size_t rows_in = (rows_out - 1) * g.sh + span;
    const auto ih0 = static_cast<std::ptrdiff_t>(oh0 * g.sh) - static_cast<std::ptrdiff_t>(g.pt);
    const std::ptrdiff_t r_lo = std::clamp<std::ptrdiff_t>(-ih0, 0, rows_in);
    const std::ptrdiff_t r_hi = std::clamp<std::ptrdiff_t>(
        static_cast<std::ptrdiff_t>(g.h) - ih0, r_lo, rows_in);
    // The band: rows outside the input zero; inside, input columns b - pl, zeros around them.
    std::fill(buf, buf + r_lo * wb * cs, 0.0f);
    std::fill(buf + r_hi * wb * cs, buf + rows_in * wb * cs, 0.0f);
    const size_t i0 = std::min(g.pl, wb), i1 = std::min(wb, g.pl + cols);
    for (std::ptrdiff_t r = r_lo; r < r_hi; ++r) {
      float* row = buf + r * wb * cs;
      std::fill(row, row + i0 * cs, 0.0f);
      const float* src = x + static_cast<size_t>(ih0 + r) * g.w * ld + c0;   // input column 0
      if (cs == ld && i1 > i0) {
        std::copy(src + (i0 - g.pl) * ld, src + (i1 - g.pl) * ld, row + i0 * cs);
      } else {
        for (size_t c = i0; c < i1; ++c) {
          std::copy(src + (c - g.pl) * ld, src + (c - g.pl) * ld + cs, row + c * cs);
        }
      }
      std::fill(row + std::max(i0, i1) * cs, row + wb * cs, 0.0f);
    }
    for (size_t b = 0; b < blocks; ++b) {
      const size_t lanes = std::min(L, nc - b * L);
      const bool full = lanes == L;
      for (size_t ro = 0; ro < rows_out; ++ro) {
        float* yrow = y + (oh0 + ro) * g.wo * ld + c0 + b * L;
        // a full block stores straight into y; the partial one through obuf
        cl_row_any(buf + ro * g.sh * wb * cs + b * L, cs, wb * cs, toff.data(), taps,
                   wv_all + b * taps, bv_all[b], lo, hi, g, full ? yrow : obuf, full ? ld : L);
        if (!full) {
          for (size_t q = 0; q < g.wo; ++q) {
            std::copy(obuf + q * L, obuf + q * L + lanes, yrow + q * ld);
          }
        }
      }
    }
  }
}

// out[ch, ch + lanes of V) = the max over the n taps' channels there (a NaN, once taken, is
// never replaced).
#if defined(__AVX512F__) || defined(__AVX2__)
// max_over_taps for a register of Bytes (64: AVX-512, 32: AVX2): false (nothing stored) when
// some tap has a NaN in these lanes.
template <size_t Bytes>
inline bool max_over_taps_fast(const float* const* taps, size_t n, size_t ch, float* out) {
  size_t t = 0;
  if constexpr (Bytes == 64) {
#if defined(__AVX512F__)
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __mmask16 nan = 0;
    for (; t + 2 <= n; t += 2) {
      const __m512 a = _mm512_loadu_ps(taps[t] + ch), b = _mm512_loadu_ps(taps[t + 1] + ch);
      nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
      m = _mm512_max_ps(b, _mm512_max_ps(a, m));
    }
    if (t < n) {
      const __m512 a = _mm512_loadu_ps(taps[t] + ch);
      nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
      m = _mm512_max_ps(a, m);
    }
    if (nan != 0) return false;
    _mm512_storeu_ps(out + ch, m);
    return true;
#endif
  } else {
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 nan = _mm256_setzero_ps();
    for (; t + 2 <= n; t += 2) {
      const __m256 a = _mm256_loadu_ps(taps[t] + ch), b = _mm256_loadu_ps(taps[t + 1] + ch);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
      m = _mm256_max_ps(b, _mm256_max_ps(a, m));
    }
    if (t < n) {
      const __m256 a = _mm256_loadu_ps(taps[t] + ch);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
      m = _mm256_max_ps(a, m);
    }
    if (_mm256_movemask_ps(nan) != 0) return false;
    _mm256_storeu_ps(out + ch, m);
    return true;
  }
  return false;
}
#endif

template <typename V>
inline void max_over_taps(const float* const* taps, size_t n, size_t ch, float* out) {
#if defined(__AVX512F__) || defined(__AVX2__)
  // A register of lanes: one max instruction a tap (maxps returns its second operand when
  // either is NaN: a NaN tap leaves m as it was), and one unordered compare per two taps
  // noting a NaN in either; lanes that met one go through the loop below instead (the
  // select above is two compares and a blend a tap: GoogLeNet's 3x3 pools ran 1.3-2.3x
  // onnxruntime's time with it). The same maxima, NaN the first one in tap order.
  if constexpr (sizeof(V) == 64 || sizeof(V) == 32) {
    if (max_over_taps_fast<sizeof(V)>(taps, n, ch, out)) return;
  }
#endif
  V m = V{} - std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < n; ++t) {
    const V v = *reinterpret_cast<const V*>(taps[t] + ch);
    m = ((v > m) | (v != v)) ? v : m;
  }
  *reinterpret_cast<V*>(out + ch) = m;
}

// Max pooling of channels-last images: output rows [oy0, oy1) of x [h][w][c] into y [ho][wo][c],
// each output position the max over its window of the input positions' channel vectors
// (padding is -inf: it never wins; a window entirely in the padding gives -inf). NaN
// propagates, as maxpool_f32.
inline void maxpool_nhwc_f32_any(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                                 const DwConvGeometry& g) {
  constexpr size_t L = kDwLanes;
  const float ninf = -std::numeric_limits<float>::infinity();
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  std::vector<const float*> taps(g.kh * g.kw);   // the window's positions inside the input
  for (size_t oy = oy0; oy < std::min(oy1, g.ho); ++oy) {
    for (size_t ox = 0; ox < g.wo; ++ox) {
      size_t n = 0;
      for (size_t i = 0; i < g.kh; ++i) {
        const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.sh + i * g.dh) -
                                  static_cast<std::ptrdiff_t>(g.pt);
        for (size_t j = 0; j < g.kw && iy >= 0 && iy < h; ++j) {
          const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox * g.sw + j * g.dw) -
                                    static_cast<std::ptrdiff_t>(g.pl);
          if (ix >= 0 && ix < w) taps[n++] = x + static_cast<size_t>(iy * w + ix) * c;
        }
      }
      float* out = y + (oy * g.wo + ox) * c;
      size_t ch = 0;
      for (; ch + L <= c; ch += L) max_over_taps<DwVec>(taps.data(), n, ch, out);
      // The last channels: one more vector ending at c, over channels already done (the
      // same maxima again), or half vectors below a whole one (ShuffleNet's 24 channels,
      // one at a time, took 13x as long as 32)
      if (ch < c && c >= L) {
        max_over_taps<DwVec>(taps.data(), n, c - L, out);
        ch = c;
      }
      for (; ch + L / 2 <= c; ch += L / 2) max_over_taps<DwHalf>(taps.data(), n, ch, out);
      if (ch < c && c >= L / 2) {
        max_over_taps<DwHalf>(taps.data(), n, c - L / 2, out);
        ch = c;
      }
      for (; ch < c; ++ch) {
        float m = ninf;
        for (size_t t = 0; t < n; ++t) {
          const float v = taps[t][ch];
          if (v > m || v != v) m = v;
        }
        out[ch] = m;
      }
    }
  }
}

// out[ch, ch + NV * lanes of V) = scale * the sum of the n taps' channels there, the taps in
// order. NV vectors at once: NV independent chains of adds (one vector at a time, its chain of
// n dependent adds bounded the pool: 2.5x onnxruntime's time on Inception's 3x3 pools).
template <typename V, size_t NV = 1>
inline void mean_over_taps(const float* const* taps, size_t n, size_t ch, float scale,
                           float* out) {
  constexpr size_t L = sizeof(V) / sizeof(float);
  V s[NV];
#pragma GCC unroll 4
  for (size_t v = 0; v < NV; ++v) s[v] = V{};
  for (size_t t = 0; t < n; ++t) {
    const float* tap = taps[t] + ch;
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) s[v] += *reinterpret_cast<const V*>(tap + v * L);
  }
#pragma GCC unroll 4
  for (size_t v = 0; v < NV; ++v) *reinterpret_cast<V*>(out + ch + v * L) = s[v] * scale;
}

// Average pooling of channels-last images: output rows [oy0, oy1) of x [h][w][c] into y
// [ho][wo][c], each output position the sum over its window's input positions (row by row)
// times 1 / count. count: the window's taps inside the input, or with `include_pad` those
// inside the padded extent [-pt, h + pb) x [-pl, w + pr) (ONNX's count_include_pad; taps a
// ceil_mode window puts past the end pads never count). A window with no counted tap gives 0.
inline void avgpool_nhwc_f32_any(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                                 const DwConvGeometry& g, bool include_pad, size_t pb,
                                 size_t pr) {
  constexpr size_t L = kDwLanes;
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  const auto pt = static_cast<std::ptrdiff_t>(g.pt), pl = static_cast<std::ptrdiff_t>(g.pl);
  std::vector<const float*> taps(g.kh * g.kw);
  for (size_t oy = oy0; oy < std::min(oy1, g.ho); ++oy) {
    for (size_t ox = 0; ox < g.wo; ++ox) {
      size_t n = 0, rows_counted = 0, cols_counted = 0;
      for (size_t i = 0; i < g.kh; ++i) {
        const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.sh + i * g.dh) - pt;
        rows_counted += include_pad ? (iy >= -pt && iy < h + static_cast<std::ptrdiff_t>(pb))
                                    : (iy >= 0 && iy < h);
        for (size_t j = 0; j < g.kw && iy >= 0 && iy < h; ++j) {
          const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox * g.sw + j * g.dw) - pl;
          if (ix >= 0 && ix < w) taps[n++] = x + static_cast<size_t>(iy * w + ix) * c;
        }
      }
      for (size_t j = 0; j < g.kw; ++j) {
        const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox * g.sw + j * g.dw) - pl;
        cols_counted += include_pad ? (ix >= -pl && ix < w + static_cast<std::ptrdiff_t>(pr))
                                    : (ix >= 0 && ix < w);
      }
      const size_t count = rows_counted * cols_counted;
      const float scale = count == 0 ? 0.0f : 1.0f / static_cast<float>(count);
      float* out = y + (oy * g.wo + ox) * c;
      size_t ch = 0;
      for (; ch + 4 * L <= c; ch += 4 * L) {
        mean_over_taps<DwVec, 4>(taps.data(), n, ch, scale, out);
      }
      for (; ch + L <= c; ch += L) mean_over_taps<DwVec>(taps.data(), n, ch, scale, out);
      if (ch < c && c >= L) {   // the last channels: one more vector ending at c
        mean_over_taps<DwVec>(taps.data(), n, c - L, scale, out);
        ch = c;
      }
      for (; ch + L / 2 <= c; ch += L / 2) {
        mean_over_taps<DwHalf>(taps.data(), n, ch, scale, out);
      }
      if (ch < c && c >= L / 2) {
        mean_over_taps<DwHalf>(taps.data(), n, c - L / 2, scale, out);
        ch = c;
      }
      for (; ch < c; ++ch) {
        float s = 0.0f;
        for (size_t t = 0; t < n; ++t) s += taps[t][ch];
        out[ch] = s * scale;
      }
    }
  }
}

// dst[j * ldd + i] = clamp(src[i * lds + j] (+ dst's value with `accumulate`), lo, hi) for
// i < rows, j < cols: kDwLanes x kDwLanes tiles through registers, the edges one at a time.
#if defined(__AVX512F__)
// dst[3 j + i] = src[i * lds + j] for i < 3, j < cols: three planes (an RGB image, channels
// first) interleaved into channels-last, 16 columns at a time. Each output vector of 16 is two
// two-source permutes: one takes its first- and second-plane elements, the next puts the
// third plane's in (the scalar loop took ~0.45 ns an element: a 224 x 224 image's layout
// conversion 64-76 us of a MobileNetV3's 2.4 ms).
inline void interleave3(const float* src, size_t lds, size_t cols, float* dst) {
  alignas(64) static const struct Idx {
    int32_t ab[3][16], tc[3][16];
    Idx() {
      for (int v = 0; v < 3; ++v) {
        for (int p = 0; p < 16; ++p) {
          const int e = 16 * v + p, plane = e % 3, col = e / 3;
          ab[v][p] = plane == 0 ? col : plane == 1 ? 16 + col : 0;
          tc[v][p] = plane == 2 ? 16 + col : p;
        }
      }
    }
  } idx;
  const float *a = src, *b = src + lds, *c = src + 2 * lds;
  size_t j = 0;
  for (; j + 16 <= cols; j += 16, dst += 48) {
    const __m512 va = _mm512_loadu_ps(a + j), vb = _mm512_loadu_ps(b + j),
                 vc = _mm512_loadu_ps(c + j);
    for (int v = 0; v < 3; ++v) {
      const __m512 t = _mm512_permutex2var_ps(
          va, _mm512_load_si512(reinterpret_cast<const void*>(idx.ab[v])), vb);
      _mm512_storeu_ps(dst + 16 * v, _mm512_permutex2var_ps(
          t, _mm512_load_si512(reinterpret_cast<const void*>(idx.tc[v])), vc));
    }
  }
  for (; j < cols; ++j, dst += 3) {
    dst[0] = a[j];
    dst[1] = b[j];
    dst[2] = c[j];
  }
}
#endif

inline void transpose_f32_any(const float* src, size_t rows, size_t cols, size_t lds,
                              float* dst, size_t ldd, bool accumulate, float lo_s, float hi_s) {
  constexpr size_t L = kDwLanes;
  const DwVec lo = DwVec{} + lo_s, hi = DwVec{} + hi_s;
  alignas(64) float tile[L][L];
  const float* s[L];
  float* t[L];
  for (size_t j = 0; j < L; ++j) t[j] = tile[j];
  auto one = [&](float v, float* d) {
    if (accumulate) v += *d;
    *d = std::min(std::max(v, lo_s), hi_s);  // NaN stays NaN
  };
  const bool plain = !accumulate && lo_s == -std::numeric_limits<float>::infinity() &&
                     hi_s == std::numeric_limits<float>::infinity();
  float* d[L];
  // Columns in chunks of kChunk, all row blocks of a chunk before the next: the chunk's
  // destination rows are written whole, one after the other, instead of a 64-byte piece of
  // every destination row per row block (a [64, 12544] plane took 1.7x numpy's copy, a
  // [144, 3136] NCHW -> NHWC 1.8x onnxruntime's reorder). A plain transpose stores the tiles
  // straight into the destination.
  // (Up to 256 columns, one chunk: the source is read row block by row block, in order, and
  // the destination rows are few enough to be written side by side: [3136, 144] NHWC -> NCHW
  // 140 us whole, 168 in chunks.)
  const size_t kChunk = cols <= 256 ? cols : 4 * L;
  const size_t full = rows / L * L;
  for (size_t jc = 0; jc < cols && full > 0; jc += kChunk) {
    const size_t je = std::min(cols, jc + kChunk);
    for (size_t i0 = 0; i0 < full; i0 += L) {
      size_t j0 = jc;
      for (; j0 + L <= je; j0 += L) {
        for (size_t i = 0; i < L; ++i) s[i] = src + (i0 + i) * lds + j0;
        if (plain) {
          for (size_t j = 0; j < L; ++j) d[j] = dst + (j0 + j) * ldd + i0;
          transpose_lanes(s, d);
          continue;
        }
        transpose_lanes(s, t);
        for (size_t j = 0; j < L; ++j) {
          DwVec v = *reinterpret_cast<const DwVec*>(tile[j]);
          DwVec* dv = reinterpret_cast<DwVec*>(dst + (j0 + j) * ldd + i0);
          if (accumulate) v += *dv;
          const DwVec m = v < lo ? lo : v;
          *dv = hi < m ? hi : m;
        }
      }
      for (; j0 < je; ++j0) {
        for (size_t i = 0; i < L; ++i) one(src[(i0 + i) * lds + j0], dst + j0 * ldd + i0 + i);
      }
    }
  }
  const size_t i0 = full;
  if (i0 == rows) return;
  // The last rows (fewer than kDwLanes: all of them for a 3-channel image) through the same
  // tiles, the missing rows read from zeros and not stored.
  const size_t r = rows - i0;
  if (r <= 4 && !accumulate && lo_s == -std::numeric_limits<float>::infinity() &&
      hi_s == std::numeric_limits<float>::infinity()) {
    // A plain copy of a few rows (an image's 3 channels): interleaved column by column, with
    // the row count fixed at compile time (a tile transpose would be mostly padding).
    auto interleave = [&](auto rc) {
      constexpr size_t R = decltype(rc)::value;
      const float* sr[R];
      for (size_t i = 0; i < R; ++i) sr[i] = src + (i0 + i) * lds;
      for (size_t j = 0; j < cols; ++j) {
        float* d = dst + j * ldd + i0;
        for (size_t i = 0; i < R; ++i) d[i] = sr[i][j];
      }
    };
#if defined(__AVX512F__)
    if (r == 3 && ldd == 3 && i0 == 0) return interleave3(src, lds, cols, dst);
#endif
    switch (r) {
      case 1: return interleave(std::integral_constant<size_t, 1>{});
      case 2: return interleave(std::integral_constant<size_t, 2>{});
      case 3: return interleave(std::integral_constant<size_t, 3>{});
      default: return interleave(std::integral_constant<size_t, 4>{});
    }
  }
  alignas(64) float zero[L] = {};
  size_t j0 = 0;
  for (; j0 + L <= cols; j0 += L) {
    for (size_t i = 0; i < L; ++i) s[i] = i < r ? src + (i0 + i) * lds + j0 : zero;
    transpose_lanes(s, t);
    for (size_t j = 0; j < L; ++j) {
      float* d = dst + (j0 + j) * ldd + i0;
      for (size_t i = 0; i < r; ++i) one(tile[j][i], d + i);
    }
  }
  for (; j0 < cols; ++j0) {
    for (size_t i = 0; i < r; ++i) one(src[(i0 + i) * lds + j0], dst + j0 * ldd + i0 + i);
  }
}

// The variant for the geometry: phase planes, unless the input planes are so large that the
// row loops (no copy of the input) keep more in cache.
inline void dwconv_f32_any(const float* x, const float* w, const float* bias, float* y,
                           size_t channels, const DwConvGeometry& g, float lo, float hi) {
  const size_t blocks = channels / kDwLanes;
  if (blocks > 0) {
    dwconv_f32_blocked(x, w, bias, y, blocks, g, lo, hi);
    const size_t done = blocks * kDwLanes;
    if (done == channels) return;
    x += done * g.h * g.w;
    w += done * g.kh * g.kw;
    if (bias != nullptr) bias += done;
    y += done * g.ho * g.wo;
    channels -= done;
  }
  if (g.ho * (g.wo + g.kw) <= (size_t{1} << 16)) {
    dwconv_f32_flat(x, w, bias, y, channels, g, lo, hi);
  } else {
    dwconv_f32_rows(x, w, bias, y, channels, g, lo, hi);
  }
}

}  // namespace
}  // namespace onnxplex::mlas::detail
