// The depthwise convolution loop nest, included by one translation unit per ISA (each
// compiled with its own -m flags, so the compiler vectorizes the row loops for that ISA).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "dwconv.h"

namespace onnxplex::mlas::detail {

inline void dwconv_f32_rows(const float* x, const float* w, const float* bias, float* y,
                            size_t channels, const DwConvGeometry& g, float lo, float hi) {
  const auto h = static_cast<std::ptrdiff_t>(g.h);
  const auto wi = static_cast<std::ptrdiff_t>(g.w);
  for (size_t c = 0; c < channels; ++c) {
    const float* xc = x + c * g.h * g.w;
    const float* wc = w + c * g.kh * g.kw;
    float* yc = y + c * g.ho * g.wo;
    const float b = bias != nullptr ? bias[c] : 0.0f;
    for (size_t oh = 0; oh < g.ho; ++oh) {
      float* out = yc + oh * g.wo;
      for (size_t ow = 0; ow < g.wo; ++ow) out[ow] = b;
      for (size_t th = 0; th < g.kh; ++th) {
        const std::ptrdiff_t ih = static_cast<std::ptrdiff_t>(oh * g.sh + th * g.dh) -
                                  static_cast<std::ptrdiff_t>(g.pt);
        if (ih < 0 || ih >= h) continue;
        const float* row = xc + ih * wi;
        for (size_t tw = 0; tw < g.kw; ++tw) {
          const float wt = wc[th * g.kw + tw];
          // Input column of output column ow: ow * sw + off; keep it inside [0, w).
          const std::ptrdiff_t off = static_cast<std::ptrdiff_t>(tw * g.dw) -
                                     static_cast<std::ptrdiff_t>(g.pl);
          const auto sw = static_cast<std::ptrdiff_t>(g.sw);
          const std::ptrdiff_t first = off >= 0 ? 0 : (-off + sw - 1) / sw;
          const std::ptrdiff_t last = wi - 1 - off < 0
              ? 0 : std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(g.wo),
                                             (wi - 1 - off) / sw + 1);
          if (sw == 1) {
            const float* r = row + off;
            for (std::ptrdiff_t ow = first; ow < last; ++ow) out[ow] += wt * r[ow];
          } else {
            for (std::ptrdiff_t ow = first; ow < last; ++ow) out[ow] += wt * row[ow * sw + off];
          }
        }
      }
      for (size_t ow = 0; ow < g.wo; ++ow) {
        const float v = out[ow];
        // std::max/min return their first argument for a NaN: NaN stays NaN.
        out[ow] = std::min(std::max(v, lo), hi);
      }
    }
  }
}

// Stride 1, outputs up to 64 wide: rows too short for the row loops above. Each channel is
// copied into a zero-padded plane whose rows are wp = wo + (kw - 1) * dw wide; every tap is
// then one long loop over ho * wp positions (the last (kw - 1) * dw of each row are garbage,
// dropped when the result is stored).
inline void dwconv_f32_flat(const float* x, const float* w, const float* bias, float* y,
                            size_t channels, const DwConvGeometry& g, float lo, float hi) {
  const size_t wp = g.wo + (g.kw - 1) * g.dw;
  const size_t hp = g.ho + (g.kh - 1) * g.dh;
  const size_t n = g.ho * wp;
  std::vector<float> plane(hp * wp + (g.kw - 1) * g.dw, 0.0f);
  std::vector<float> acc(n);
  for (size_t c = 0; c < channels; ++c) {
    const float* xc = x + c * g.h * g.w;
    const float* wc = w + c * g.kh * g.kw;
    for (size_t r = 0; r < hp; ++r) {
      float* dst = plane.data() + r * wp;
      const auto ih = static_cast<std::ptrdiff_t>(r) - static_cast<std::ptrdiff_t>(g.pt);
      if (ih < 0 || ih >= static_cast<std::ptrdiff_t>(g.h)) {
        std::fill(dst, dst + wp, 0.0f);
        continue;
      }
      const float* src = xc + static_cast<size_t>(ih) * g.w;
      for (size_t col = 0; col < wp; ++col) {
        const auto iw = static_cast<std::ptrdiff_t>(col) - static_cast<std::ptrdiff_t>(g.pl);
        dst[col] = iw >= 0 && iw < static_cast<std::ptrdiff_t>(g.w) ? src[iw] : 0.0f;
      }
    }
    const float b = bias != nullptr ? bias[c] : 0.0f;
    float* a = acc.data();
    for (size_t i = 0; i < n; ++i) a[i] = b;
    for (size_t th = 0; th < g.kh; ++th) {
      for (size_t tw = 0; tw < g.kw; ++tw) {
        const float wt = wc[th * g.kw + tw];
        const float* src = plane.data() + th * g.dh * wp + tw * g.dw;
        for (size_t i = 0; i < n; ++i) a[i] += wt * src[i];
      }
    }
    float* yc = y + c * g.ho * g.wo;
    for (size_t oh = 0; oh < g.ho; ++oh) {
      for (size_t ow = 0; ow < g.wo; ++ow) {
        yc[oh * g.wo + ow] = std::min(std::max(a[oh * wp + ow], lo), hi);
      }
    }
  }
}

// The variant for the geometry: flat planes for stride-1 outputs up to 64 wide, else rows.
inline void dwconv_f32_any(const float* x, const float* w, const float* bias, float* y,
                           size_t channels, const DwConvGeometry& g, float lo, float hi) {
  if (g.sh == 1 && g.sw == 1 && g.wo <= 64) {
    dwconv_f32_flat(x, w, bias, y, channels, g, lo, hi);
  } else {
    dwconv_f32_rows(x, w, bias, y, channels, g, lo, hi);
  }
}

}  // namespace onnxplex::mlas::detail
