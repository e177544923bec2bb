// The AVX2 + FMA float32 GEMM micro-kernel. The packed layout is the AVX-512 kernel's (A panels
// of 12 rows, B panels of 32 columns), but AVX2 has 16 ymm registers, not 32 zmm: a 12 x 32 tile
// is run as up to four 6 x 16 blocks, each in 12 ymm accumulators (6 rows x 2 vectors of 8), with
// two B loads and six broadcast A values per k (12 FMAs per 8 loads: the FMA ports stay busy).
// Both blocks of a column half run back to back, so that half of the B panel (kc x 16 floats,
// 16 KiB at kc 256) is read from L1 the second time.
#include <immintrin.h>

#include <algorithm>

#include "conv_pack_impl.h"
#include "sgemm.h"

// As in sgemm_avx512.cpp: keep gcc from turning the accumulators' zeroing into a memset call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

namespace onnxplex::mlas {

namespace {

constexpr size_t kBlockRows = 6;
constexpr size_t kBlockCols = 16;

// Lane mask for the first n (0..8) of 8 floats.
inline __m256i lanes(size_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// Rows [r0, r0 + R) x columns [c0, c0 + 16) of the tile (`cols` of them valid, 1..16).
// DirectA: A read in place (rows lda apart, k contiguous). DirectB: B read in place (rows ldb
// apart; a partial block through masked loads).
template <int R, bool DirectA, bool DirectB>
void block(const SgemmTile& t, size_t r0, size_t c0, size_t cols) {
  const __m256i m0 = lanes(std::min<size_t>(cols, 8));
  const __m256i m1 = lanes(cols > 8 ? cols - 8 : 0);
  __m256 c0v[R], c1v[R];
  for (int r = 0; r < R; ++r) {
    c0v[r] = _mm256_setzero_ps();
    c1v[r] = _mm256_setzero_ps();
  }
  const float* a = DirectA ? t.a + r0 * t.lda : t.a + r0;
  const float* b = t.b + c0;
#pragma GCC unroll 4
  for (size_t k = 0; k < t.kc; ++k) {
    __m256 b0, b1;
    if (DirectB) {
      b0 = _mm256_maskload_ps(b, m0);
      b1 = _mm256_maskload_ps(b + 8, m1);
    } else {
      b0 = _mm256_load_ps(b);
      b1 = _mm256_load_ps(b + 8);
      // This half's line of the B row 24 k ahead (as the AVX-512 kernel: an L3 latency).
      _mm_prefetch(reinterpret_cast<const char*>(b + 24 * kSgemmNr), _MM_HINT_T0);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(DirectA ? a + r * t.lda : a + r);
      c0v[r] = _mm256_fmadd_ps(av, b0, c0v[r]);
      c1v[r] = _mm256_fmadd_ps(av, b1, c1v[r]);
    }
    a += DirectA ? 1 : kSgemmMr;
    b += DirectB ? t.ldb : kSgemmNr;
  }

  __m256 cb0 = _mm256_setzero_ps(), cb1 = _mm256_setzero_ps();
  if (t.last && t.col_bias != nullptr) {
    cb0 = _mm256_maskload_ps(t.col_bias + c0, m0);
    cb1 = _mm256_maskload_ps(t.col_bias + c0 + 8, m1);
  }
  const __m256 lo = _mm256_set1_ps(t.lo), hi = _mm256_set1_ps(t.hi);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* c = t.c + (r0 + r) * t.ldc + c0;
    __m256 v0 = c0v[r], v1 = c1v[r];
    if (t.accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_maskload_ps(c, m0));
      v1 = _mm256_add_ps(v1, _mm256_maskload_ps(c + 8, m1));
    }
    if (t.last) {
      if (t.row_bias != nullptr) {
        const __m256 rb = _mm256_set1_ps(t.row_bias[r0 + r]);
        v0 = _mm256_add_ps(v0, rb);
        v1 = _mm256_add_ps(v1, rb);
      }
      if (t.col_bias != nullptr) {
        v0 = _mm256_add_ps(v0, cb0);
        v1 = _mm256_add_ps(v1, cb1);
      }
      // maxps/minps return their second operand when either is NaN: v second, NaN stays NaN.
      v0 = _mm256_min_ps(hi, _mm256_max_ps(lo, v0));
      v1 = _mm256_min_ps(hi, _mm256_max_ps(lo, v1));
    }
    _mm256_maskstore_ps(c, m0, v0);
    _mm256_maskstore_ps(c + 8, m1, v1);
  }
}

template <bool DirectA, bool DirectB>
void run_block(const SgemmTile& t, size_t r0, size_t rows, size_t c0, size_t cols) {
  switch (rows) {
    case 6: return block<6, DirectA, DirectB>(t, r0, c0, cols);
    case 5: return block<5, DirectA, DirectB>(t, r0, c0, cols);
    case 4: return block<4, DirectA, DirectB>(t, r0, c0, cols);
    case 3: return block<3, DirectA, DirectB>(t, r0, c0, cols);
    case 2: return block<2, DirectA, DirectB>(t, r0, c0, cols);
    default: return block<1, DirectA, DirectB>(t, r0, c0, cols);
  }
}

template <bool DirectA, bool DirectB>
void tile(const SgemmTile& t) {
  for (size_t c0 = 0; c0 < t.cols; c0 += kBlockCols) {
    const size_t cols = std::min(kBlockCols, t.cols - c0);
    for (size_t r0 = 0; r0 < t.rows; r0 += kBlockRows) {
      run_block<DirectA, DirectB>(t, r0, std::min(kBlockRows, t.rows - r0), c0, cols);
    }
  }
}

}  // namespace

void conv2d_pack_avx2(const float* x, const Conv2dGeometry& g, size_t k0, size_t kc, size_t c0,
                      size_t nc, float* dst) {
  detail::conv2d_pack(x, g, k0, kc, c0, nc, dst);
}

void sgemm_tile_avx2(const SgemmTile& t) {
  if (t.ldb != 0) return t.lda != 0 ? tile<true, true>(t) : tile<false, true>(t);
  if (t.lda != 0) return tile<true, false>(t);
  tile<false, false>(t);
}

}  // namespace onnxplex::mlas
