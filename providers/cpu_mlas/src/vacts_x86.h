// x86 vector activations on 8 float lanes (and 16 in AVX-512 translation units), for the
// recurrent loops (with their register-blocked product) and the Sigmoid op (include only from a
// translation unit compiled with AVX2 + FMA or wider): vexp.h's exp for the sigmoid and tanh
// (tanh through exp(-2|x|), an odd polynomial below |x| = 0.0625 where that form loses
// digits); NaN stays NaN.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "rnn.h"
#include "rnn_impl.h"
#include "vexp.h"

namespace onnxplex::mlas {
namespace {  // (internal linkage, as rnn_impl.h)
namespace vacts {

inline __m256 keep_nan(__m256 r, __m256 x) {
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline __m256 sigmoid_ps(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = vexp::exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return keep_nan(_mm256_div_ps(one, _mm256_add_ps(one, e)), x);
}

inline __m256 tanh_ps(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 t = vexp::exp_ps(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  __m256 big = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
  const __m256 x2 = _mm256_mul_ps(ax, ax);  // x - x^3/3 + 2x^5/15 - 17x^7/315
  __m256 p = _mm256_set1_ps(-17.0f / 315.0f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 3.0f));
  p = _mm256_fmadd_ps(p, x2, one);
  const __m256 small = _mm256_mul_ps(p, ax);
  big = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.0625f), _CMP_LT_OQ));
  return keep_nan(_mm256_or_ps(big, sign), x);
}

#if defined(__AVX512F__)
// The same two functions on 16 lanes (the AVX-512 translation units): the same formulas,
// vexp.h's 16-lane exp (2^n by vscalefps), masks instead of blends.
inline __m512 keep_nan(__m512 r, __m512 x) {
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// 1 / d as the reciprocal estimate (14 bits) refined by one Newton step, within an ulp or two
// of the quotient (vdivps zmm issues every ~10 cycles: half a sigmoid's time); d >= 1 here, or
// inf, whose estimate 0 is kept (the step would make it NaN: 0 * (2 - inf * 0)).
inline __m512 recip_ps(__m512 d) {
  const __m512 s = _mm512_rcp14_ps(d);
  const __m512 r = _mm512_mul_ps(s, _mm512_fnmadd_ps(d, s, _mm512_set1_ps(2.0f)));
  return _mm512_mask_mov_ps(
      r, _mm512_cmp_ps_mask(d, _mm512_set1_ps(__builtin_inff()), _CMP_EQ_OQ), s);
}

inline __m512 sigmoid_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = vexp::exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return keep_nan(recip_ps(_mm512_add_ps(one, e)), x);
}

inline __m512 tanh_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 t = vexp::exp_ps(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  const __m512 big = _mm512_mul_ps(_mm512_sub_ps(one, t), recip_ps(_mm512_add_ps(one, t)));
  const __m512 x2 = _mm512_mul_ps(ax, ax);  // x - x^3/3 + 2x^5/15 - 17x^7/315
  __m512 p = _mm512_set1_ps(-17.0f / 315.0f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 3.0f));
  p = _mm512_fmadd_ps(p, x2, one);
  const __m512 r = _mm512_mask_mul_ps(
      big, _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.0625f), _CMP_LT_OQ), p, ax);
  // |tanh| with x's sign bit put back
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return keep_nan(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign)), x);
}

// y[i] = F(x[i]) for i < n (y may be x), the tail under a mask.
template <__m512 (*F)(__m512)>
void map16_into(const float* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
#endif

// The vector type of the recurrent product: 8 floats (AVX2), or 16 (AVX-512, in its
// translation unit).
struct Lanes8 {
  using T = __m256;
  static constexpr int N = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
};

#if defined(__AVX512F__)
struct Lanes16 {
  using T = __m512;
  static constexpr int N = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
};
#endif

// R rows x V vectors of out, from column j0: the accumulators stay in registers over k (R * V
// independent FMA chains), each row slice of m is loaded once for the R rows.
template <class L, int R, int V>
inline void gemm_block(const float* v, size_t ldv, size_t k_count, const float* m, size_t ld,
                       float* out, size_t ldo) {
  typename L::T acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < V; ++q) acc[r][q] = L::load(out + r * ldo + L::N * q);
  for (size_t k = 0; k < k_count; ++k) {
    const float* row = m + k * ld;
    typename L::T w[V];
#pragma GCC unroll 8
    for (int q = 0; q < V; ++q) {
      w[q] = L::load(row + L::N * q);
      // Kept in a register: left to itself the compiler folds the load into every row's
      // multiply-add, R loads of each vector a k where one does (2 rows x 4 vectors: 10 loads
      // for 8 multiply-adds, the load ports and not the FMA units bounding the loop).
      if constexpr (R > 1) asm("" : "+v"(w[q]));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename L::T x = L::broadcast(v + r * ldv + k);
#pragma GCC unroll 8
      for (int q = 0; q < V; ++q) acc[r][q] = L::fmadd(x, w[q], acc[r][q]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < V; ++q) L::store(out + r * ldo + L::N * q, acc[r][q]);
}

// m's columns repacked once a call into contiguous K x w panels (read with a stride of a
// whole row of R^T, every k would touch another page: the prefetchers lose track), w chosen
// by the batch size: 4 rows x 2 vectors, 2 x 4 or 1 x 8 (eight accumulators in each case, so
// a batch of one also has eight independent FMA chains).
struct Packed {
  std::unique_ptr<float[]> data;   // (not zero-filled first: pack() writes every float)
  size_t k = 0, n = 0, w = 0;
  int lanes = 8;  // the vector width it was packed for
};

template <class L>
inline Packed pack(const float* m, size_t ld, size_t k_count, size_t n, size_t rows) {
  Packed p;
  p.k = k_count;
  p.n = n;
  p.w = L::N * (rows >= 4 ? 2 : rows >= 2 ? 4 : 8);
  p.lanes = L::N;
  const size_t panels = (n + p.w - 1) / p.w;
  p.data.reset(new float[panels * k_count * p.w]);   // (uninitialized: all written below)
  for (size_t q = 0; q < panels; ++q) {
    const size_t j0 = q * p.w, width = std::min(p.w, n - j0);
    float* dst = p.data.get() + q * k_count * p.w;
    for (size_t k = 0; k < k_count; ++k) {
      std::memcpy(dst + k * p.w, m + k * ld + j0, width * sizeof(float));
      std::fill(dst + k * p.w + width, dst + (k + 1) * p.w, 0.0f);   // a last panel's pad
    }
  }
  return p;
}

// R rows of one panel into out (ldo apart); a partial last panel goes through a buffer.
template <class L, int R, int V>
inline void panel_rows(const float* v, size_t ldv, const float* pm, size_t k_count, float* out,
                       size_t ldo, size_t width) {
  constexpr size_t kW = L::N * V;
  if (width == kW) {
    gemm_block<L, R, V>(v, ldv, k_count, pm, kW, out, ldo);
    return;
  }
  alignas(64) float tmp[R * kW] = {};
  for (int r = 0; r < R; ++r) std::memcpy(tmp + r * kW, out + r * ldo, width * sizeof(float));
  gemm_block<L, R, V>(v, ldv, k_count, pm, kW, tmp, kW);
  for (int r = 0; r < R; ++r) std::memcpy(out + r * ldo, tmp + r * kW, width * sizeof(float));
}

template <class L, int R, int V>
inline void gemm_packed(const float* v, size_t ldv, size_t rows, const Packed& p, float* out,
                        size_t ldo) {
  constexpr size_t kW = L::N * V;
  const size_t panels = (p.n + kW - 1) / kW;
  for (size_t q = 0; q < panels; ++q) {
    const size_t j0 = q * kW, width = std::min(kW, p.n - j0);
    const float* pm = p.data.get() + q * p.k * kW;
    size_t b = 0;
    for (; b + R <= rows; b += R)
      panel_rows<L, R, V>(v + b * ldv, ldv, pm, p.k, out + b * ldo + j0, ldo, width);
    for (; b < rows; ++b)  // the rows left over, one at a time (V chains)
      panel_rows<L, 1, V>(v + b * ldv, ldv, pm, p.k, out + b * ldo + j0, ldo, width);
  }
}

// rnn_impl.h's gemm contract over a packed m.
template <class L>
inline void gemm(const float* v, size_t ldv, size_t rows, const Packed& p, float* out,
                 size_t ldo) {
  if (p.w == 2 * L::N) {
    gemm_packed<L, 4, 2>(v, ldv, rows, p, out, ldo);
  } else if (p.w == 4 * L::N) {
    gemm_packed<L, 2, 4>(v, ldv, rows, p, out, ldo);
  } else {
    gemm_packed<L, 1, 8>(v, ldv, rows, p, out, ldo);
  }
}

// y[i] = F(x[i]) for i < n (y may be x), the tail through a buffer.
template <__m256 (*F)(__m256)>
void map_into(const float* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t k = i; k < n; ++k) tail[k - i] = x[k];
    _mm256_store_ps(tail, F(_mm256_load_ps(tail)));
    for (size_t k = i; k < n; ++k) y[k] = tail[k - i];
  }
}

// y[i] = sigmoid(x[i]) for i < n (y may be x): the Sigmoid op's loop, one per ISA file (16
// lanes in the AVX-512 one).
inline void sigmoid_into(const float* x, float* y, size_t n) {
#if defined(__AVX512F__)
  map16_into<sigmoid_ps>(x, y, n);
#else
  map_into<sigmoid_ps>(x, y, n);
#endif
}

// rnn_impl.h's policy: the product on 8-float vectors, or (Wide, AVX-512) on 16-float ones from
// a batch of two on (for one row, 8 chains of 16 floats read R^T no faster than of 8, and ran
// slower: an LSTM of 128, 2.6 -> 3.4 us a step; for two rows 5.3 -> 3.8); the activations on
// Wide's vectors whatever the batch.
template <class Wide = Lanes8>
struct Acts {
  using Matrix = Packed;
  // the activations in place, on vectors as wide as the product's (half the instructions at
  // 16 lanes)
  static void sigmoid(float* x, size_t n) {
#if defined(__AVX512F__)
    if constexpr (Wide::N == 16) return map16_into<sigmoid_ps>(x, x, n);
#endif
    map_into<sigmoid_ps>(x, x, n);
  }
  static void tanh(float* x, size_t n) {
#if defined(__AVX512F__)
    if constexpr (Wide::N == 16) return map16_into<tanh_ps>(x, x, n);
#endif
    map_into<tanh_ps>(x, x, n);
  }
  static Packed prepare(const float* m, size_t ld, size_t k, size_t n, size_t rows) {
    return rows >= 2 ? pack<Wide>(m, ld, k, n, rows) : pack<Lanes8>(m, ld, k, n, rows);
  }
  static void gemm(const float* v, size_t ldv, size_t rows, const Packed& p, float* out,
                   size_t ldo) {
    if (p.lanes == Wide::N) {
      vacts::gemm<Wide>(v, ldv, rows, p, out, ldo);
    } else {
      vacts::gemm<Lanes8>(v, ldv, rows, p, out, ldo);
    }
  }
};

}  // namespace vacts
}  // namespace
}  // namespace onnxplex::mlas
