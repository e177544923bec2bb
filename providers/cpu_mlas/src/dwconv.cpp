// Depthwise convolution: the portable variant and the dispatch.
#include "dwconv.h"

#include "cpu_features.h"
#include "dwconv_impl.h"

namespace onnxplex::mlas {

void dwconv_f32_portable(const float* x, const float* w, const float* bias, float* y,
                         size_t channels, const DwConvGeometry& g, float lo, float hi) {
  detail::dwconv_f32_any(x, w, bias, y, channels, g, lo, hi);
}

void dwconv_f32(const float* x, const float* w, const float* bias, float* y, size_t channels,
                const DwConvGeometry& g, float lo, float hi) {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) return dwconv_f32_avx512(x, w, bias, y, channels, g, lo, hi);
  if (f.avx2) return dwconv_f32_avx2(x, w, bias, y, channels, g, lo, hi);
#endif
  dwconv_f32_portable(x, w, bias, y, channels, g, lo, hi);
}

void dwconv_nhwc_f32_portable(const float* x, const float* w, const float* bias, float* y,
                              size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                              const DwConvGeometry& g, float lo, float hi,
                              const DwPrepared* prep) {
  detail::dwconv_nhwc_f32_any(x, w, bias, y, ld, c0, c1, oy0, oy1, g, lo, hi, prep);
}

void dwconv_nhwc_f32(const float* x, const float* w, const float* bias, float* y, size_t ld,
                     size_t c0, size_t c1, size_t oy0, size_t oy1, const DwConvGeometry& g,
                     float lo, float hi, const DwPrepared* prep) {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) {
    return dwconv_nhwc_f32_avx512(x, w, bias, y, ld, c0, c1, oy0, oy1, g, lo, hi, prep);
  }
  if (f.avx2) return dwconv_nhwc_f32_avx2(x, w, bias, y, ld, c0, c1, oy0, oy1, g, lo, hi, prep);
#endif
  dwconv_nhwc_f32_portable(x, w, bias, y, ld, c0, c1, oy0, oy1, g, lo, hi, prep);
}

size_t dwconv_nhwc_lanes() {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) return 16;
  if (f.avx2) return 8;
#endif
  return detail::kDwLanes;   // (this translation unit's: the portable variant's)
}

void dw_prepare(const float* w, const float* bias, size_t channels, size_t taps,
                DwPrepared& out) {
  const size_t lanes = dwconv_nhwc_lanes(), blocks = (channels + lanes - 1) / lanes;
  out.lanes = lanes;
  out.taps = taps;
  out.wv.assign(blocks * taps * lanes, 0.0f);
  out.bv.assign(blocks * lanes, 0.0f);
  for (size_t c = 0; c < channels; ++c) {
    float* wb = out.wv.data() + (c / lanes) * taps * lanes + c % lanes;
    for (size_t t = 0; t < taps; ++t) wb[t * lanes] = w[c * taps + t];
    if (bias != nullptr) out.bv[c] = bias[c];
  }
}

void maxpool_f32_portable(const float* x, float* y, size_t channels, const DwConvGeometry& g) {
  detail::maxpool_f32_flat(x, y, channels, g);
}

void maxpool_f32(const float* x, float* y, size_t channels, const DwConvGeometry& g) {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) return maxpool_f32_avx512(x, y, channels, g);
  if (f.avx2) return maxpool_f32_avx2(x, y, channels, g);
#endif
  maxpool_f32_portable(x, y, channels, g);
}

void maxpool_nhwc_f32_portable(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                               const DwConvGeometry& g) {
  detail::maxpool_nhwc_f32_any(x, y, c, oy0, oy1, g);
}

void maxpool_nhwc_f32(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                      const DwConvGeometry& g) {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) return maxpool_nhwc_f32_avx512(x, y, c, oy0, oy1, g);
  if (f.avx2) return maxpool_nhwc_f32_avx2(x, y, c, oy0, oy1, g);
#endif
  maxpool_nhwc_f32_portable(x, y, c, oy0, oy1, g);
}

void avgpool_nhwc_f32_portable(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                               const DwConvGeometry& g, bool include_pad, size_t pb,
                               size_t pr) {
  detail::avgpool_nhwc_f32_any(x, y, c, oy0, oy1, g, include_pad, pb, pr);
}

void avgpool_nhwc_f32(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                      const DwConvGeometry& g, bool include_pad, size_t pb, size_t pr) {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) return avgpool_nhwc_f32_avx512(x, y, c, oy0, oy1, g, include_pad, pb, pr);
  if (f.avx2) return avgpool_nhwc_f32_avx2(x, y, c, oy0, oy1, g, include_pad, pb, pr);
#endif
  avgpool_nhwc_f32_portable(x, y, c, oy0, oy1, g, include_pad, pb, pr);
}

void transpose_f32_portable(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                            size_t ldd, bool accumulate, float lo, float hi) {
  detail::transpose_f32_any(src, rows, cols, lds, dst, ldd, accumulate, lo, hi);
}

void transpose_f32(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                   size_t ldd, bool accumulate, float lo, float hi) {
#if ONNXPLEX_MLAS_HAVE_X86
  const CpuFeatures& f = cpu_features();
  if (f.avx512_vnni) return transpose_f32_avx512(src, rows, cols, lds, dst, ldd, accumulate, lo, hi);
  if (f.avx2) return transpose_f32_avx2(src, rows, cols, lds, dst, ldd, accumulate, lo, hi);
#endif
  transpose_f32_portable(src, rows, cols, lds, dst, ldd, accumulate, lo, hi);
}

}  // namespace onnxplex::mlas
