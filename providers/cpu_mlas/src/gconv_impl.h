// The grouped channels-last conv loop nest (gconv.h), included by one translation unit per ISA
// (each compiled with its own -m flags; GCC vector types lower to that ISA's registers).
//
// Vectors run across a group's output channels (8 or 4 of them a vector); a block of P output
// positions along a row keeps P x NC vectors of sums in registers over every tap and input
// channel of the group: each weight vector is loaded once for the P positions, each input
// value broadcast once for the NC vectors.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "gconv.h"

namespace onnxplex::mlas::detail {

// Several groups a vector (gconv.h's gconv_multi_group): 16 lanes, groups of 4 or 8 channels
// in and out.
constexpr size_t kMultiLanes = 16;

inline bool multi_group_fits(const GConvShape& s) {
  return s.cgi == s.cgo && (s.cgo == 4 || s.cgo == 8) && s.group >= kMultiLanes / s.cgo;
}

// Internal linkage: each including translation unit (one per ISA) keeps its own copies.
namespace {

using GVec8 = float __attribute__((vector_size(32), aligned(4), may_alias));
using GVec4 = float __attribute__((vector_size(16), aligned(4), may_alias));

// Output positions are taken in blocks of P along the image's rows as one sequence (a block
// may span a row's end: 7-wide rows in blocks of 6 left 5 of every 12 computed positions
// unused). Rows go in bands of kBandRows, each band's blocks for every group in turn (a band's
// input rows stay in cache across the groups).
constexpr size_t kBandRows = 4;

// The input coordinates of a block's positions' first tap: positions q0 .. q0 + np - 1 of the
// output (row-major), the last one repeated up to P (computed, not stored).
template <size_t P>
struct BlockTaps {
  std::ptrdiff_t iy[P], ix[P];

  BlockTaps(const DwConvGeometry& g, size_t q0, size_t np) {
    for (size_t p = 0; p < P; ++p) {
      const size_t q = q0 + std::min(p, np - 1);
      iy[p] = static_cast<std::ptrdiff_t>(q / g.wo * g.sh) - static_cast<std::ptrdiff_t>(g.pt);
      ix[p] = static_cast<std::ptrdiff_t>(q % g.wo * g.sw) - static_cast<std::ptrdiff_t>(g.pl);
    }
  }

  // Where position p reads tap (th, tw) from channel `ch` on: x, or `zeros` in the padding.
  const float* at(const float* x, const DwConvGeometry& g, size_t c, size_t ch, size_t p,
                  size_t th, size_t tw, const float* zeros) const {
    const std::ptrdiff_t y = iy[p] + static_cast<std::ptrdiff_t>(th * g.dh);
    const std::ptrdiff_t x0 = ix[p] + static_cast<std::ptrdiff_t>(tw * g.dw);
    if (y < 0 || y >= static_cast<std::ptrdiff_t>(g.h) || x0 < 0 ||
        x0 >= static_cast<std::ptrdiff_t>(g.w)) {
      return zeros;
    }
    return x + (static_cast<size_t>(y) * g.w + static_cast<size_t>(x0)) * c + ch;
  }
};

// z + clamp of a block's sums, stored for its np valid positions from q0.
template <typename V, size_t NC, size_t P>
inline void store_block(V (&acc)[P][NC], const float* z, float* y, size_t m, size_t ch0,
                        size_t q0, size_t np, float lo_s, float hi_s) {
  constexpr size_t L = sizeof(V) / sizeof(float);
  const V lo = V{} + lo_s, hi = V{} + hi_s;
  for (size_t p = 0; p < np; ++p) {
    const size_t at = (q0 + p) * m + ch0;
#pragma GCC unroll 4
    for (size_t c = 0; c < NC; ++c) {
      V v = acc[p][c];
      if (z != nullptr) {
        V zv;
        std::memcpy(&zv, z + at + c * L, sizeof(V));
        v += zv;
      }
      const V mx = v < lo ? lo : v;   // as std::max then std::min: NaN stays NaN
      v = hi < mx ? hi : mx;
      std::memcpy(y + at + c * L, &v, sizeof(V));
    }
  }
}

// One block: positions q0 .. q0 + np - 1 x NC vectors of output channels from `co` (in group
// gi). A tap in the padding reads `zeros` (cgi of them): one loop for every block, edge or
// not (skipping those taps per position was a branchy loop that ran for every block of a
// small image).
template <typename V, size_t NC, size_t P>
inline void gconv_block(const float* x, const float* wr, const float* bias, const float* z,
                        float* y, const GConvShape& s, const DwConvGeometry& g, size_t gi,
                        size_t co, size_t q0, size_t np, float lo_s, float hi_s,
                        const float* zeros) {
  constexpr size_t L = sizeof(V) / sizeof(float);
  V acc[P][NC];
  const size_t ch0 = gi * s.cgo + co;   // output channel of lane 0 of vector 0
#pragma GCC unroll 4
  for (size_t c = 0; c < NC; ++c) {
    V b = V{};
    if (bias != nullptr) std::memcpy(&b, bias + ch0 + c * L, sizeof(V));
#pragma GCC unroll 12
    for (size_t p = 0; p < P; ++p) acc[p][c] = b;
  }
  const BlockTaps<P> taps(g, q0, np);
  const size_t cgi = s.cgi, cgo = s.cgo;
  for (size_t th = 0; th < g.kh; ++th) {
    for (size_t tw = 0; tw < g.kw; ++tw) {
      const float* wt = wr + ((gi * g.kh * g.kw + th * g.kw + tw) * cgi) * cgo + co;
      const float* src[P];
#pragma GCC unroll 12
      for (size_t p = 0; p < P; ++p) src[p] = taps.at(x, g, s.c, gi * cgi, p, th, tw, zeros);
      for (size_t i = 0; i < cgi; ++i) {
        V wv[NC];
#pragma GCC unroll 4
        for (size_t c = 0; c < NC; ++c) std::memcpy(&wv[c], wt + i * cgo + c * L, sizeof(V));
#pragma GCC unroll 12
        for (size_t p = 0; p < P; ++p) {
          const V xv = src[p][i] - V{};   // a broadcast (V{} + x is an add first: see dw_block)
#pragma GCC unroll 4
          for (size_t c = 0; c < NC; ++c) acc[p][c] += xv * wv[c];
        }
      }
    }
  }
  store_block<V, NC, P>(acc, z, y, s.m, ch0, q0, np, lo_s, hi_s);
}

// Output channels [co, co + NC * L) of group gi for positions [q0, q1), blocks of P.
template <typename V, size_t NC, size_t P>
inline void gconv_span(const float* x, const float* wr, const float* bias, const float* z,
                       float* y, const GConvShape& s, const DwConvGeometry& g, size_t q0,
                       size_t q1, size_t gi, size_t co, float lo, float hi, const float* zeros) {
  for (size_t q = q0; q < q1; q += P) {
    gconv_block<V, NC, P>(x, wr, bias, z, y, s, g, gi, co, q, std::min(P, q1 - q), lo, hi,
                          zeros);
  }
}

// Groups [gi0, gi1) along output rows [oy0, oy1), one group at a time.
template <typename V>
inline void gconv_rows(const float* x, const float* wr, const float* bias, const float* z,
                       float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                       size_t oy1, float lo, float hi, size_t gi0, size_t gi1) {
  constexpr size_t L = sizeof(V) / sizeof(float);
  const size_t vectors = s.cgo / L;
  const std::vector<float> zeros(s.cgi, 0.0f);   // what a tap in the padding reads
  for (size_t band = oy0; band < oy1; band += kBandRows) {
    const size_t q0 = band * g.wo, q1 = std::min(oy1, band + kBandRows) * g.wo;
    for (size_t gi = gi0; gi < gi1; ++gi) {
      size_t v = 0;
      for (; v + 2 <= vectors; v += 2) {   // 12 sums in registers
        gconv_span<V, 2, 6>(x, wr, bias, z, y, s, g, q0, q1, gi, v * L, lo, hi, zeros.data());
      }
      if (v < vectors) {
        gconv_span<V, 1, 8>(x, wr, bias, z, y, s, g, q0, q1, gi, v * L, lo, hi, zeros.data());
      }
    }
  }
}

inline void gconv_nhwc_any(const float* x, const float* wr, const float* bias, const float* z,
                           float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                           size_t oy1, float lo, float hi) {
  if (s.cgo % 8 == 0) {
    gconv_rows<GVec8>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi, 0, s.group);
  } else {
    gconv_rows<GVec4>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi, 0, s.group);
  }
}

#if defined(__AVX512F__)   // (the AVX-512 translation unit only: 64-byte vectors)
using GVec16 = float __attribute__((vector_size(64), aligned(4), may_alias));

// Lane l of the result: lane (l / Q) * Q + I of v, the I-th input channel of the group lane l
// belongs to (groups of Q lanes side by side).
template <size_t Q, size_t I>
inline GVec16 spread(GVec16 v) {
#define ONNXPLEX_GCONV_LANE(l) static_cast<int>((l) / Q * Q + I)
  return __builtin_shufflevector(
      v, v, ONNXPLEX_GCONV_LANE(0), ONNXPLEX_GCONV_LANE(1), ONNXPLEX_GCONV_LANE(2),
      ONNXPLEX_GCONV_LANE(3), ONNXPLEX_GCONV_LANE(4), ONNXPLEX_GCONV_LANE(5),
      ONNXPLEX_GCONV_LANE(6), ONNXPLEX_GCONV_LANE(7), ONNXPLEX_GCONV_LANE(8),
      ONNXPLEX_GCONV_LANE(9), ONNXPLEX_GCONV_LANE(10), ONNXPLEX_GCONV_LANE(11),
      ONNXPLEX_GCONV_LANE(12), ONNXPLEX_GCONV_LANE(13), ONNXPLEX_GCONV_LANE(14),
      ONNXPLEX_GCONV_LANE(15));
#undef ONNXPLEX_GCONV_LANE
}

// acc[p] += (input channel I of each lane's group at position p) * (tap weights of channel I)
template <size_t Q, size_t P, size_t... I>
inline void multi_taps(GVec16 (&acc)[P][1], const GVec16 (&xin)[P], const float* wt,
                       std::index_sequence<I...>) {
  (
      [&] {
        GVec16 wv;
        std::memcpy(&wv, wt + I * kMultiLanes, sizeof(GVec16));
#pragma GCC unroll 8
        for (size_t p = 0; p < P; ++p) acc[p][0] += spread<Q, I>(xin[p]) * wv;
      }(),
      ...);
}

// One block of positions q0 .. q0 + np - 1 for the 16 output channels of vector vb (16 / Q
// groups of Q channels; input channels the same 16, cgi == cgo): the 16 input values of a
// position are loaded once a tap and spread over their group's lanes per input channel.
template <size_t Q, size_t P>
inline void gconv_multi_block(const float* x, const float* wb, const float* bias,
                              const float* z, float* y, const GConvShape& s,
                              const DwConvGeometry& g, size_t vb, size_t q0, size_t np,
                              float lo_s, float hi_s, const float* zeros) {
  const size_t ch0 = vb * kMultiLanes, taps = g.kh * g.kw;
  GVec16 b = GVec16{};
  if (bias != nullptr) std::memcpy(&b, bias + ch0, sizeof(GVec16));
  GVec16 acc[P][1];
#pragma GCC unroll 8
  for (size_t p = 0; p < P; ++p) acc[p][0] = b;
  const BlockTaps<P> at(g, q0, np);
  for (size_t th = 0; th < g.kh; ++th) {
    for (size_t tw = 0; tw < g.kw; ++tw) {
      GVec16 xin[P];
#pragma GCC unroll 8
      for (size_t p = 0; p < P; ++p) {
        std::memcpy(&xin[p], at.at(x, g, s.c, ch0, p, th, tw, zeros), sizeof(GVec16));
      }
      multi_taps<Q, P>(acc, xin, wb + ((vb * taps + th * g.kw + tw) * Q) * kMultiLanes,
                       std::make_index_sequence<Q>{});
    }
  }
  store_block<GVec16, 1, P>(acc, z, y, s.m, ch0, q0, np, lo_s, hi_s);
}

template <size_t Q>
inline void gconv_multi_rows(const float* x, const float* wb, const float* bias, const float* z,
                             float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                             size_t oy1, float lo, float hi) {
  constexpr size_t P = 8;
  const size_t vectors = s.group / (kMultiLanes / Q);
  const GVec16 zeros{};   // what a tap in the padding reads
  for (size_t band = oy0; band < oy1; band += kBandRows) {
    const size_t q0 = band * g.wo, q1 = std::min(oy1, band + kBandRows) * g.wo;
    for (size_t vb = 0; vb < vectors; ++vb) {
      for (size_t q = q0; q < q1; q += P) {
        gconv_multi_block<Q, P>(x, wb, bias, z, y, s, g, vb, q, std::min(P, q1 - q), lo, hi,
                                reinterpret_cast<const float*>(&zeros));
      }
    }
  }
}

// The AVX-512 variant: groups of 4 or 8 channels several a vector (the groups left over one
// at a time), groups of a multiple of 16 channels on 16-lane vectors, the rest as elsewhere.
inline void gconv_nhwc_wide(const float* x, const float* wr, const float* bias, const float* z,
                            float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                            size_t oy1, float lo, float hi) {
  if (multi_group_fits(s)) {
    const float* wb = wr + s.m * s.cgi * g.kh * g.kw;   // gconv_pack_weight's second layout
    if (s.cgo == 4) {
      gconv_multi_rows<4>(x, wb, bias, z, y, s, g, oy0, oy1, lo, hi);
    } else {
      gconv_multi_rows<8>(x, wb, bias, z, y, s, g, oy0, oy1, lo, hi);
    }
    const size_t done = s.group / (kMultiLanes / s.cgo) * (kMultiLanes / s.cgo);
    if (done < s.group) {
      if (s.cgo == 8) {
        gconv_rows<GVec8>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi, done, s.group);
      } else {
        gconv_rows<GVec4>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi, done, s.group);
      }
    }
  } else if (s.cgo % 16 == 0) {
    gconv_rows<GVec16>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi, 0, s.group);
  } else {
    gconv_nhwc_any(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi);
  }
}
#endif  // __AVX512F__

}  // namespace
}  // namespace onnxplex::mlas::detail
