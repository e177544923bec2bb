// Vector exp for float32, one per x86 ISA (include only from a translation unit compiled with
// that ISA's flags): range reduction to [-ln2/2, ln2/2] with ln2 split in two parts, a degree-7
// polynomial (relative error below 1e-8 before rounding), then 2^n. Used by GELU, Sigmoid, the
// RNN cells and the attention softmax.
//
// Below ln(FLT_MIN) the result is 0, not a denormal: a softmax row masked with -inf or
// float32's lowest value (GPT-2's causal mask) held a denormal in every masked place, and
// every later multiply with one took the processor's slow path (the masked attention of a
// 64-token GPT-2 layer, 0.11 -> 3.8 ms). The error is below FLT_MIN, absolute.
#pragma once

#include <immintrin.h>

namespace onnxplex::mlas::vexp {

constexpr float kExpUnderflow = -87.33654475f;  // ln(FLT_MIN): below it, exp gives 0

// The short exp of the SiLU (sigmoid_avx2.cpp and sigmoid_avx512.cpp, one formula): e^-x as
// 2^n e^r, n = round(-x log2 e), r = -x - n ln2 (ln2 in two parts), e^r = 1 + r + c2 r^2 +
// ... + c5 r^5 with kSiluExp = {c2, c3, c4, c5} fitted for relative error (1.6e-7 evaluated in
// float32); -x clamped to [kSiluLow, kSiluHigh]: past the top e^-x overflows (the sigmoid is
// 0), below the bottom it is negligible beside 1 and 2^n stays normal.
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kSiluExp[4] = {0.499992311000824f, 0.16667114198207855f, 0.04189004749059677f,
                               0.008312484249472618f};
constexpr float kSiluHigh = 87.0f, kSiluLow = -80.0f;

#if defined(__AVX512F__)

// 2^n through vscalefps; the clamp to [-88.5, 88.5] keeps the reduction exact; above
// ln(FLT_MAX) the result is inf.
inline __m512 exp_ps(__m512 x) {
  const __mmask16 kept = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpUnderflow), _CMP_NLT_UQ);
  const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283906f), _CMP_GT_OQ);
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.5f)), _mm512_set1_ps(-88.5f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 split in two parts
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(kept, _mm512_scalef_ps(p, n)), over,
                            _mm512_set1_ps(__builtin_inff()));
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// 2^n built in the exponent field, n kept within [-126, 127] by clamping the argument to
// [-87.3, 88.3]: above it exp is inf; below ln(FLT_MIN), 0.
inline __m256 exp_ps(__m256 x) {
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.3f), _CMP_GT_OQ);  // e^x is inf
  const __m256 kept = _mm256_cmp_ps(x, _mm256_set1_ps(kExpUnderflow), _CMP_NLT_UQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 split in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)),
                                         _mm256_set1_ps(__builtin_inff()), over),
                        kept);
}
#endif

}  // namespace onnxplex::mlas::vexp
