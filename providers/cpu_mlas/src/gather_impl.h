// Strided gathers shared by the im2col packing (conv_pack_impl.h) and the depthwise phase
// planes (dwconv_impl.h), included by one translation unit per ISA (each compiled with its own
// -m flags). Internal linkage, so each keeps its own copy (see dwconv_impl.h).
#pragma once

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <cstddef>

namespace onnxplex::mlas::detail {
namespace {

// dst[j] = src[2 j] for j < n, reading no more than `readable` floats from src (the row's end:
// at least 2 n - 1): vector shuffles while a whole source block fits, then one at a time (gcc
// leaves the loop scalar; stride-2 convs and depthwise convs spent most of their packing here).
inline void gather_stride2(float* __restrict dst, const float* __restrict src, std::ptrdiff_t n,
                           std::ptrdiff_t readable) {
  std::ptrdiff_t j = 0;
#if defined(__AVX512F__)
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                          28, 30);
  for (; j + 16 <= n && 2 * j + 32 <= readable; j += 16) {
    const __m512 lo = _mm512_loadu_ps(src + 2 * j), hi = _mm512_loadu_ps(src + 2 * j + 16);
    _mm512_storeu_ps(dst + j, _mm512_permutex2var_ps(lo, evens, hi));
  }
#endif
#if defined(__AVX2__)
  for (; j + 8 <= n && 2 * j + 16 <= readable; j += 8) {
    const __m256 lo = _mm256_loadu_ps(src + 2 * j), hi = _mm256_loadu_ps(src + 2 * j + 8);
    const __m256 even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // per 128 bits
    _mm256_storeu_ps(dst + j,
                     _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
  }
#endif
  (void)readable;
  for (; j < n; ++j) dst[j] = src[2 * j];
}

}  // namespace
}  // namespace onnxplex::mlas::detail
