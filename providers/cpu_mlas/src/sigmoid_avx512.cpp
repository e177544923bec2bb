// The sigmoid compiled with AVX-512 flags (vacts_x86.h's 16-lane one); SiLU and HardSwish on 16
// lanes too, all through vacts::map16_into (the tail under a mask).
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

// x * sigmoid(x) = x / (1 + e^-x), e^-x by vexp.h's short exp of the SiLU (under 2 ulp; its
// general exp takes degree 7 and clamps both ends with masks: ~30 instructions a vector here
// against 19 now, and a SiLU costs as much as the conv it follows on EfficientNet's large
// maps). Past -x = kSiluHigh the sigmoid is 0: x times 0 is -0 for a finite x and NaN for
// -inf, as Mul(x, Sigmoid(x)) gives; a NaN x fails the same test and stays NaN (x * 0).
inline __m512 swish_ps(__m512 x) {
  const __m512 neg = _mm512_sub_ps(_mm512_setzero_ps(), x);
  const __mmask16 live =
      _mm512_cmp_ps_mask(neg, _mm512_set1_ps(vexp::kSiluHigh), _CMP_LE_OQ);
  const __m512 t = _mm512_max_ps(_mm512_min_ps(neg, _mm512_set1_ps(vexp::kSiluHigh)),
                                 _mm512_set1_ps(vexp::kSiluLow));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(vexp::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(vexp::kLn2Hi), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(vexp::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(vexp::kSiluExp[3]);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(vexp::kSiluExp[2]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(vexp::kSiluExp[1]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(vexp::kSiluExp[0]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  // 1 / (1 + e) as the reciprocal estimate refined by one Newton step (relative error ~1e-8):
  // the division was most of the time (vdivps zmm issues every ~10 cycles)
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(p, n));
  __m512 s = _mm512_rcp14_ps(d);
  s = _mm512_mul_ps(s, _mm512_fnmadd_ps(d, s, _mm512_set1_ps(2.0f)));
  return _mm512_mul_ps(x, _mm512_maskz_mov_ps(live, s));
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

}  // namespace

void sigmoid_f32_avx512(const float* x, float* y, size_t n) { vacts::sigmoid_into(x, y, n); }
void swish_f32_avx512(const float* x, float* y, size_t n) {
  vacts::map16_into<swish_ps>(x, y, n);
}
void hardswish_f32_avx512(const float* x, float* y, size_t n) {
  vacts::map16_into<hardswish_ps>(x, y, n);
}
void hardsigmoid_f32_avx512(const float* x, float* y, size_t n) {
  vacts::map16_into<hardsigmoid_ps>(x, y, n);
}

}  // namespace onnxplex::mlas
