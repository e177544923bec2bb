// Depthwise convolution, compiled with AVX-512 (call through dwconv_f32 only).
#include "dwconv_impl.h"

namespace onnxplex::mlas {

void dwconv_f32_avx512(const float* x, const float* w, const float* bias, float* y,
                       size_t channels, const DwConvGeometry& g, float lo, float hi) {
  detail::dwconv_f32_any(x, w, bias, y, channels, g, lo, hi);
}

void maxpool_f32_avx512(const float* x, float* y, size_t channels, const DwConvGeometry& g) {
  detail::maxpool_f32_flat(x, y, channels, g);
}

}  // namespace onnxplex::mlas
