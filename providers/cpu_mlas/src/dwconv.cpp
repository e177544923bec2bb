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

}  // namespace onnxplex::mlas
