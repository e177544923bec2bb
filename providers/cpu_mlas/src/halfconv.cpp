// float32 <-> float16 / bfloat16: dispatch and the portable variants (bit manipulation, the
// rounding numpy's npy_floatbits_to_halfbits and ml_dtypes' bfloat16 do).
#include "halfconv.h"

#include <cstring>

#include "cpu_features.h"

namespace onnxplex::mlas {

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t to_f16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t exp = (u >> 23) & 0xFFu;
  uint32_t sig = u & 0x7FFFFFu;
  if (exp == 0xFFu) {   // inf, or NaN keeping its top payload bits (and at least one)
    if (sig == 0) return static_cast<uint16_t>(sign | 0x7C00u);
    const uint32_t payload = sig >> 13;
    return static_cast<uint16_t>(sign | 0x7C00u | (payload ? payload : 1u));
  }
  const int e = static_cast<int>(exp) - 127 + 15;   // the half's biased exponent
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);   // overflow: infinity
  if (e <= 0) {   // a half subnormal (or zero): shift the significand with its implicit 1
    if (e < -10) return static_cast<uint16_t>(sign);   // below half the smallest: +-0
    sig |= 0x800000u;
    const int shift = 14 - e;   // 14..24
    const uint32_t half = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    const uint32_t up = (rest > mid || (rest == mid && (half & 1u))) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (half + up));   // (a carry makes it the smallest normal)
  }
  // normal: round the 23-bit significand to 10 bits, nearest even (a carry may reach inf)
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (sig >> 13);
  const uint32_t rest = sig & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float from_f16(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t sig = h & 0x3FFu;
  if (exp == 0x1Fu) return float_of(sign | 0x7F800000u | (sig << 13));   // inf / NaN
  if (exp == 0) {
    if (sig == 0) return float_of(sign);
    int e = -1;   // normalise the subnormal
    do {
      ++e;
      sig <<= 1;
    } while (!(sig & 0x400u));
    return float_of(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((sig & 0x3FFu) << 13));
  }
  return float_of(sign | ((exp + 127 - 15) << 23) | (sig << 13));
}

uint16_t to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {   // NaN: quiet, its sign and top payload bits kept
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace

void f32_to_f16_portable(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = to_f16(x[i]);
}

void f16_to_f32_portable(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = from_f16(x[i]);
}

void f32_to_bf16_portable(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

void bf16_to_f32_portable(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = float_of(static_cast<uint32_t>(x[i]) << 16);
}

void f32_to_half(const float* x, uint16_t* y, size_t n, bool bf16) {
#if ONNXPLEX_MLAS_HAVE_X86
  if (cpu_features().avx2) {
    (bf16 ? f32_to_bf16_avx2 : f32_to_f16_avx2)(x, y, n);
    return;
  }
#endif
  (bf16 ? f32_to_bf16_portable : f32_to_f16_portable)(x, y, n);
}

void half_to_f32(const uint16_t* x, float* y, size_t n, bool bf16) {
  if (bf16) {   // (a shift: the compiler vectorises the portable loop)
    bf16_to_f32_portable(x, y, n);
    return;
  }
#if ONNXPLEX_MLAS_HAVE_X86
  if (cpu_features().avx2) {
    f16_to_f32_avx2(x, y, n);
    return;
  }
#endif
  f16_to_f32_portable(x, y, n);
}

}  // namespace onnxplex::mlas
