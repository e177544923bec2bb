// GELU with AVX-512: exp by range reduction to [-ln2/2, ln2/2] and a degree-7 polynomial
// (relative error below 1e-8 before rounding), 2^n through vscalefps.
#include <immintrin.h>

#include "gelu.h"
#include "vexp.h"

namespace onnxplex::mlas {

namespace {

inline __m512 gelu_ps(__m512 v, const GeluForm& form) {
  const __m512 z = _mm512_min_ps(_mm512_mul_ps(v, v), _mm512_set1_ps(form.clamp));
  __m512 q = _mm512_set1_ps(form.coeffs[0]);
  for (size_t c = 1; c < form.count; ++c) q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(form.coeffs[c]));
  const __m512 e = vexp::exp_ps(_mm512_mul_ps(_mm512_mul_ps(v, q), _mm512_set1_ps(-2.0f)));
  // v / (1 + e): NaN in v stays NaN (z = min(NaN, c) is c, but the division keeps v's NaN).
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace

void gelu_f32_avx512(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
                     const GeluForm& form) {
  // The driver passes a bias only over runs of at most one period starting at its element 0.
  (void)bias_count;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
    _mm512_storeu_ps(y + i, gelu_ps(v, form));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(y + i, m, gelu_ps(v, form));
  }
}

}  // namespace onnxplex::mlas
