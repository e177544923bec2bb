// Grouped 2-D float32 convolution on channels-last images (groups of a few channels each, as
// RegNet's and ResNeXt's 3x3 convs: neither a depthwise conv nor worth a GEMM per group), with
// the bias, a sum input Z and a clamp (Relu, Clip) fused. Knows nothing about Python.
#pragma once

#include <cstddef>

#include "dwconv.h"

namespace onnxplex::mlas {

struct GConvShape {
  size_t c, m;        // input and output channels (c = group * cgi, m = group * cgo)
  size_t group;
  size_t cgi, cgo;    // channels of a group, in and out
};

// Whether gconv_nhwc_f32 runs groups of `cgo` output channels (vectors of 8 or 4 of them).
bool gconv_nhwc_supported(size_t cgo);

// Whether the variant this CPU runs puts several groups side by side in one vector (AVX-512,
// cgi == cgo == 4 or 8: 4 or 2 groups a 16-lane vector, each input value spread over its
// group's lanes by a permute), for the groups in whole vectors; the rest run one group at a
// time.
bool gconv_multi_group(const GConvShape& s);

// How many floats gconv_pack_weight writes.
size_t gconv_packed_size(const GConvShape& s, size_t kh, size_t kw);

// The weight [m, cgi, kh, kw] (Conv's) laid out for gconv_nhwc_f32: wr[g][kh][kw][cgi][cgo],
// followed, when gconv_multi_group(s), by the groups of whole vectors again as
// [vector][kh][kw][cgi][16 lanes] (lane j * cgo + o: output channel o of the vector's j-th group).
void gconv_pack_weight(const float* w, const GConvShape& s, size_t kh, size_t kw, float* wr);

// Output rows [oy0, oy1) of one image: x [h, w, c] into y [ho, wo, m] (geometry as dwconv's):
//   y[p, g * cgo + o] = clamp(bias[.] + z[p, .] + sum over taps t and i < cgi of
//                             x[tap t of p, g * cgi + i] * w[g * cgo + o, i, t], lo, hi)
// bias and z may be nullptr (z [ho, wo, m] like y). NaNs propagate. Dispatches on the CPU.
void gconv_nhwc_f32(const float* x, const float* wr, const float* bias, const float* z,
                    float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                    size_t oy1, float lo, float hi);
void gconv_nhwc_f32_portable(const float* x, const float* wr, const float* bias, const float* z,
                             float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                             size_t oy1, float lo, float hi);
void gconv_nhwc_f32_avx2(const float* x, const float* wr, const float* bias, const float* z,
                         float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                         size_t oy1, float lo, float hi);
void gconv_nhwc_f32_avx512(const float* x, const float* wr, const float* bias, const float* z,
                           float* y, const GConvShape& s, const DwConvGeometry& g, size_t oy0,
                           size_t oy1, float lo, float hi);

}  // namespace onnxplex::mlas
