// The im2col packing of Conv2dSource, included by one translation unit per ISA (each compiled
// with its own -m flags): sgemm.cpp (portable), sgemm_avx2.cpp and sgemm_avx512.cpp. Internal
// linkage, so each keeps its own copy (see dwconv_impl.h).
#pragma once

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <vector>

#include "gather_impl.h"
#include "sgemm.h"

namespace onnxplex::mlas::detail {
namespace {

// Runs are at most 32 floats: masked vector moves (or a short loop) beat a call to memcpy.
inline void copy_floats(float* out, const float* in, std::ptrdiff_t n) {
#if defined(__AVX512F__)
  for (; n >= 16; n -= 16, in += 16, out += 16) _mm512_storeu_ps(out, _mm512_loadu_ps(in));
  if (n > 0) {
    const auto m = static_cast<__mmask16>((1u << n) - 1);
    _mm512_mask_storeu_ps(out, m, _mm512_maskz_loadu_ps(m, in));
  }
#elif defined(__AVX2__)
  for (; n >= 8; n -= 8, in += 8, out += 8) _mm256_storeu_ps(out, _mm256_loadu_ps(in));
  if (n > 0) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(out, m, _mm256_maskload_ps(in, m));
  }
#else
  for (std::ptrdiff_t t = 0; t < n; ++t) out[t] = in[t];
#endif
}

inline void fill_zero(float* out, std::ptrdiff_t n) {
#if defined(__AVX512F__)
  for (; n >= 16; n -= 16, out += 16) _mm512_storeu_ps(out, _mm512_setzero_ps());
  if (n > 0) _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << n) - 1), _mm512_setzero_ps());
#elif defined(__AVX2__)
  for (; n >= 8; n -= 8, out += 8) _mm256_storeu_ps(out, _mm256_setzero_ps());
  for (std::ptrdiff_t t = 0; t < n; ++t) out[t] = 0.0f;
#else
  for (std::ptrdiff_t t = 0; t < n; ++t) out[t] = 0.0f;
#endif
}

inline void conv2d_pack(const float* x_, const Conv2dGeometry& g, size_t k0, size_t kc,
                        size_t c0, size_t nc, float* dst) {
  const auto ih = static_cast<std::ptrdiff_t>(g.h), iw = static_cast<std::ptrdiff_t>(g.w);
  const auto sw = static_cast<std::ptrdiff_t>(g.sw);
  // The columns as runs within one output row and one panel; the same runs serve every k row.
  struct Run {
    float* out;               // the run's first column in its panel, at k row 0
    size_t len;
    std::ptrdiff_t iy0, ix0;  // input position of the run's first column at tap (0, 0)
  };
  static thread_local std::vector<Run> runs;
  runs.clear();
  for (size_t col = 0; col < nc;) {
    const size_t p = c0 + col, oy = p / g.ow, ox0 = p % g.ow;
    const size_t in_panel = kSgemmNr - col % kSgemmNr;
    const size_t len = std::min({nc - col, g.ow - ox0, in_panel});
    runs.push_back({dst + (col / kSgemmNr) * kc * kSgemmNr + col % kSgemmNr, len,
                    static_cast<std::ptrdiff_t>(oy * g.sh) - g.pt,
                    static_cast<std::ptrdiff_t>(ox0 * g.sw) - g.pl});
    col += len;
  }
  size_t c = k0 / (g.kh * g.kw), i = k0 / g.kw % g.kh, j = k0 % g.kw;
  for (size_t kk = 0; kk < kc; ++kk) {
    const float* plane = x_ + c * g.h * g.w;
    const auto dy = static_cast<std::ptrdiff_t>(i * g.dh);
    const auto dx = static_cast<std::ptrdiff_t>(j * g.dw);
    for (const Run& run : runs) {
      float* out = run.out + kk * kSgemmNr;
      const std::ptrdiff_t iy = run.iy0 + dy;
      const auto len = static_cast<std::ptrdiff_t>(run.len);
      if (iy < 0 || iy >= ih) {
        fill_zero(out, len);
        continue;
      }
      const float* row = plane + iy * iw;
      const std::ptrdiff_t x0 = run.ix0 + dx;
      // Columns t in [lo, hi) read inside the row (x0 + t * sw in [0, iw)); the rest are pads.
      // (Stride 1 without the divisions: two of them per run and k row cost as much as
      // copying the run.)
      std::ptrdiff_t lo, hi;
      if (sw == 1) {
        lo = std::clamp<std::ptrdiff_t>(-x0, 0, len);
        hi = std::clamp<std::ptrdiff_t>(iw - x0, lo, len);
      } else {
        lo = x0 >= 0 ? 0 : std::min(len, (-x0 + sw - 1) / sw);
        hi = x0 >= iw ? lo : std::max(lo, std::min(len, (iw - x0 + sw - 1) / sw));
      }
      fill_zero(out, lo);
      if (sw == 1) {
        copy_floats(out + lo, row + x0 + lo, hi - lo);
      } else if (sw == 2) {
        const std::ptrdiff_t first = x0 + 2 * lo;  // in [0, iw)
        gather_stride2(out + lo, row + first, hi - lo, iw - first);
      } else {
        const float* src = row + x0;
        for (std::ptrdiff_t t = lo; t < hi; ++t) out[t] = src[t * sw];
      }
      fill_zero(out + hi, len - hi);
    }
    if (nc % kSgemmNr != 0) {  // the last panel's padding columns
      float* last = dst + (nc / kSgemmNr) * kc * kSgemmNr + kk * kSgemmNr;
      for (size_t t = nc % kSgemmNr; t < kSgemmNr; ++t) last[t] = 0.0f;
    }
    if (++j == g.kw) {
      j = 0;
      if (++i == g.kh) {
        i = 0;
        ++c;
      }
    }
  }
}

}  // namespace
}  // namespace onnxplex::mlas::detail
