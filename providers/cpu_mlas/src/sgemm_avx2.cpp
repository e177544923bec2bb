// The AVX2 + FMA float32 GEMM micro-kernel. The packed layout is the AVX-512 kernel's (A panels
// of 12 rows, B panels of 32 columns), but AVX2 has 16 ymm registers, not 32 zmm: a 12 x 32 tile
// is run as up to four 6 x 16 blocks, each in 12 ymm accumulators (6 rows x 2 vectors of 8), with
// two B loads and six broadcast A values per k (12 FMAs per 8 loads: the FMA ports stay busy);
// a last run of at most 8 columns as a 12 x 8 block (12 accumulators, one B load).
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

constexpr size_t kBlockCols = 16;

// Lane mask for the first n (0..8) of 8 floats.
inline __m256i lanes(size_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// Rows [r0, r0 + R) x columns [c0, c0 + 8 NV) of the tile (`cols` of them valid, 1..8 NV), in
// R x NV ymm accumulators. DirectA: A read in place (rows lda apart, k contiguous). DirectB: B
// read in place (rows ldb apart; a partial block through masked loads).
template <int R, int NV, bool DirectA, bool DirectB>
void block(const SgemmTile& t, size_t r0, size_t c0, size_t cols) {
  __m256i mask[NV];
  for (int v = 0; v < NV; ++v) {
    mask[v] = lanes(cols > 8 * size_t(v) ? std::min<size_t>(cols - 8 * v, 8) : 0);
  }
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  const float* a = DirectA ? t.a + r0 * t.lda : t.a + r0;
  const float* b = t.b + c0;
  const size_t segs = DirectA ? t.segs : 1, seg_len = t.kc / segs;
  for (size_t s = 0; s < segs; ++s, a += DirectA ? t.seg_skip : 0) {
#pragma GCC unroll 4
  for (size_t k = 0; k < seg_len; ++k) {
    __m256 bv[NV];
    for (int v = 0; v < NV; ++v) {
      bv[v] = DirectB ? _mm256_maskload_ps(b + 8 * v, mask[v]) : _mm256_load_ps(b + 8 * v);
    }
    if (!DirectB) {
      // This block's line of the B row 24 k ahead (as the AVX-512 kernel: an L3 latency).
      _mm_prefetch(reinterpret_cast<const char*>(b + 24 * kSgemmNr), _MM_HINT_T0);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(DirectA ? a + r * t.lda : a + r);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += DirectA ? 1 : kSgemmMr;
    b += DirectB ? t.ldb : kSgemmNr;
  }
  }

  __m256 cb[NV];
  for (int v = 0; v < NV; ++v) {
    cb[v] = t.last && t.col_bias != nullptr ? _mm256_maskload_ps(t.col_bias + c0 + 8 * v, mask[v])
                                            : _mm256_setzero_ps();
  }
  const __m256 lo = _mm256_set1_ps(t.lo), hi = _mm256_set1_ps(t.hi);
  // vmaskmovps stores are microcoded on AMD (~10x a plain store): full blocks store plainly.
  const bool full = cols == 8 * size_t(NV);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* c = t.c + (r0 + r) * t.ldc + c0;
    const float* add = t.accumulate ? t.addend + (r0 + r) * t.ld_addend + c0 : nullptr;
    for (int v = 0; v < NV; ++v) {
      __m256 x = acc[r][v];
      if (t.accumulate) {
        x = _mm256_add_ps(x, full ? _mm256_loadu_ps(add + 8 * v)
                                  : _mm256_maskload_ps(add + 8 * v, mask[v]));
      }
      if (t.last) {
        if (t.row_bias != nullptr) x = _mm256_add_ps(x, _mm256_set1_ps(t.row_bias[r0 + r]));
        if (t.col_bias != nullptr) x = _mm256_add_ps(x, cb[v]);
        // maxps/minps return their second operand when either is NaN: x second, NaN stays NaN.
        x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
      }
      if (full) {
        _mm256_storeu_ps(c + 8 * v, x);
      } else {
        _mm256_maskstore_ps(c + 8 * v, mask[v], x);
      }
    }
  }
}

// Rows [r0, r0 + rows) as one block of exactly `rows` (1..R) rows: only the row counts a run
// can end with are instantiated.
template <int R, int NV, bool DirectA, bool DirectB>
void block_of(const SgemmTile& t, size_t r0, size_t rows, size_t c0, size_t cols) {
  if constexpr (R > 1) {
    if (rows < R) return block_of<R - 1, NV, DirectA, DirectB>(t, r0, rows, c0, cols);
  }
  block<R, NV, DirectA, DirectB>(t, r0, c0, cols);
}

// A run of rows through blocks of up to 6 rows for two vectors per row, 12 for one.
template <int NV, bool DirectA, bool DirectB>
void run_rows(const SgemmTile& t, size_t c0, size_t cols) {
  constexpr int kRows = NV == 2 ? 6 : 12;
  for (size_t r0 = 0; r0 < t.rows; r0 += kRows) {
    block_of<kRows, NV, DirectA, DirectB>(t, r0, std::min<size_t>(kRows, t.rows - r0), c0, cols);
  }
}

// Column halves of 16 as 6 x 16 blocks; a last run of at most 8 columns as 12 x 8 blocks
// (a 6 x 16 block would compute at least half of it for nothing: 7x7 convs' 49 columns).
template <bool DirectA, bool DirectB>
void tile(const SgemmTile& t) {
  for (size_t c0 = 0; c0 < t.cols; c0 += kBlockCols) {
    const size_t cols = std::min(kBlockCols, t.cols - c0);
    if (cols > 8) {
      run_rows<2, DirectA, DirectB>(t, c0, cols);
    } else {
      run_rows<1, DirectA, DirectB>(t, c0, cols);
    }
  }
}

}  // namespace

void nbits4_panel_avx2(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst) {
  nbits4_runs(b, panel, k0, kc, dst, [](const float* sc, const float* zp, const uint8_t* q,
                                        float* d, size_t rows) {
    const __m256i low = _mm256_set1_epi32(0xF);
    __m256 s[4], z[4];
    for (int i = 0; i < 4; ++i) {
      s[i] = _mm256_loadu_ps(sc + 8 * i);
      z[i] = _mm256_loadu_ps(zp + 8 * i);
    }
    for (size_t r = 0; r < rows; r += 2, q += kSgemmNr, d += 2 * kSgemmNr) {
      for (int i = 0; i < 4; ++i) {  // columns 8i .. 8i + 7
        const __m256i v = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * i)));
        const __m256 f0 = _mm256_cvtepi32_ps(_mm256_and_si256(v, low));
        _mm256_store_ps(d + 8 * i, _mm256_mul_ps(_mm256_sub_ps(f0, z[i]), s[i]));
        if (r + 1 < rows) {
          const __m256 f1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
          _mm256_store_ps(d + kSgemmNr + 8 * i, _mm256_mul_ps(_mm256_sub_ps(f1, z[i]), s[i]));
        }
      }
    }
  });
}

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
