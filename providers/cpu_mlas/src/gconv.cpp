// The grouped channels-last conv: dispatch, weight layout, portable variant.
#include "gconv.h"

#include "cpu_features.h"
#include "gconv_impl.h"

namespace onnxplex::mlas {

bool gconv_nhwc_supported(size_t cgo) { return cgo > 0 && cgo % 4 == 0; }

void gconv_pack_weight(const float* w, const GConvShape& s, size_t kh, size_t kw, float* wr) {
  const size_t taps = kh * kw;
  for (size_t gi = 0; gi < s.group; ++gi) {
    for (size_t o = 0; o < s.cgo; ++o) {
      const float* src = w + (gi * s.cgo + o) * s.cgi * taps;   // [cgi][kh][kw]
      for (size_t i = 0; i < s.cgi; ++i) {
        for (size_t t = 0; t < taps; ++t) {
          wr[((gi * taps + t) * s.cgi + i) * s.cgo + o] = src[i * taps + t];
        }
      }
    }
  }
}

void gconv_nhwc_f32_portable(const float* x, const float* wr, const float* bias, const float* z,
                             float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                             size_t oy1, float lo, float hi) {
  detail::gconv_nhwc_any(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi);
}

void gconv_nhwc_f32(const float* x, const float* wr, const float* bias, const float* z,
                    float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                    size_t oy1, float lo, float hi) {
  ONNXPLEX_MLAS_BEST_VARIANT(gconv_nhwc_f32)(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi);
}

}  // namespace onnxplex::mlas
