// The AVX2 qgemm variant: operands widened to int16 at packing time and multiplied with
// vpmaddwd (exact: no int16 saturation, unlike vpmaddubsw on uint8 x int8) on a 6 x 16 int32
// tile in ymm registers (12 accumulators, 2 B vectors, the broadcast A value and a product).
// Built with -mavx2 -mfma and -ffp-contract=off.
#include <immintrin.h>

#include <cstring>

#include "qgemm.h"

namespace onnxplex::mlas {

namespace {

constexpr size_t kPanel = 16;

inline __m256i bcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i tail_mask(size_t left) {
  alignas(32) static const int32_t ramp[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ramp + 8 - (left >= 8 ? 8 : left)));
}

// acc += p, in place. Written as _mm256_add_epi32, gcc 12 gives each sum a new register and
// copies it back (8 vmovdqa a k step at 4 rows; at 6 rows it ran out of registers and
// spilled 16): the asm pins the destination. 4 x 16 tiles 53 -> 70 GMAC/s, 6 x 16 ~72.
inline void accumulate(__m256i& acc, __m256i p) {
  __asm__("vpaddd %1, %0, %0" : "+x"(acc) : "x"(p));
}

template <size_t R>
void tile(const QgemmTile& t) {
  __m256i acc[R][2];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
    acc[r][0] = _mm256_setzero_si256();
    acc[r][1] = _mm256_setzero_si256();
  }
  const uint8_t* b = t.b;
  const size_t steps = t.kp / 2;
  for (size_t s = 0; s < steps; ++s, b += kPanel * 4) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32));
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const __m256i a = bcast32(t.a + r * t.lda + s * 4);
      accumulate(acc[r][0], _mm256_madd_epi16(a, b0));
      accumulate(acc[r][1], _mm256_madd_epi16(a, b1));
    }
  }
#pragma GCC unroll 2
  for (size_t v = 0; v < 2; ++v) {
    const size_t col = v * 8;
    if (col >= t.cols) break;
    const __m256i mask = tail_mask(t.cols - col);
    const __m256i zp = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.b_zp + col));
    const __m256i corr = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.b_corr + col));
    __m256 scale = _mm256_setzero_ps(), bias = _mm256_setzero_ps();
    if (t.c_f32 != nullptr) {
      scale = _mm256_loadu_ps(t.scale + col);
      if (t.bias != nullptr) bias = _mm256_loadu_ps(t.bias + col);
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      __m256i c = _mm256_add_epi32(acc[r][v],
                                   _mm256_mullo_epi32(_mm256_set1_epi32(t.a_zp[r]), corr));
      c = _mm256_sub_epi32(c, _mm256_mullo_epi32(zp, _mm256_set1_epi32(t.a_sum[r])));
      if (t.c_i32 != nullptr) {
        _mm256_maskstore_epi32(reinterpret_cast<int*>(t.c_i32 + r * t.ldc + col), mask, c);
      } else {
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(c), scale);
        if (t.bias != nullptr) f = _mm256_add_ps(f, bias);
        _mm256_maskstore_ps(t.c_f32 + r * t.ldc + col, mask, f);
      }
    }
  }
}

}  // namespace

void qgemm_tile_avx2(const QgemmTile& t) {
  switch (t.rows) {
    case 6: tile<6>(t); break;
    case 5: tile<5>(t); break;
    case 4: tile<4>(t); break;
    case 3: tile<3>(t); break;
    case 2: tile<2>(t); break;
    default: tile<1>(t); break;
  }
}

void minmax_avx2(const float* x, size_t n, float* lo, float* hi) {
  __m256 l = _mm256_set1_ps(*lo), h = _mm256_set1_ps(*hi);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    l = _mm256_min_ps(l, v);
    h = _mm256_max_ps(h, v);
  }
  alignas(32) float ls[8], hs[8];
  _mm256_store_ps(ls, l);
  _mm256_store_ps(hs, h);
  float lo_v = *lo, hi_v = *hi;
  for (int j = 0; j < 8; ++j) {
    lo_v = ls[j] < lo_v ? ls[j] : lo_v;
    hi_v = hs[j] > hi_v ? hs[j] : hi_v;
  }
  for (; i < n; ++i) {
    lo_v = x[i] < lo_v ? x[i] : lo_v;
    hi_v = x[i] > hi_v ? x[i] : hi_v;
  }
  *lo = lo_v;
  *hi = hi_v;
}

void quantize_row_avx2(const float* x, size_t k, float scale, float zp, uint16_t* q,
                       int32_t* sum) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zp);
  const __m256 lo = _mm256_set1_ps(-zp), hi = _mm256_set1_ps(255.0f - zp);
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), s);
    v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i u = _mm256_cvtps_epi32(_mm256_add_ps(v, z));
    acc = _mm256_add_epi32(acc, u);
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(u, u), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm256_castsi256_si128(p));
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  int32_t total = 0;
  for (int j = 0; j < 8; ++j) total += lanes[j];
  for (; i < k; ++i) {
    float v = x[i] / scale;
    v = _mm_cvtss_f32(_mm_round_ss(_mm_setzero_ps(), _mm_set_ss(v),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    v = v < -zp ? -zp : v;
    v = v > 255.0f - zp ? 255.0f - zp : v;
    const auto u = static_cast<uint16_t>(static_cast<int32_t>(v + zp));
    q[i] = u;
    total += u;
  }
  *sum = total;
}

}  // namespace onnxplex::mlas
