// float32 <-> float16 with F16C (every AVX2 CPU has it: Haswell, Zen), and float32 ->
// bfloat16 eight at a time, with the portable rounding (halfconv.cpp) in vector form.
#include <immintrin.h>

#include "halfconv.h"

namespace onnxplex::mlas {

void f32_to_f16_avx2(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  if (i < n) f32_to_f16_portable(x + i, y + i, n - i);
}

void f16_to_f32_avx2(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  if (i < n) f16_to_f32_portable(x + i, y + i, n - i);
}

void f32_to_bf16_avx2(const float* x, uint16_t* y, size_t n) {
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x400000);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    // nearest even: u + 0x7FFF + bit 16 of u, then the high half
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    // NaN: u with the quiet bit set, truncated (no rounding into the exponent)
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
    r = _mm256_srli_epi32(r, 16);
    // 8 x 32-bit -> 8 x 16-bit (values < 65536: the unsigned pack does not saturate them)
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r),
                                            _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  if (i < n) f32_to_bf16_portable(x + i, y + i, n - i);
}

}  // namespace onnxplex::mlas
