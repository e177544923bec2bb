// The sigmoid compiled with AVX-512 flags (the 8-lane loop of vacts_x86.h); SiLU and HardSwish
// on 16 lanes (vexp.h's 16-lane exp), the tail under a mask.
// gcc 12 reports -W(maybe-)uninitialized inside its own AVX-512 headers at -O3 (the
// _mm512_undefined_* pass-through operands, gcc bug 105593): silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "sigmoid.h"
#include "vacts_x86.h"

namespace onnxplex::mlas {

namespace {

// x * sigmoid(x), as Mul(x, Sigmoid(x)) rounds it (-inf: -inf * 0 = NaN, as there)
inline __m512 swish_ps(__m512 x) {
  const __m512 neg = _mm512_sub_ps(_mm512_setzero_ps(), x);
  __m512 e = vexp::exp_ps(neg);
  // exp clamps its argument at 88.5 (finite there): past it e^-x is inf, the sigmoid 0
  e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(neg, _mm512_set1_ps(88.5f), _CMP_GT_OQ), e,
                           _mm512_set1_ps(__builtin_inff()));
  // 1 / (1 + e) as the reciprocal estimate refined by one Newton step (relative error ~1e-8,
  // below float's rounding): the division was most of the time (vdivps zmm issues every ~10
  // cycles: a SiLU'd depthwise conv of 144 x 56 x 56 spent ~200 us in it, the conv ~180)
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  // (e = inf: the sigmoid is 0, where the Newton step would make it NaN)
  const __m512 s = _mm512_maskz_mov_ps(
      _mm512_cmp_ps_mask(d, _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ), r);
  // exp's clamp turns a NaN into a number: keep x's NaN
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_mul_ps(x, s), x);
}

inline __m512 hardswish_ps(__m512 x) {
  const __m512 gate = _mm512_min_ps(
      _mm512_set1_ps(1.0f),
      _mm512_max_ps(_mm512_setzero_ps(),
                    _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f))));
  return _mm512_mul_ps(x, gate);  // NaN: NaN times whatever the clip gave
}

// NaN: maxps/minps return their second operand when either is NaN, x's value second
inline __m512 hardsigmoid_ps(__m512 x) {
  const __m512 v = _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
  return _mm512_min_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(_mm512_setzero_ps(), v));
}

template <__m512 (*F)(__m512)>
void run(const float* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void sigmoid_f32_avx512(const float* x, float* y, size_t n) { vacts::sigmoid_into(x, y, n); }
void swish_f32_avx512(const float* x, float* y, size_t n) { run<swish_ps>(x, y, n); }
void hardswish_f32_avx512(const float* x, float* y, size_t n) { run<hardswish_ps>(x, y, n); }
void hardsigmoid_f32_avx512(const float* x, float* y, size_t n) { run<hardsigmoid_ps>(x, y, n); }

}  // namespace onnxplex::mlas
