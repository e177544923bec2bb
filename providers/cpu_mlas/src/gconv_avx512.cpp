// The grouped channels-last conv compiled with the avx512 flags (gconv_impl.h).
#include "gconv_impl.h"

namespace onnxplex::mlas {

void gconv_nhwc_f32_avx512(const float* x, const float* wr, const float* bias, const float* z,
                           float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                           size_t oy1, float lo, float hi) {
  detail::gconv_nhwc_wide(x, wr, bias, z, y, s, g, oy0, oy1, lo, hi);
}

}  // namespace onnxplex::mlas
