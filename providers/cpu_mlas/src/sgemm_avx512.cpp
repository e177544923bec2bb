// The AVX-512 float32 GEMM micro-kernel: a 12 x 32 tile of C in 24 zmm accumulators; per k, two
// loads of B and twelve broadcast A values folded into the FMAs (vfmadd231ps zmm, zmm, m32bcst).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "conv_pack_impl.h"
#include "sgemm.h"

// Without this gcc turns the accumulators' zeroing loops into a memset of a stack array (rep
// stos, ~100 cycles a call): a tax on short-K tiles (a 1x1 conv with 16 input channels).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
// gcc 12 reports -W(maybe-)uninitialized inside its own AVX-512 headers at -O3 (the
// _mm512_undefined_* pass-through operands, gcc bug 105593): silenced for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace onnxplex::mlas {

namespace {

// DirectA: A read in place (rows lda apart, k contiguous), not packed. DirectB: B read in place
// (rows ldb apart; a partial panel through masked loads). NV: vectors of 16 columns per row,
// 2, or 1 for a tile of at most 16 columns (half the multiply-adds of a 32-wide one: the last
// 4 columns of a 14 x 14 conv's 196).
// Lda: A's row stride when known at compile time (0: t.lda). Each of the R broadcasts is then
// a constant offset from one pointer, folded into its FMA as a memory operand; with a stride
// known only at run time the compiler computes the row addresses with lea and broadcasts
// them separately, a few lea a k on the FMA ports (single convs and GEMMs 1-4% slower in
// alternating runs, some 10%; see kMaxConstLda).
template <int R, int NV, bool DirectA, bool DirectB, size_t Lda = 0>
void tile(const SgemmTile& t) {
  const size_t lda = Lda != 0 ? Lda : t.lda;
  const __mmask16 m0 = t.cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << t.cols) - 1);
  const __mmask16 m1 =
      t.cols >= 32 ? 0xFFFF : t.cols <= 16 ? 0 : static_cast<__mmask16>((1u << (t.cols - 16)) - 1);
  __m512 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    c0[r] = _mm512_setzero_ps();
    c1[r] = _mm512_setzero_ps();
  }
  // The addend's lines the epilogue will read (Z, or C's sum of earlier k blocks), requested
  // now: they arrive during the k loop instead of stalling the epilogue. (Prefetching the
  // lines of a C only written cost short-K 1x1 convs 3-6%.)
  if (t.accumulate) {
    for (int r = 0; r < R; ++r) {
      const char* e = reinterpret_cast<const char*>(t.addend + r * t.ld_addend);
      _mm_prefetch(e, _MM_HINT_T0);
      if constexpr (NV == 2) _mm_prefetch(e + 64, _MM_HINT_T0);
    }
  }
  const float* a = t.a;
  const float* b = t.b;
  const size_t segs = DirectA ? t.segs : 1, seg_len = t.kc / segs;
  for (size_t s = 0; s < segs; ++s, a += DirectA ? t.seg_skip : 0) {
#pragma GCC unroll 4
  for (size_t k = 0; k < seg_len; ++k) {
    __m512 b0, b1 = _mm512_setzero_ps();
    if (DirectB) {
      b0 = _mm512_maskz_loadu_ps(m0, b);
      if constexpr (NV == 2) b1 = _mm512_maskz_loadu_ps(m1, b + 16);
    } else {
      b0 = _mm512_load_ps(b);
      if constexpr (NV == 2) b1 = _mm512_load_ps(b + 16);
      // Both cache lines of the B row 24 k ahead (~300 cycles: an L3 latency and then some).
      _mm_prefetch(reinterpret_cast<const char*>(b + 24 * kSgemmNr), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + 24 * kSgemmNr + 16), _MM_HINT_T0);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(DirectA ? a[r * lda] : a[r]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      if constexpr (NV == 2) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
    a += DirectA ? 1 : kSgemmMr;
    b += DirectB ? t.ldb : kSgemmNr;
  }
  }

  __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
  if (t.last && t.col_bias != nullptr) {
    cb0 = _mm512_maskz_loadu_ps(m0, t.col_bias);
    cb1 = _mm512_maskz_loadu_ps(m1, t.col_bias + 16);
  }
  const __m512 lo = _mm512_set1_ps(t.lo), hi = _mm512_set1_ps(t.hi);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* c = t.c + r * t.ldc;
    __m512 v0 = c0[r], v1 = c1[r];
    if (t.accumulate) {
      const float* add = t.addend + r * t.ld_addend;
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, add));
      if constexpr (NV == 2) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, add + 16));
    }
    if (t.last) {
      if (t.row_bias != nullptr) {
        const __m512 rb = _mm512_set1_ps(t.row_bias[r]);
        v0 = _mm512_add_ps(v0, rb);
        v1 = _mm512_add_ps(v1, rb);
      }
      if (t.col_bias != nullptr) {
        v0 = _mm512_add_ps(v0, cb0);
        v1 = _mm512_add_ps(v1, cb1);
      }
      // maxps/minps return their second operand when either is NaN: v second, NaN stays NaN.
      v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
      v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    if constexpr (NV == 2) _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

// Full 12 x 32 tiles reading A in place get a variant per row stride that is a multiple of 16
// floats up to this: an NHWC conv's positions are C (stride 1) or 2C floats apart, a GEMM's
// rows K; 64 variants, ~4 KB of code each.
constexpr size_t kConstLdaStep = 16, kMaxConstLda = 1024;

template <size_t... I>
constexpr auto const_lda_tiles(std::index_sequence<I...>) {
  return std::array<void (*)(const SgemmTile&), sizeof...(I)>{
      &tile<12, 2, true, false, (I + 1) * kConstLdaStep>...};
}

constexpr auto kConstLdaTiles =
    const_lda_tiles(std::make_index_sequence<kMaxConstLda / kConstLdaStep>{});

template <int NV, bool DirectA, bool DirectB>
void dispatch_rows(const SgemmTile& t) {
  if constexpr (DirectA && !DirectB && NV == 2) {
    if (t.rows == 12 && t.lda % kConstLdaStep == 0 && t.lda != 0 && t.lda <= kMaxConstLda) {
      return kConstLdaTiles[t.lda / kConstLdaStep - 1](t);
    }
  }
  switch (t.rows) {
    case 12: return tile<12, NV, DirectA, DirectB>(t);
    case 11: return tile<11, NV, DirectA, DirectB>(t);
    case 10: return tile<10, NV, DirectA, DirectB>(t);
    case 9: return tile<9, NV, DirectA, DirectB>(t);
    case 8: return tile<8, NV, DirectA, DirectB>(t);
    case 7: return tile<7, NV, DirectA, DirectB>(t);
    case 6: return tile<6, NV, DirectA, DirectB>(t);
    case 5: return tile<5, NV, DirectA, DirectB>(t);
    case 4: return tile<4, NV, DirectA, DirectB>(t);
    case 3: return tile<3, NV, DirectA, DirectB>(t);
    case 2: return tile<2, NV, DirectA, DirectB>(t);
    default: return tile<1, NV, DirectA, DirectB>(t);
  }
}

template <bool DirectA, bool DirectB>
void dispatch(const SgemmTile& t) {
  if (t.cols <= 16) return dispatch_rows<1, DirectA, DirectB>(t);
  dispatch_rows<2, DirectA, DirectB>(t);
}

}  // namespace

namespace {

// A tile of conv2d_nhwc_smallc_avx512: 12 positions whose kernel rows ky in [ky0, ky1) start at
// rows + (ky - ky0) * row_stride (position r at + r * step), every tap readable (the input
// itself, or a zero-padded copy of its rows); NV vectors of 16 columns of the panel wp. The accumulators stay
// in registers: the loops run on compile-time position indices only.
// Step: the positions' distance in floats (sw * C) when known at compile time (0: from g), so
// that each broadcast is a constant offset from the tap's pointer (an RGB stem's 3, 6 or 12).
// R: positions (12; 8 or 4 for a row's last tile: ResNet's 112 positions a row leave 4, at 12
// a tile a third of a row's last tile was work).
template <int NV, size_t Step, size_t R>
void smallc_tile(const float* rows, size_t row_stride, size_t ky0, size_t ky1,
                 const Conv2dGeometry& g, const float* wp, __m512* a0, __m512* a1) {
  const size_t c = g.c, step = Step != 0 ? Step : g.sw * c, run = g.kw * c;
  for (size_t ky = ky0; ky < ky1; ++ky) {
    const float* q0 = rows + (ky - ky0) * row_stride;
    const float* wk = wp + ky * run * kSgemmNr;
    auto taps = [&](const float* q, size_t len) {   // len taps from q, weights from wk on
      for (size_t t = 0; t < len; ++t, wk += kSgemmNr) {
        const __m512 b0 = _mm512_load_ps(wk);
        const __m512 b1 = NV == 2 ? _mm512_load_ps(wk + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
        for (size_t r = 0; r < R; ++r) {
          const __m512 av = _mm512_set1_ps(q[r * step + t]);
          a0[r] = _mm512_fmadd_ps(av, b0, a0[r]);
          if constexpr (NV == 2) a1[r] = _mm512_fmadd_ps(av, b1, a1[r]);
        }
      }
    };
    if (g.dw == 1) {
      taps(q0, run);   // the kernel row's taps: one run of kw * C input values
    } else {
      for (size_t kx = 0; kx < g.kw; ++kx) taps(q0 + kx * g.dw * c, c);
    }
  }
}

}  // namespace

// A conv whose kernel rows are short (kw * C < 32: a stem's 3 input channels) computed
// directly: per output row, 12 positions at a time against one 32-column panel of the packed
// weight (W^T, [kh][kw][C] x Cout), the taps in k order, each input value broadcast into 24
// accumulators (as the GEMM tile's per-k step, without writing the im2col rows first and
// running a K of 27 or 147 through the GEMM's per-tile overhead). A tile at an edge, or a
// row's last partial one, reads a zero-padded copy of the output row's input rows, made once
// per output row (taps in the padding add 0 * w, as the im2col rows' zeros do; a copy per
// edge tile, column by column, was a third of a CIFAR-sized stem's time); a kernel row above or below the input is skipped in
// the inside tiles (the same sums but for the sign of a zero). Epilogue in the GEMM tile's
// order: + Z, + bias, clamp, then the post activation.
template <size_t Step>
void smallc_rows(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt, float* y,
                 const SgemmEpilogue& ep, size_t oy0, size_t oy1) {
  constexpr size_t R = 12;
  const size_t c = g.c, cout = wt.cols, panels = (cout + kSgemmNr - 1) / kSgemmNr;
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  const float* col_bias = ep.axis == BiasAxis::kCol ? ep.bias : nullptr;
  const __m512 lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  // the input columns 12 positions' taps span
  const size_t span = (R - 1) * g.sw + (g.kw - 1) * g.dw + 1;
  // An output row's edge tiles (the first, over the left padding; the last, over the right
  // padding or short of 12 positions) read its kh input rows from one zero-padded copy of
  // them, made once per output row: columns from -pl to what the row's last tile spans.
  const size_t tiles_per_row = (g.ow + R - 1) / R;
  const size_t padded_w = (tiles_per_row * R - R) * g.sw + span;
  static thread_local std::vector<float> padded_buf;
  if (padded_buf.size() < g.kh * padded_w * c) padded_buf.resize(g.kh * padded_w * c);
  float* const padded = padded_buf.data();
  const auto pl = static_cast<std::ptrdiff_t>(g.pl);
  for (size_t oy = oy0; oy < oy1; ++oy) {
    const std::ptrdiff_t iy0 = static_cast<std::ptrdiff_t>(oy * g.sh) - g.pt;
    bool padded_ready = false;
    for (size_t ox0 = 0; ox0 < g.ow; ox0 += R) {
      const size_t rn = std::min(R, g.ow - ox0);
      const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox0 * g.sw) - pl;
      // inside: every tap of 12 positions within the input's columns. Then the kernel rows
      // inside the input are read in place (the others skipped: the im2col rows' zeros, adds
      // of 0 * w); else (an edge, a row's last partial tile) from the padded rows.
      const bool inside = rn == R && ix0 >= 0 && ix0 + static_cast<std::ptrdiff_t>(span) <= w;
      const float* rows;
      size_t row_stride, ky0 = 0, ky1 = g.kh;
      if (inside) {
        while (ky0 < ky1 && iy0 + static_cast<std::ptrdiff_t>(ky0 * g.dh) < 0) ++ky0;
        while (ky1 > ky0 && iy0 + static_cast<std::ptrdiff_t>((ky1 - 1) * g.dh) >= h) --ky1;
        rows = x + ((iy0 + static_cast<std::ptrdiff_t>(ky0 * g.dh)) * w + ix0) *
                       static_cast<std::ptrdiff_t>(c);
        row_stride = g.dh * g.w * c;
      } else {
        if (!padded_ready) {   // columns [-pl, padded_w - pl) of the kh input rows
          for (size_t ky = 0; ky < g.kh; ++ky) {
            float* dst = padded + ky * padded_w * c;
            const std::ptrdiff_t iy = iy0 + static_cast<std::ptrdiff_t>(ky * g.dh);
            if (iy < 0 || iy >= h) {
              std::fill(dst, dst + padded_w * c, 0.0f);
              continue;
            }
            const std::ptrdiff_t end = static_cast<std::ptrdiff_t>(padded_w) - pl;  // excl.
            const std::ptrdiff_t in0 = std::max<std::ptrdiff_t>(0, -pl);
            const std::ptrdiff_t in1 = std::min(w, end);
            const size_t lead = static_cast<size_t>(in0 + pl);   // columns before the input's
            std::fill(dst, dst + lead * c, 0.0f);
            if (in1 > in0) {
              std::memcpy(dst + lead * c, x + (iy * w + in0) * static_cast<std::ptrdiff_t>(c),
                          static_cast<size_t>(in1 - in0) * c * sizeof(float));
            }
            const size_t filled = lead + static_cast<size_t>(std::max<std::ptrdiff_t>(0, in1 - in0));
            std::fill(dst + filled * c, dst + padded_w * c, 0.0f);
          }
          padded_ready = true;
        }
        rows = padded + static_cast<size_t>(ix0 + pl) * c;
        row_stride = padded_w * c;
      }
      for (size_t p = 0; p < panels; ++p) {
        const float* wp = wt.panel(p);
        __m512 a0[R], a1[R];
        for (size_t r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
        // (direct calls, each inlined: through a pointer the accumulators leave the registers)
        const bool two = cout - p * kSgemmNr > 16;
        if (rn > 8) {
          if (two) smallc_tile<2, Step, 12>(rows, row_stride, ky0, ky1, g, wp, a0, a1);
          else smallc_tile<1, Step, 12>(rows, row_stride, ky0, ky1, g, wp, a0, a1);
        } else if (rn > 4) {
          if (two) smallc_tile<2, Step, 8>(rows, row_stride, ky0, ky1, g, wp, a0, a1);
          else smallc_tile<1, Step, 8>(rows, row_stride, ky0, ky1, g, wp, a0, a1);
        } else {
          if (two) smallc_tile<2, Step, 4>(rows, row_stride, ky0, ky1, g, wp, a0, a1);
          else smallc_tile<1, Step, 4>(rows, row_stride, ky0, ky1, g, wp, a0, a1);
        }
        const size_t j = p * kSgemmNr, cols = std::min(kSgemmNr, cout - j);
        const __mmask16 m0 = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
        const __mmask16 m1 = cols >= 32 ? 0xFFFF
                             : cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
        __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
        if (col_bias != nullptr) {
          cb0 = _mm512_maskz_loadu_ps(m0, col_bias + j);
          cb1 = _mm512_maskz_loadu_ps(m1, col_bias + j + 16);
        }
        const size_t pos0 = oy * g.ow + ox0;
        float* c0 = y + pos0 * cout + j;
        for (size_t r = 0; r < rn; ++r) {
          __m512 v0 = a0[r], v1 = a1[r];
          if (ep.z != nullptr) {
            const float* add = ep.z + (pos0 + r) * ep.ldz + j;
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, add));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, add + 16));
          }
          if (col_bias != nullptr) {
            v0 = _mm512_add_ps(v0, cb0);
            v1 = _mm512_add_ps(v1, cb1);
          }
          // maxps/minps return their second operand when either is NaN: v second, NaN stays
          v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
          v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
          _mm512_mask_storeu_ps(c0 + r * cout, m0, v0);
          _mm512_mask_storeu_ps(c0 + r * cout + 16, m1, v1);
        }
        if (ep.act != PostAct::kNone) post_act_f32(ep.act, c0, rn, cols, cout);
      }
    }
  }
}

void conv2d_nhwc_smallc_avx512(const float* x, const Conv2dGeometry& g, const SgemmPacked& wt,
                               float* y, const SgemmEpilogue& ep, size_t oy0, size_t oy1) {
  switch (g.sw * g.c) {   // an RGB image's positions at stride 1, 2 or 4 (stems, patchify)
    case 3: return smallc_rows<3>(x, g, wt, y, ep, oy0, oy1);
    case 6: return smallc_rows<6>(x, g, wt, y, ep, oy0, oy1);
    case 12: return smallc_rows<12>(x, g, wt, y, ep, oy0, oy1);
    default: return smallc_rows<0>(x, g, wt, y, ep, oy0, oy1);
  }
}

void conv2d_pack_avx512(const float* x, const Conv2dGeometry& g, size_t k0, size_t kc,
                        size_t c0, size_t nc, float* dst) {
  detail::conv2d_pack(x, g, k0, kc, c0, nc, dst);
}

void nbits4_panel_avx512(const SgemmNBits4& b, size_t panel, size_t k0, size_t kc, float* dst) {
  nbits4_runs(b, panel, k0, kc, dst, [](const float* sc, const float* zp, const uint8_t* q,
                                        float* d, size_t rows) {
    constexpr size_t half = kSgemmNr / 2;
    const __m512i low = _mm512_set1_epi32(0xF);
    const __m512 s0 = _mm512_loadu_ps(sc), s1 = _mm512_loadu_ps(sc + half);
    const __m512 z0 = _mm512_loadu_ps(zp), z1 = _mm512_loadu_ps(zp + half);
    auto row = [&](__m512i v0, __m512i v1, float* out) {  // columns 0-15, 16-31 as int32
      _mm512_store_ps(out, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(v0), z0), s0));
      _mm512_store_ps(out + half, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(v1), z1), s1));
    };
    for (size_t r = 0; r < rows; r += 2, q += kSgemmNr, d += 2 * kSgemmNr) {
      const __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      const __m512i v1 =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + half)));
      row(_mm512_and_si512(v0, low), _mm512_and_si512(v1, low), d);
      if (r + 1 < rows) row(_mm512_srli_epi32(v0, 4), _mm512_srli_epi32(v1, 4), d + kSgemmNr);
    }
  });
}

void sgemm_tile_avx512(const SgemmTile& t) {
  if (t.ldb != 0) return t.lda != 0 ? dispatch<true, true>(t) : dispatch<false, true>(t);
  if (t.lda != 0) return dispatch<true, false>(t);
  dispatch<false, false>(t);
}

}  // namespace onnxplex::mlas
