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

#include "gconv.h"

namespace onnxplex::mlas::detail {
// Internal linkage: each including translation unit (one per ISA) keeps its own copies.
namespace {

using GVec8 = float __attribute__((vector_size(32), aligned(4), may_alias));
using GVec4 = float __attribute__((vector_size(16), aligned(4), may_alias));

// One block: P positions from ox0 (np of them valid, the rest computed on a clamped column
// and not stored) x NC vectors of output channels from `co` (in the group).
template <typename V, size_t NC, size_t P>
inline void gconv_block(const float* x, const float* wr, const float* bias, const float* z,
                        float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy,
                        size_t gi, size_t co, size_t ox0, size_t np, float lo_s, float hi_s) {
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
  const auto h = static_cast<std::ptrdiff_t>(g.h), w = static_cast<std::ptrdiff_t>(g.w);
  const size_t taps = g.kh * g.kw, cgi = s.cgi, cgo = s.cgo;
  for (size_t th = 0; th < g.kh; ++th) {
    const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.sh + th * g.dh) -
                              static_cast<std::ptrdiff_t>(g.pt);
    if (iy < 0 || iy >= h) continue;
    const float* row = x + static_cast<size_t>(iy) * g.w * s.c + gi * cgi;
    for (size_t tw = 0; tw < g.kw; ++tw) {
      const float* wt = wr + ((gi * taps + th * g.kw + tw) * cgi) * cgo + co;
      const float* src[P];
      bool all = true;
#pragma GCC unroll 12
      for (size_t p = 0; p < P; ++p) {
        const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>((ox0 + std::min(p, np - 1)) *
                                                              g.sw + tw * g.dw) -
                                  static_cast<std::ptrdiff_t>(g.pl);
        const bool in = ix >= 0 && ix < w;
        all = all && in;
        src[p] = in ? row + static_cast<size_t>(ix) * s.c : nullptr;
      }
      if (all) {
        for (size_t i = 0; i < cgi; ++i) {
          V wv[NC];
#pragma GCC unroll 4
          for (size_t c = 0; c < NC; ++c) std::memcpy(&wv[c], wt + i * cgo + c * L, sizeof(V));
#pragma GCC unroll 12
          for (size_t p = 0; p < P; ++p) {
            const V xv = V{} + src[p][i];
#pragma GCC unroll 4
            for (size_t c = 0; c < NC; ++c) acc[p][c] += xv * wv[c];
          }
        }
      } else {   // a block at the image's edge: taps in the padding skipped per position
        for (size_t i = 0; i < cgi; ++i) {
          V wv[NC];
#pragma GCC unroll 4
          for (size_t c = 0; c < NC; ++c) std::memcpy(&wv[c], wt + i * cgo + c * L, sizeof(V));
          for (size_t p = 0; p < P; ++p) {
            if (src[p] == nullptr) continue;
            const V xv = V{} + src[p][i];
#pragma GCC unroll 4
            for (size_t c = 0; c < NC; ++c) acc[p][c] += xv * wv[c];
          }
        }
      }
    }
  }
  const V lo = V{} + lo_s, hi = V{} + hi_s;
  for (size_t p = 0; p < np; ++p) {
    const size_t at = (oy * g.wo + ox0 + p) * s.m + ch0;
#pragma GCC unroll 4
    for (size_t c = 0; c < NC; ++c) {
      V v = acc[p][c];
      if (z != nullptr) {
        V zv;
        std::memcpy(&zv, z + at + c * L, sizeof(V));
        v += zv;
      }
      const V m = v < lo ? lo : v;   // as std::max then std::min: NaN stays NaN
      v = hi < m ? hi : m;
      std::memcpy(y + at + c * L, &v, sizeof(V));
    }
  }
}

// Output channels [co, co + NC * L) of group gi along output row oy, blocks of P positions.
template <typename V, size_t NC, size_t P>
inline void gconv_row(const float* x, const float* wr, const float* bias, const float* z,
                      float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy,
                      size_t gi, size_t co, float lo, float hi) {
  for (size_t ox0 = 0; ox0 < g.wo; ox0 += P) {
    gconv_block<V, NC, P>(x, wr, bias, z, y, s, g, oy, gi, co, ox0, std::min(P, g.wo - ox0),
                          lo, hi);
  }
}

template <typename V>
inline void gconv_rows(const float* x, const float* wr, const float* bias, const float* z,
                       float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                       size_t oy1, float lo, float hi) {
  constexpr size_t L = sizeof(V) / sizeof(float);
  const size_t vectors = s.cgo / L;
  for (size_t oy = oy0; oy < oy1; ++oy) {
    for (size_t gi = 0; gi < s.group; ++gi) {
      size_t v = 0;
      for (; v + 2 <= vectors; v += 2) {   // 12 sums in registers
        gconv_row<V, 2, 6>(x, wr, bias, z, y, s, g, oy, gi, v * L, lo, hi);
      }
      if (v < vectors) gconv_row<V, 1, 8>(x, wr, bias, z, y, s, g, oy, gi, v * L, lo, hi);
    }
  }
}

inline void gconv_nhwc_any(const float* x, const float* wr, const float* bias, const float* z,
                           float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                           size_t oy1, float lo, float hi) {
  if (s.cgo % 8 == 0) {
    gconv_rows<GVec8>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi);
  } else {
    gconv_rows<GVec4>(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi);
  }
}

}  // namespace
}  // namespace onnxplex::mlas::detail
