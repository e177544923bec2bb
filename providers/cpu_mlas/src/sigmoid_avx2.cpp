// The sigmoid, SiLU and HardSwish compiled with AVX2 + FMA (8 lanes).
#include "sigmoid.h"
#include "vacts_x86.h"

namespace onnxplex::mlas {

namespace {

// x * sigmoid(x) = x / (1 + e^-x), as sigmoid_avx512.cpp's swish_ps computes it (e^-x as
// 2^n e^r, a degree-5 polynomial, the same cut-offs and special values), 2^n built in the
// exponent field (-x clamped to [-80, 87]: n stays within the normal range) and the quotient
// a division (the 12-bit reciprocal estimate and one Newton step would leave ~2^-22).
inline __m256 swish_ps(__m256 x) {
  const __m256 neg = _mm256_sub_ps(_mm256_setzero_ps(), x);
  const __m256 live =   // (NaN: no)
      _mm256_cmp_ps(neg, _mm256_set1_ps(vexp::kSiluHigh), _CMP_LE_OQ);
  const __m256 t = _mm256_max_ps(_mm256_min_ps(neg, _mm256_set1_ps(vexp::kSiluHigh)),
                                 _mm256_set1_ps(vexp::kSiluLow));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(vexp::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(vexp::kLn2Hi), t);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(vexp::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(vexp::kSiluExp[3]);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(vexp::kSiluExp[2]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(vexp::kSiluExp[1]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(vexp::kSiluExp[0]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256 two_n = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 s = _mm256_div_ps(one, _mm256_fmadd_ps(p, two_n, one));
  return _mm256_mul_ps(x, _mm256_and_ps(live, s));
}

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
