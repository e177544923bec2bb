// The AVX-512 VNNI qgemm variant: vpdpbusd (uint8 x int8, 4 products per int32 lane) on a
// 6 x 64 int32 tile in zmm registers. Built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni
// and -ffp-contract=off (the float epilogue rounds after the multiply and after the add).
// gcc 12 reports -W(maybe-)uninitialized inside its own AVX-512 headers at -O3 (the
// _mm512_undefined_* pass-through operands, gcc bug 105593): silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <type_traits>
#include <vector>

#include "qgemm.h"

namespace onnxplex::mlas {

namespace {

constexpr size_t kPanel = 64, kVecs = 4;

inline __m512i bcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// 16 int32 sums (bias added) requantized into 16 8-bit values, as detail::requant_row does
// them (and onnxruntime's MLAS): y = saturate(round_half_even(float(v) * m) + zp), in float32.
// The product is clamped to [lo - 1 - zp, hi + 1 - zp] first (no int32 overflow; what lies
// past it saturates alike), converted to int32 rounding to nearest even, and the zero point
// added and the range taken in int32 on all 16 lanes: the signed case by vpmovsdb's
// saturation, the unsigned one by a max with 0 and vpmovusdb's (lo and hi are always the 8-bit
// type's own).
struct Requant16 {
  __m512 vlo, vhi;
  __m512i z;
  bool out_signed;
  Requant16(float zp, float lo, float hi)
      : vlo(_mm512_set1_ps(lo - 1.0f - zp)), vhi(_mm512_set1_ps(hi + 1.0f - zp)),
        z(_mm512_set1_epi32(static_cast<int32_t>(zp))), out_signed(lo < 0.0f) {}
  void store(__m512i v, const float* m, __mmask16 mask, uint8_t* o) const {
    store(v, _mm512_maskz_loadu_ps(mask, m), mask, o);
  }
  void store(__m512i v, __m512 m, __mmask16 mask, uint8_t* o) const {
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), m);
    f = _mm512_min_ps(_mm512_max_ps(f, vlo), vhi);
    __m512i q = _mm512_add_epi32(
        _mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    if (out_signed) {
      _mm512_mask_cvtsepi32_storeu_epi8(o, mask, q);
    } else {
      q = _mm512_max_epi32(q, _mm512_setzero_si512());
      _mm512_mask_cvtusepi32_storeu_epi8(o, mask, q);
    }
  }
};

// R rows; NV vectors of 16 columns computed (a panel's last partial part: 64 columns are
// kVecs, 48 of a 96-wide B's second panel are 2 of them... the rest are zeros never stored).
template <size_t R, size_t NV = kVecs>
void tile(const QgemmTile& t) {
  __m512i acc[R][kVecs];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  const uint8_t* b = t.b;
  const size_t steps = t.kp / 4;
  for (size_t s = 0; s < steps; ++s, b += kPanel * 4) {
    __m512i bv[kVecs];
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + 64 * v);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const __m512i a = bcast32(t.a + r * t.lda + s * 4);
#pragma GCC unroll 4
      for (size_t v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, bv[v]);
    }
  }
  const Requant16 rq(t.q_zp, t.q_lo, t.q_hi);   // (used with c_u8 only)
#pragma GCC unroll 4
  for (size_t v = 0; v < NV; ++v) {
    const size_t col = v * 16;
    if (col >= t.cols) break;
    const size_t left = t.cols - col;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    const __m512i zp = _mm512_loadu_si512(t.b_zp + col);
    const __m512i corr = _mm512_loadu_si512(t.b_corr + col);
    __m512 scale = _mm512_setzero_ps(), bias = _mm512_setzero_ps();
    __m512i qbias = _mm512_setzero_si512();
    if (t.c_f32 != nullptr) {
      scale = _mm512_loadu_ps(t.scale + col);
      if (t.bias != nullptr) bias = _mm512_loadu_ps(t.bias + col);
    } else if (t.c_u8 != nullptr) {
      scale = _mm512_loadu_ps(t.q_mult + col);
      qbias = _mm512_loadu_si512(t.q_bias + col);
    }
    if (t.c_u8 != nullptr && t.q_folded) {   // (the corrections are in q_bias)
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r) {
        rq.store(_mm512_add_epi32(acc[r][v], qbias), scale, mask, t.c_u8 + r * t.ldc + col);
      }
      continue;
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      __m512i c = _mm512_add_epi32(acc[r][v],
                                   _mm512_mullo_epi32(_mm512_set1_epi32(t.a_zp[r]), corr));
      c = _mm512_sub_epi32(c, _mm512_mullo_epi32(zp, _mm512_set1_epi32(t.a_sum[r])));
      if (t.c_u8 != nullptr) {
        rq.store(_mm512_add_epi32(c, qbias), scale, mask, t.c_u8 + r * t.ldc + col);
      } else if (t.c_i32 != nullptr) {
        _mm512_mask_storeu_epi32(t.c_i32 + r * t.ldc + col, mask, c);
      } else {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(c), scale);
        if (t.bias != nullptr) f = _mm512_add_ps(f, bias);
        _mm512_mask_storeu_ps(t.c_f32 + r * t.ldc + col, mask, f);
      }
    }
  }
}

}  // namespace

namespace {

template <size_t NV>
void tile_rows(const QgemmTile& t) {
  switch (t.rows) {
    case 6: tile<6, NV>(t); break;
    case 5: tile<5, NV>(t); break;
    case 4: tile<4, NV>(t); break;
    case 3: tile<3, NV>(t); break;
    case 2: tile<2, NV>(t); break;
    default: tile<1, NV>(t); break;
  }
}

}  // namespace

void qgemm_tile_avx512vnni(const QgemmTile& t) {
  // only the 16-column vectors the panel's valid columns need
  switch ((std::min(t.cols, kPanel) + 15) / 16) {
    case 1: return tile_rows<1>(t);
    case 2: return tile_rows<2>(t);
    case 3: return tile_rows<3>(t);
    default: return tile_rows<4>(t);
  }
}

void minmax_avx512(const float* x, size_t n, float* lo, float* hi) {
  __m512 l = _mm512_set1_ps(*lo), h = _mm512_set1_ps(*hi);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    l = _mm512_min_ps(l, v);
    h = _mm512_max_ps(h, v);
  }
  if (i < n) {
    const __mmask16 mask = __mmask16((1u << (n - i)) - 1);
    l = _mm512_mask_min_ps(l, mask, l, _mm512_maskz_loadu_ps(mask, x + i));
    h = _mm512_mask_max_ps(h, mask, h, _mm512_maskz_loadu_ps(mask, x + i));
  }
  // Lane loops instead of _mm512_reduce_*: gcc 12 warns (-Wuninitialized) inside those.
  alignas(64) float ls[16], hs[16];
  _mm512_store_ps(ls, l);
  _mm512_store_ps(hs, h);
  float lo_v = ls[0], hi_v = hs[0];
  for (int j = 1; j < 16; ++j) {
    lo_v = ls[j] < lo_v ? ls[j] : lo_v;
    hi_v = hs[j] > hi_v ? hs[j] : hi_v;
  }
  *lo = lo_v;
  *hi = hi_v;
}

void quantize_row_avx512(const float* x, size_t k, float scale, float zp, uint8_t* q,
                         int32_t* sum) {
  const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp);
  const __m512 lo = _mm512_set1_ps(-zp), hi = _mm512_set1_ps(255.0f - zp);
  __m512i acc = _mm512_setzero_si512();
  for (size_t i = 0; i < k; i += 16) {
    const size_t left = k - i;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + i), s);
    v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i u = _mm512_maskz_mov_epi32(mask, _mm512_cvtps_epi32(_mm512_add_ps(v, z)));
    acc = _mm512_add_epi32(acc, u);
    _mm_mask_storeu_epi8(q + i, mask, _mm512_cvtepi32_epi8(u));
  }
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, acc);
  int32_t total = 0;
  for (int j = 0; j < 16; ++j) total += lanes[j];
  *sum = total;
}

namespace {

// 16 8-bit values of an operand at element i as float32 (raw, not centered); a per-row
// operand is its row's value in every lane.
inline __m512 qb_raw(const QBinaryOperand& o, size_t at, __mmask16 mask) {
  const __m128i bytes = _mm_maskz_loadu_epi8(mask, static_cast<const uint8_t*>(o.data) + at);
  return _mm512_cvtepi32_ps(o.is_signed ? _mm512_cvtepi8_epi32(bytes)
                                        : _mm512_cvtepu8_epi32(bytes));
}

inline float qb_row(const QBinaryOperand& o, size_t row) {
  return o.is_signed ? static_cast<float>(static_cast<const int8_t*>(o.data)[row])
                     : static_cast<float>(static_cast<const uint8_t*>(o.data)[row]);
}

// 16 8-bit values of an operand at element i as int32 x - zp (a per-row operand: its row's).
inline __m512i qb_centered(const QBinaryOperand& o, size_t row, size_t at, __mmask16 mask) {
  const auto zp = static_cast<int32_t>(o.zero_point);
  if (!o.full) {
    const int32_t v = o.is_signed ? static_cast<const int8_t*>(o.data)[row]
                                  : static_cast<const uint8_t*>(o.data)[row];
    return _mm512_set1_epi32(v - zp);
  }
  const __m128i bytes = _mm_maskz_loadu_epi8(mask, static_cast<const uint8_t*>(o.data) + at);
  const __m512i w = o.is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
  return _mm512_sub_epi32(w, _mm512_set1_epi32(zp));
}

}  // namespace

// detail::qlinear_binary_rows 16 outputs a step, with the same operations (its fused
// multiply-adds as _mm512_fmadd_ps, its unfused ones apart): the same bytes.
void qlinear_binary_rows_avx512(const QBinaryOperand& a, const QBinaryOperand& b, float sc,
                                float zc, bool out_signed, bool mul, size_t row0, size_t row1,
                                size_t inner, void* y) {
  const float lo = out_signed ? -128.0f : 0.0f, hi = out_signed ? 127.0f : 255.0f;
  const __m512i vlo = _mm512_set1_epi32(static_cast<int32_t>(lo));
  const __m512i vhi = _mm512_set1_epi32(static_cast<int32_t>(hi));
  auto* out = static_cast<uint8_t*>(y);
  // (NaN and magnitudes past int32 convert to INT32_MIN: the bottom of the range)
  auto store = [&](__m512 f, __mmask16 mask, size_t at) {
    __m512i q = _mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_epi32(_mm512_max_epi32(q, vlo), vhi);
    _mm_mask_storeu_epi8(out + at, mask, _mm512_cvtepi32_epi8(q));
  };
  if (mul) {   // detail::qlinear_mul_value
    const __m512 ratio = _mm512_set1_ps((a.scale * b.scale) / sc), z = _mm512_set1_ps(zc);
    for (size_t r = row0; r < row1; ++r) {
      for (size_t i = 0; i < inner; i += 16) {
        const size_t left = inner - i, at = r * inner + i;
        const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        const __m512i p = _mm512_mullo_epi32(qb_centered(a, r, a.cyclic ? i : at, mask),
                                             qb_centered(b, r, b.cyclic ? i : at, mask));
        store(_mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), ratio), z), mask, at);
      }
    }
    return;
  }
  const float rac = a.scale / sc, rbc = b.scale / sc;
  const float fixed = detail::qlinear_add_fixed(rac, a.zero_point, rbc, b.zero_point, zc);
  const __m512 vrac = _mm512_set1_ps(rac), vrbc = _mm512_set1_ps(rbc);
  for (size_t r = row0; r < row1; ++r) {
    // an operand that is one value this row joins the fixed part first (a: the roles swap)
    const float part =
        a.full && b.full ? fixed
        : a.full         ? std::fma(qb_row(b, r), rbc, fixed)
        : b.full ? std::fma(qb_row(a, r), rac,
                            detail::qlinear_add_fixed(rbc, b.zero_point, rac, a.zero_point, zc))
                 : 0.0f;
    const __m512 vpart = _mm512_set1_ps(part);
    for (size_t i = 0; i < inner; i += 16) {
      const size_t left = inner - i, at = r * inner + i;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      __m512 f;
      const size_t ia = a.cyclic ? i : at, ib = b.cyclic ? i : at;
      if (a.full && b.full) {
        f = _mm512_fmadd_ps(qb_raw(a, ia, mask), vrac,
                            _mm512_fmadd_ps(qb_raw(b, ib, mask), vrbc, vpart));
      } else if (a.full) {
        f = _mm512_fmadd_ps(qb_raw(a, ia, mask), vrac, vpart);
      } else if (b.full) {
        f = _mm512_fmadd_ps(qb_raw(b, ib, mask), vrbc, vpart);
      } else {
        f = _mm512_set1_ps(std::fma(qb_row(a, r), rac, std::fma(qb_row(b, r), rbc, fixed)));
      }
      store(f, mask, at);
    }
  }
}

void dequantize_8bit_avx512(const void* x, bool x_signed, size_t n, float scale, float zp,
                            float* y) {
  if (x_signed) return detail::dequantize_run(static_cast<const int8_t*>(x), n, scale, zp, y);
  detail::dequantize_run(static_cast<const uint8_t*>(x), n, scale, zp, y);
}

void quantize_8bit_avx512(const float* x, size_t n, float scale, float zp, bool q_signed,
                          void* q) {
  if (q_signed) return detail::quantize_run(x, n, scale, zp, static_cast<int8_t*>(q));
  detail::quantize_run(x, n, scale, zp, static_cast<uint8_t*>(q));
}

// table[x[i]] 64 bytes a step: the table's two halves each a two-register byte permute
// (vpermi2b indexes 128 bytes by the low 7 bits), the top bit choosing between them.
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
void lookup_8bit_vbmi(const uint8_t* x, size_t n, const uint8_t* table, uint8_t* out) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64),
                t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  for (size_t i = 0; i < n; i += 64) {
    const size_t left = n - i;
    const __mmask64 mask = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(mask, x + i);
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);
    const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
    const __mmask64 top = _mm512_movepi8_mask(v);   // bytes >= 128
    _mm512_mask_storeu_epi8(out + i, mask, _mm512_mask_blend_epi8(top, lo, hi));
  }
}

void requant_run_f32_avx512(const float* y, size_t n, int32_t bias, float m, float zp,
                            float lo, float hi, uint8_t* out) {
  detail::requant_run_f32(y, n, bias, m, zp, lo, hi, out);
}

namespace {


}  // namespace

namespace {

// requant_rows_avx512 over the channels [c0, c0 + 16 * V) of every row (the last vector
// masked by `last`): their biases and multipliers held in registers across the rows.
template <int V>
void requant_column_group(const int32_t* a, size_t rows, const int32_t* bias, const float* m,
                          size_t n, size_t c0, __mmask16 last, const Requant16& rq,
                          uint8_t* out) {
  __m512i bv[V];
  __m512 mv[V];
#pragma GCC unroll 8
  for (int j = 0; j < V; ++j) {
    const __mmask16 mask = j == V - 1 ? last : __mmask16(0xFFFF);
    bv[j] = _mm512_maskz_loadu_epi32(mask, bias + c0 + 16 * j);
    mv[j] = _mm512_maskz_loadu_ps(mask, m + c0 + 16 * j);
  }
  for (size_t r = 0; r < rows; ++r) {
    const int32_t* ar = a + r * n + c0;
    uint8_t* o = out + r * n + c0;
#pragma GCC unroll 8
    for (int j = 0; j < V; ++j) {
      const __mmask16 mask = j == V - 1 ? last : __mmask16(0xFFFF);
      rq.store(_mm512_add_epi32(_mm512_maskz_loadu_epi32(mask, ar + 16 * j), bv[j]), mv[j],
               mask, o + 16 * j);
    }
  }
}

}  // namespace

void requant_rows_avx512(const int32_t* a, size_t rows, const int32_t* bias, const float* m,
                         size_t n, float zp, float lo, float hi, uint8_t* out) {
  const Requant16 rq(zp, lo, hi);
  // groups of up to 8 vectors of channels (128), row by row within a group
  for (size_t c0 = 0; c0 < n; c0 += 128) {
    const size_t span = std::min<size_t>(128, n - c0), vectors = (span + 15) / 16;
    const size_t tail = span - (vectors - 1) * 16;
    const __mmask16 last = tail >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << tail) - 1);
    switch (vectors) {
      case 1: requant_column_group<1>(a, rows, bias, m, n, c0, last, rq, out); break;
      case 2: requant_column_group<2>(a, rows, bias, m, n, c0, last, rq, out); break;
      case 3: requant_column_group<3>(a, rows, bias, m, n, c0, last, rq, out); break;
      case 4: requant_column_group<4>(a, rows, bias, m, n, c0, last, rq, out); break;
      case 5: requant_column_group<5>(a, rows, bias, m, n, c0, last, rq, out); break;
      case 6: requant_column_group<6>(a, rows, bias, m, n, c0, last, rq, out); break;
      case 7: requant_column_group<7>(a, rows, bias, m, n, c0, last, rq, out); break;
      default: requant_column_group<8>(a, rows, bias, m, n, c0, last, rq, out); break;
    }
  }
}

namespace {


// P consecutive output positions of one row, B blocks of 16 channels: kernel rows [ky0, ky1)
// and columns [kx0, kx1) (every position's taps in those columns inside the image), `rows` the
// input of the first position's tap (ky0, kx0); positions `step` floats apart; `mask` the
// channels of each block (a partial one only with B = 1). P * B independent accumulator
// chains (an FMA's latency is four of its issue slots: 8 chains keep both FMA ports busy), each
// weight vector loaded once for the P positions. B > 1 serves a lone position (an image edge,
// a narrow row), whose single chain would wait on every tap.
template <int P, int B = 1>
inline void dw_tile(const float* rows, std::ptrdiff_t row_stride, size_t step,
                    size_t tap_step, size_t ky0, size_t ky1, size_t kx0, size_t kx1, size_t kw,
                    const float* wt, size_t cp, __mmask16 mask, const Requant16& rq,
                    const int32_t* bias, const float* m, uint8_t* o, size_t out_step) {
  __m512 acc[P * B];
#pragma GCC unroll 8
  for (int i = 0; i < P * B; ++i) acc[i] = _mm512_setzero_ps();
  for (size_t ky = ky0; ky < ky1; ++ky) {
    const float* row = rows + static_cast<std::ptrdiff_t>(ky - ky0) * row_stride;
    const float* wk = wt + ky * kw * cp;
    for (size_t kx = kx0; kx < kx1; ++kx) {
      const float* q = row + (kx - kx0) * tap_step;
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b) {
        const __m512 wv = _mm512_loadu_ps(wk + kx * cp + 16 * b);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          acc[b * P + p] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, q + p * step + 16 * b),
                                           wv, acc[b * P + p]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b) {
    const __m512i bv = _mm512_maskz_loadu_epi32(mask, bias + 16 * b);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      rq.store(_mm512_add_epi32(_mm512_cvtps_epi32(acc[b * P + p]), bv), m + 16 * b, mask,
               o + p * out_step + 16 * b);
    }
  }
}

}  // namespace

void qdwconv_nhwc_rows_avx512(const float* xf, const DwConvGeometry& g, size_t c,
                              const float* wt, const int32_t* bias, const float* m, float zp,
                              float lo, float hi, uint8_t* out, size_t oy0, size_t oy1) {
  // 8 positions a block (then 4, then one at a time): each tap is one FMA into each
  // position's accumulator, so a block's 8 chains keep both FMA ports busy through the FMA's
  // 4-cycle latency (4 chains left half the issue slots idle: ~3 cycles a tap)
  constexpr int P = 8;
  const size_t cp = (c + 15) / 16 * 16;
  const Requant16 rq(zp, lo, hi);
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  const auto pl = static_cast<std::ptrdiff_t>(g.pl), sw = static_cast<std::ptrdiff_t>(g.sw);
  const auto cc = static_cast<std::ptrdiff_t>(c);
  const std::ptrdiff_t row_floats = w * cc;
  const size_t step = g.sw * c, tap_step = g.dw * c;
  // the output columns whose taps all lie inside the image's columns: [in0, in1)
  const auto wo = static_cast<std::ptrdiff_t>(g.wo);
  const std::ptrdiff_t last = w - 1 - static_cast<std::ptrdiff_t>((g.kw - 1) * g.dw) + pl;
  const std::ptrdiff_t in0 = std::min((pl + sw - 1) / sw, wo);
  const std::ptrdiff_t in1 = std::max(in0, last >= 0 ? std::min(last / sw + 1, wo) : 0);
  for (size_t oy = oy0; oy < oy1; ++oy) {
    const std::ptrdiff_t iy0 = static_cast<std::ptrdiff_t>(oy * g.sh) -
                               static_cast<std::ptrdiff_t>(g.pt);
    size_t ky0 = 0, ky1 = g.kh;   // the kernel rows inside the image
    while (ky0 < ky1 && iy0 + static_cast<std::ptrdiff_t>(ky0 * g.dh) < 0) ++ky0;
    while (ky1 > ky0 && iy0 + static_cast<std::ptrdiff_t>((ky1 - 1) * g.dh) >= h) --ky1;
    const float* top =   // (the first kernel row inside the image's input row)
        ky0 < ky1 ? xf + (iy0 + static_cast<std::ptrdiff_t>(ky0 * g.dh)) * row_floats : xf;
    const std::ptrdiff_t row_stride = static_cast<std::ptrdiff_t>(g.dh) * row_floats;
    uint8_t* orow = out + oy * g.wo * c;
    auto run = [&](std::ptrdiff_t ox, auto positions, size_t kx0, size_t kx1) {
      constexpr int Q = decltype(positions)::value;
      // the first tap's column; with no tap inside the image (past a wide padding) nothing
      // is read and the sums are of nothing
      const bool taps = ky0 < ky1 && kx0 < kx1;
      const std::ptrdiff_t first = ox * sw - pl + static_cast<std::ptrdiff_t>(kx0 * g.dw);
      size_t c0 = 0;
      if constexpr (Q == 1) {   // one position: four channel blocks at a time while whole
        if (taps) {
          for (; c0 + 64 <= c; c0 += 64) {
            dw_tile<1, 4>(top + first * cc + static_cast<std::ptrdiff_t>(c0), row_stride,
                          step, tap_step, ky0, ky1, kx0, kx1, g.kw, wt + c0, cp,
                          __mmask16(0xFFFF), rq, bias + c0, m + c0,
                          orow + static_cast<size_t>(ox) * c + c0, c);
          }
        }
      }
      for (; c0 < c; c0 += 16) {
        const size_t left = c - c0;
        const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        dw_tile<Q>(taps ? top + first * cc + static_cast<std::ptrdiff_t>(c0) : xf, row_stride,
                   step, tap_step, ky0, ky1, kx0, kx1, g.kw, wt + c0, cp, mask, rq, bias + c0,
                   m + c0, orow + static_cast<size_t>(ox) * c + c0, c);
      }
    };
    auto single = [&](std::ptrdiff_t ox) {   // one position: its kernel columns inside
      const std::ptrdiff_t ix0 = ox * sw - pl;
      size_t kx0 = 0, kx1 = g.kw;
      while (kx0 < kx1 && ix0 + static_cast<std::ptrdiff_t>(kx0 * g.dw) < 0) ++kx0;
      while (kx1 > kx0 && ix0 + static_cast<std::ptrdiff_t>((kx1 - 1) * g.dw) >= w) --kx1;
      run(ox, std::integral_constant<int, 1>{}, kx0, kx1);
    };
    std::ptrdiff_t ox = 0;
    for (; ox < in0; ++ox) single(ox);
    for (; ox + P <= in1; ox += P) run(ox, std::integral_constant<int, P>{}, 0, g.kw);
    if (ox + P / 2 <= in1) {
      run(ox, std::integral_constant<int, P / 2>{}, 0, g.kw);
      ox += P / 2;
    }
    for (; ox < wo; ++ox) single(ox);
  }
}

bool pack_qdw_weights_vnni(const float* wf, size_t c, size_t kh, size_t kw,
                           std::vector<int8_t>& wq, std::vector<int32_t>& sums) {
  const size_t groups = (kh + 3) / 4, cp = (c + 15) / 16 * 16;
  wq.assign(groups * kw * cp * 4, 0);
  sums.assign(c, 0);
  for (size_t ch = 0; ch < c; ++ch) {
    for (size_t ky = 0; ky < kh; ++ky) {
      for (size_t kx = 0; kx < kw; ++kx) {
        const float v = wf[(ch * kh + ky) * kw + kx];
        if (!(v >= -128.0f && v <= 127.0f) || std::floor(v) != v) return false;
        const auto q = static_cast<int8_t>(v);
        wq[(((ky / 4) * kw + kx) * cp + ch) * 4 + ky % 4] = q;
        sums[ch] += q;
      }
    }
  }
  return true;
}

namespace {

// P consecutive output positions of one row, B blocks of 16 channels (the last one `mask`ed):
// every quad of kernel rows and every kernel column is one vpdpbusd per position and block
// (P * B independent chains, each weight vector loaded once for the P positions; B > 1 for a
// lone position, whose single chain would wait on every step), then the sums requantized.
template <int P, int B>
inline void qdw_vnni_tile(const int32_t* quads, size_t cols, size_t cp, size_t groups,
                          const int8_t* wq, const DwConvGeometry& g, size_t ox, size_t b0,
                          const int32_t* corr, const float* m, __mmask16 mask,
                          const Requant16& rq, uint8_t* o, size_t c) {
  __m512i acc[B][P];
#pragma GCC unroll 4
  for (int b = 0; b < B; ++b) {
    const __m512i start = _mm512_loadu_si512(corr + 16 * (b0 + b));
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[b][p] = start;
  }
  for (size_t gq = 0; gq < groups; ++gq) {
    const int32_t* qrow = quads + gq * cols * cp + 16 * b0 + ox * g.sw * cp;
    const int8_t* wrow = wq + (gq * g.kw * cp + 16 * b0) * 4;
    for (size_t kx = 0; kx < g.kw; ++kx) {
      const int32_t* q = qrow + kx * g.dw * cp;
#pragma GCC unroll 4
      for (int b = 0; b < B; ++b) {
        const __m512i wv = _mm512_loadu_si512(wrow + (kx * cp + 16 * b) * 4);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          acc[b][p] = _mm512_dpbusd_epi32(acc[b][p],
                                          _mm512_loadu_si512(q + p * g.sw * cp + 16 * b), wv);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < B; ++b) {
    const size_t at = 16 * (b0 + b);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      rq.store(acc[b][p], m + at, b + 1 < B ? __mmask16(0xFFFF) : mask, o + (ox + p) * c + at);
    }
  }
}

}  // namespace

void qdwconv_nhwc_rows_vnni(const uint8_t* x, bool x_signed, int32_t x_zero_point,
                            const DwConvGeometry& g, size_t c, const int8_t* wq,
                            const int32_t* corr, const float* m, float zp, float lo, float hi,
                            uint8_t* out, size_t oy0, size_t oy1) {
  const size_t groups = (g.kh + 3) / 4, cp = (c + 15) / 16 * 16, blocks = cp / 16;
  // the input columns the row's positions read, the first at column -pl
  const size_t cols = (g.wo - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  const auto zpb = static_cast<char>(static_cast<uint8_t>(x_zero_point + (x_signed ? 128 : 0)));
  const __m128i flip = _mm_set1_epi8(static_cast<char>(x_signed ? 0x80 : 0));
  const __m128i zp16 = _mm_set1_epi8(zpb);
  const __m512i zp64 = _mm512_set1_epi8(zpb);
  const __mmask16 tail = c % 16 == 0 ? __mmask16(0xFFFF) : __mmask16((1u << (c % 16)) - 1);
  const Requant16 rq(zp, lo, hi);
  thread_local std::vector<int32_t> quads;
  quads.resize(groups * cols * cp);
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  for (size_t oy = oy0; oy < oy1; ++oy) {
    const std::ptrdiff_t iy0 =
        static_cast<std::ptrdiff_t>(oy * g.sh) - static_cast<std::ptrdiff_t>(g.pt);
    // the row's quads: input column by column, four kernel rows to a lane (rows past the
    // kernel or outside the image, and columns outside it, hold the zero point)
    for (size_t gq = 0; gq < groups; ++gq) {
      const uint8_t* rows[4];
      for (size_t j = 0; j < 4; ++j) {
        const size_t ky = 4 * gq + j;
        const std::ptrdiff_t iy = iy0 + static_cast<std::ptrdiff_t>(ky * g.dh);
        rows[j] = ky < g.kh && iy >= 0 && iy < h ? x + static_cast<size_t>(iy * w) * c : nullptr;
      }
      int32_t* qrow = quads.data() + gq * cols * cp;
      for (size_t col = 0; col < cols; ++col) {
        const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(col) -
                                  static_cast<std::ptrdiff_t>(g.pl);
        int32_t* dst = qrow + col * cp;
        if (ix < 0 || ix >= w) {
          for (size_t b = 0; b < blocks; ++b) _mm512_storeu_si512(dst + 16 * b, zp64);
          continue;
        }
        const size_t at = static_cast<size_t>(ix) * c;
        for (size_t b = 0; b < blocks; ++b) {
          const __mmask16 bm = b + 1 < blocks ? __mmask16(0xFFFF) : tail;
          __m128i r[4];
#pragma GCC unroll 4
          for (size_t j = 0; j < 4; ++j) {
            r[j] = rows[j] != nullptr
                       ? _mm_xor_si128(_mm_maskz_loadu_epi8(bm, rows[j] + at + 16 * b), flip)
                       : zp16;
          }
          const __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpackhi_epi8(r[0], r[1]);
          const __m128i b0 = _mm_unpacklo_epi8(r[2], r[3]), b1 = _mm_unpackhi_epi8(r[2], r[3]);
          __m512i q = _mm512_castsi128_si512(_mm_unpacklo_epi16(a0, b0));   // channels 0-3
          q = _mm512_inserti32x4(q, _mm_unpackhi_epi16(a0, b0), 1);          // 4-7
          q = _mm512_inserti32x4(q, _mm_unpacklo_epi16(a1, b1), 2);          // 8-11
          q = _mm512_inserti32x4(q, _mm_unpackhi_epi16(a1, b1), 3);          // 12-15
          _mm512_storeu_si512(dst + 16 * b, q);
        }
      }
    }
    uint8_t* orow = out + oy * g.wo * c;
    const int32_t* qd = quads.data();
    for (size_t b = 0; b < blocks; ++b) {
      const __mmask16 mask = b + 1 < blocks ? __mmask16(0xFFFF) : tail;
      size_t ox = 0;
      for (; ox + 8 <= g.wo; ox += 8) {
        qdw_vnni_tile<8, 1>(qd, cols, cp, groups, wq, g, ox, b, corr, m, mask, rq, orow, c);
      }
      if (ox + 4 <= g.wo) {
        qdw_vnni_tile<4, 1>(qd, cols, cp, groups, wq, g, ox, b, corr, m, mask, rq, orow, c);
      }
    }
    // the positions left (fewer than four), four blocks of channels at a time while whole
    for (size_t ox = g.wo / 8 * 8 + (g.wo % 8 >= 4 ? 4 : 0); ox < g.wo; ++ox) {
      size_t b = 0;
      for (; b + 4 <= blocks; b += 4) {
        qdw_vnni_tile<1, 4>(qd, cols, cp, groups, wq, g, ox, b, corr, m,
                            b + 4 < blocks ? __mmask16(0xFFFF) : tail, rq, orow, c);
      }
      for (; b < blocks; ++b) {
        qdw_vnni_tile<1, 1>(qd, cols, cp, groups, wq, g, ox, b, corr, m,
                            b + 1 < blocks ? __mmask16(0xFFFF) : tail, rq, orow, c);
      }
    }
  }
}

}  // namespace onnxplex::mlas
