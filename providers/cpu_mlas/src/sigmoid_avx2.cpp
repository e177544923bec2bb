// The sigmoid, SiLU and HardSwish compiled with AVX2 + FMA (8 lanes).
#include "sigmoid.h"
#include "vacts_x86.h"

namespace onnxplex::mlas {

namespace {

inline __m256 swish_ps(__m256 x) { return _mm256_mul_ps(x, vacts::sigmoid_ps(x)); }

inline __m256 hardswish_ps(__m256 x) {
  const __m256 gate = _mm256_min_ps(
      _mm256_set1_ps(1.0f),
      _mm256_max_ps(_mm256_setzero_ps(),
                    _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f))));
  return _mm256_mul_ps(x, gate);  // NaN: NaN times whatever the clip gave
}

// NaN: maxps/minps return their second operand when either is NaN, x's value second
inline __m256 hardsigmoid_ps(__m256 x) {
  const __m256 v = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
  return _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_setzero_ps(), v));
}

}  // namespace

void sigmoid_f32_avx2(const float* x, float* y, size_t n) { vacts::sigmoid_into(x, y, n); }
void swish_f32_avx2(const float* x, float* y, size_t n) { vacts::map_into<swish_ps>(x, y, n); }
void hardswish_f32_avx2(const float* x, float* y, size_t n) {
  vacts::map_into<hardswish_ps>(x, y, n);
}
void hardsigmoid_f32_avx2(const float* x, float* y, size_t n) {
  vacts::map_into<hardsigmoid_ps>(x, y, n);
}

}  // namespace onnxplex::mlas
