// Depthwise 2-D float32 convolution (one filter per channel, NCHW) with the bias and a clamp
// (Relu, Clip) fused; 2-D max pooling on the same machinery. Knows nothing about Python.
#pragma once

#include <cstddef>
#include <vector>

namespace onnxplex::mlas {

struct DwConvGeometry {
  size_t h, w;    // input plane
  size_t ho, wo;  // output plane
  size_t kh, kw;  // kernel
  size_t sh, sw;  // strides
  size_t dh, dw;  // dilations
  size_t pt, pl;  // top and left pads (bottom/right follow from the output size)
};

// y[c] = clamp(bias[c] + sum over taps of w[c, t] * x[c, tap window], lo, hi) for c in
// [0, channels). x: [channels, h, w]; w: [channels, kh, kw]; bias: [channels] or nullptr;
// y: [channels, ho, wo]; all C-contiguous. Pass lo = -inf, hi = +inf for no clamp; NaNs
// propagate. Dispatches on the CPU (AVX-512, AVX2, portable).
void dwconv_f32(const float* x, const float* w, const float* bias, float* y, size_t channels,
                const DwConvGeometry& g, float lo, float hi);

// The per-ISA variants (same contract); call dwconv_f32, which picks one.
void dwconv_f32_portable(const float* x, const float* w, const float* bias, float* y,
                         size_t channels, const DwConvGeometry& g, float lo, float hi);
void dwconv_f32_avx2(const float* x, const float* w, const float* bias, float* y,
                     size_t channels, const DwConvGeometry& g, float lo, float hi);
void dwconv_f32_avx512(const float* x, const float* w, const float* bias, float* y,
                       size_t channels, const DwConvGeometry& g, float lo, float hi);

// A channels-last depthwise conv's weights and bias laid out as its kernel reads them, once
// (a plan's), instead of on every call: blocks of `lanes` channels, per block taps x lanes
// weights then lanes biases, spare lanes zero (dw_prepare). `lanes` is the dispatched
// variant's vector width (dwconv_nhwc_lanes); a kernel of another width ignores it.
struct DwPrepared {
  size_t lanes = 0, taps = 0;
  std::vector<float> wv, bv;
};
size_t dwconv_nhwc_lanes();
void dw_prepare(const float* w, const float* bias, size_t channels, size_t taps,
                DwPrepared& out);

// The same conv on channels-last images: channels [c0, c1) and output rows [oy0, oy1) of x
// [h, w, ld] into y [ho, wo, ld] (channel c of a position at offset c; w [ld, kh, kw] and bias
// indexed by channel). Vectors run across channels, so no plane is transposed. Dispatches like
// dwconv_f32. `prep`: w and bias as dw_prepare lays out all ld channels, or null.
void dwconv_nhwc_f32(const float* x, const float* w, const float* bias, float* y, size_t ld,
                     size_t c0, size_t c1, size_t oy0, size_t oy1, const DwConvGeometry& g,
                     float lo, float hi, const DwPrepared* prep = nullptr);
void dwconv_nhwc_f32_portable(const float* x, const float* w, const float* bias, float* y,
                              size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                              const DwConvGeometry& g, float lo, float hi,
                              const DwPrepared* prep = nullptr);
void dwconv_nhwc_f32_avx2(const float* x, const float* w, const float* bias, float* y,
                          size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                          const DwConvGeometry& g, float lo, float hi,
                          const DwPrepared* prep = nullptr);
void dwconv_nhwc_f32_avx512(const float* x, const float* w, const float* bias, float* y,
                            size_t ld, size_t c0, size_t c1, size_t oy0, size_t oy1,
                            const DwConvGeometry& g, float lo, float hi,
                            const DwPrepared* prep = nullptr);

// 2-D max pooling with the same geometry (kernel kh x kw; the pads are -inf): y [C, Ho, Wo] =
// max over each window of x [C, H, W]; NaN propagates. Dispatches like dwconv_f32.
void maxpool_f32(const float* x, float* y, size_t channels, const DwConvGeometry& g);
void maxpool_f32_portable(const float* x, float* y, size_t channels, const DwConvGeometry& g);
void maxpool_f32_avx2(const float* x, float* y, size_t channels, const DwConvGeometry& g);
void maxpool_f32_avx512(const float* x, float* y, size_t channels, const DwConvGeometry& g);

// Max pooling of a channels-last image, output rows [oy0, oy1): x [h, w, c] into y [ho, wo, c]
// (the same geometry and NaN rule as maxpool_f32; vectors across channels). Dispatches like
// dwconv_f32.
void maxpool_nhwc_f32(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                      const DwConvGeometry& g);
void maxpool_nhwc_f32_portable(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                               const DwConvGeometry& g);
void maxpool_nhwc_f32_avx2(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                           const DwConvGeometry& g);
void maxpool_nhwc_f32_avx512(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                             const DwConvGeometry& g);

// Average pooling of a channels-last image, output rows [oy0, oy1): x [h, w, c] into
// y [ho, wo, c], each window's sum times 1 / its count of taps inside the input, or with
// include_pad inside the padded extent (pb, pr: the bottom and right pads). Dispatches like
// dwconv_f32.
void avgpool_nhwc_f32(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                      const DwConvGeometry& g, bool include_pad, size_t pb, size_t pr);
void avgpool_nhwc_f32_portable(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                               const DwConvGeometry& g, bool include_pad, size_t pb, size_t pr);
void avgpool_nhwc_f32_avx2(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                           const DwConvGeometry& g, bool include_pad, size_t pb, size_t pr);
void avgpool_nhwc_f32_avx512(const float* x, float* y, size_t c, size_t oy0, size_t oy1,
                             const DwConvGeometry& g, bool include_pad, size_t pb, size_t pr);

// dst[j * ldd + i] = clamp(src[i * lds + j], lo, hi) for i < rows, j < cols (with
// `accumulate`, src's value is added to dst's first): a transpose in register tiles, for
// layouts that meet at a GEMM (a conv computed as out^T = col^T W^T). Dispatches like
// dwconv_f32.
void transpose_f32(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                   size_t ldd, bool accumulate, float lo, float hi);
void transpose_f32_portable(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                            size_t ldd, bool accumulate, float lo, float hi);
void transpose_f32_avx2(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                        size_t ldd, bool accumulate, float lo, float hi);
void transpose_f32_avx512(const float* src, size_t rows, size_t cols, size_t lds, float* dst,
                          size_t ldd, bool accumulate, float lo, float hi);

}  // namespace onnxplex::mlas
