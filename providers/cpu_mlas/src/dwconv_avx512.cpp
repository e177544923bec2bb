// Depthwise convolution, compiled with AVX-512 (call through dwconv_f32 only).
#include "dwconv_impl.h"

namespace onnxplex::mlas {

void dwconv_f32_avx512(const float* x, const float* w, const float* bias, float* y,
                       size_t channels, const DwConvGeometry& g, float lo, float hi) {
  detail::dwconv_f32_any(x, w, bias, y, channels, g, lo, hi);
}

void dwconv_nhwc_f32_avx512(const float* x, const float* w, const float* bias, float* y,
                            size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                            const DwConvGeometry& g, float lo, float hi, const DwPrepared* prep) {
  detail::dwconv_nhwc_f32_any(x, w, bias, y, ld, c0, c1, oy0, oy1, g, lo, hi, prep);
}

void maxpool_f32_avx512(const float* x, float* y, size_t channels, const DwConvGeometry& g) {
  detail::maxpool_f32_flat(x, y, channels, g);
}

void maxpool_nhwc_f32_avx512(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                             const DwConvGeometry& g) {
  detail::maxpool_nhwc_f32_any(x, y, c, oy0, oy1, g);
}

void avgpool_nhwc_f32_avx512(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                          const DwConvGeometry& g, bool include_pad, size_t pb, size_t pr) {
  detail::avgpool_nhwc_f32_any(x, y, c, oy0, oy1, g, include_pad, pb, pr);
}

void transpose_f32_avx512(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                        size_t ldd, bool accumulate, float lo, float hi) {
  detail::transpose_f32_any(src, rows, cols, lds, dst, ldd, accumulate, lo, hi);
}

}  // namespace onnxplex::mlas
