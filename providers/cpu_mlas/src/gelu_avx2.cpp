// GELU with AVX2 + FMA: the AVX-512 variant's exp (range reduction to [-ln2/2, ln2/2], a
// degree-7 polynomial) with 2^n built in the exponent field, n kept within [-126, 127] by
// clamping the argument to [-87.3, 88.3]: above it exp is inf (gelu: -0, or NaN for -inf, as
// the AVX-512 variant), below it the quotient is x to within 1e-37.
#include <immintrin.h>

#include "gelu.h"
#include "vexp.h"

namespace onnxplex::mlas {

namespace {

inline __m256 gelu_ps(__m256 v, const GeluForm& form) {
  const __m256 z = _mm256_min_ps(_mm256_mul_ps(v, v), _mm256_set1_ps(form.clamp));
  __m256 q = _mm256_set1_ps(form.coeffs[0]);
  for (size_t c = 1; c < form.count; ++c) {
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(form.coeffs[c]));
  }
  const __m256 e = vexp::exp_ps(_mm256_mul_ps(_mm256_mul_ps(v, q), _mm256_set1_ps(-2.0f)));
  // v / (1 + e): NaN in v stays NaN (the clamps may lose it in e, the division keeps v's).
  return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

void gelu_f32_avx2(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
                   const GeluForm& form) {
  // The driver passes a bias only over runs of at most one period starting at its element 0.
  (void)bias_count;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
    _mm256_storeu_ps(y + i, gelu_ps(v, form));
  }
  if (i < n) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 v = _mm256_maskload_ps(x + i, m);
    if (bias != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + i, m));
    _mm256_maskstore_ps(y + i, m, gelu_ps(v, form));
  }
}

}  // namespace onnxplex::mlas
