// The grouped channels-last conv: dispatch, weight layout, portable variant.
#include "gconv.h"

#include "cpu_features.h"
#include "gconv_impl.h"

namespace onnxplex::mlas {

bool gconv_nhwc_supported(size_t cgo) { return cgo > 0 && cgo % 4 == 0; }

bool gconv_multi_group(const GConvShape& s) {
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
  return cpu_features().avx512f && detail::multi_group_fits(s);
#else
  (void)s;
  return false;
#endif
}

size_t gconv_packed_size(const GConvShape& s, size_t kh, size_t kw) {
  const size_t plain = s.m * s.cgi * kh * kw;
  return gconv_multi_group(s) ? 2 * plain : plain;
}

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
  if (!gconv_multi_group(s)) return;
  float* wb = wr + s.m * s.cgi * taps;
  const size_t per = detail::kMultiLanes / s.cgo;   // groups a vector
  for (size_t vb = 0; vb < s.group / per; ++vb) {
    for (size_t t = 0; t < taps; ++t) {
      for (size_t i = 0; i < s.cgi; ++i) {
        for (size_t l = 0; l < detail::kMultiLanes; ++l) {
          const size_t co = vb * detail::kMultiLanes + l;   // output channel (group * cgo + o)
          wb[((vb * taps + t) * s.cgi + i) * detail::kMultiLanes + l] =
              w[(co * s.cgi + i) * taps + t];
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
