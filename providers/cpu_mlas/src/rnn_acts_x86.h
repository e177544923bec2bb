// The recurrent loops' x86 activations on 8 float lanes (include only from a translation unit
// compiled with AVX2 + FMA or wider): vexp.h's exp for the sigmoid and tanh (tanh through
// exp(-2|x|), an odd polynomial below |x| = 0.0625 where that form loses digits); NaN stays
// NaN.
#pragma once

#include <immintrin.h>

#include "rnn.h"
#include "rnn_impl.h"
#include "vexp.h"

namespace onnxplex::mlas {
namespace {  // (internal linkage, as rnn_impl.h)
namespace rnn_x86 {

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

template <__m256 (*F)(__m256)>
void apply(float* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t k = i; k < n; ++k) tail[k - i] = x[k];
    _mm256_store_ps(tail, F(_mm256_load_ps(tail)));
    for (size_t k = i; k < n; ++k) x[k] = tail[k - i];
  }
}

// rnn_impl.h's gemm_acc with the accumulators in registers: 32 columns of two rows at a time
// (eight independent FMA chains), m's rows read once for both.
inline void gemm(const float* v, size_t ldv, size_t rows, size_t k_count, const float* m,
                 size_t ld, float* out, size_t ldo, size_t n) {
  size_t j0 = 0;
  for (; j0 + 32 <= n; j0 += 32) {
    size_t b = 0;
    for (; b + 2 <= rows; b += 2) {
      float* o0 = out + b * ldo + j0;
      float* o1 = o0 + ldo;
      const float* v0 = v + b * ldv;
      const float* v1 = v0 + ldv;
      __m256 a0 = _mm256_loadu_ps(o0), a1 = _mm256_loadu_ps(o0 + 8);
      __m256 a2 = _mm256_loadu_ps(o0 + 16), a3 = _mm256_loadu_ps(o0 + 24);
      __m256 c0 = _mm256_loadu_ps(o1), c1 = _mm256_loadu_ps(o1 + 8);
      __m256 c2 = _mm256_loadu_ps(o1 + 16), c3 = _mm256_loadu_ps(o1 + 24);
      for (size_t k = 0; k < k_count; ++k) {
        const float* row = m + k * ld + j0;
        const __m256 r0 = _mm256_loadu_ps(row), r1 = _mm256_loadu_ps(row + 8);
        const __m256 r2 = _mm256_loadu_ps(row + 16), r3 = _mm256_loadu_ps(row + 24);
        const __m256 x = _mm256_broadcast_ss(v0 + k), y = _mm256_broadcast_ss(v1 + k);
        a0 = _mm256_fmadd_ps(x, r0, a0);
        a1 = _mm256_fmadd_ps(x, r1, a1);
        a2 = _mm256_fmadd_ps(x, r2, a2);
        a3 = _mm256_fmadd_ps(x, r3, a3);
        c0 = _mm256_fmadd_ps(y, r0, c0);
        c1 = _mm256_fmadd_ps(y, r1, c1);
        c2 = _mm256_fmadd_ps(y, r2, c2);
        c3 = _mm256_fmadd_ps(y, r3, c3);
      }
      _mm256_storeu_ps(o0, a0);
      _mm256_storeu_ps(o0 + 8, a1);
      _mm256_storeu_ps(o0 + 16, a2);
      _mm256_storeu_ps(o0 + 24, a3);
      _mm256_storeu_ps(o1, c0);
      _mm256_storeu_ps(o1 + 8, c1);
      _mm256_storeu_ps(o1 + 16, c2);
      _mm256_storeu_ps(o1 + 24, c3);
    }
    for (; b < rows; ++b) {
      float* o0 = out + b * ldo + j0;
      const float* v0 = v + b * ldv;
      __m256 a0 = _mm256_loadu_ps(o0), a1 = _mm256_loadu_ps(o0 + 8);
      __m256 a2 = _mm256_loadu_ps(o0 + 16), a3 = _mm256_loadu_ps(o0 + 24);
      for (size_t k = 0; k < k_count; ++k) {
        const float* row = m + k * ld + j0;
        const __m256 x = _mm256_broadcast_ss(v0 + k);
        a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(row), a0);
        a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(row + 8), a1);
        a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(row + 16), a2);
        a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(row + 24), a3);
      }
      _mm256_storeu_ps(o0, a0);
      _mm256_storeu_ps(o0 + 8, a1);
      _mm256_storeu_ps(o0 + 16, a2);
      _mm256_storeu_ps(o0 + 24, a3);
    }
  }
  if (j0 < n)  // the last columns: the generic loop
    rnn_detail::gemm_acc(v, ldv, rows, k_count, m + j0, ld, out + j0, ldo, n - j0);
}

struct Acts {
  static void sigmoid(float* x, size_t n) { apply<sigmoid_ps>(x, n); }
  static void tanh(float* x, size_t n) { apply<tanh_ps>(x, n); }
  static void gemm(const float* v, size_t ldv, size_t rows, size_t k, const float* m, size_t ld,
                   float* out, size_t ldo, size_t n) {
    rnn_x86::gemm(v, ldv, rows, k, m, ld, out, ldo, n);
  }
};

}  // namespace rnn_x86
}  // namespace
}  // namespace onnxplex::mlas
