// Drivers: pack weights once, then run a family's kernel over the whole output, splitting the
// tile range over threads. Pure C++; used by the pybind11 layer and by tests/native.
// All strides are in bytes; matrices are row-major with unit column stride unless stated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ukernel.h"

namespace onnxplex::kleidi {

// Weights packed for one variant of one family (the layout depends on the variant's nr/kr/sr,
// and for SME2 on the vector length, so they must be run with that same variant).
struct PackedRhs {
  Family family;
  Variant variant;
  size_t n = 0, k = 0;                 // GEMM view: N outputs, K reduction length
  size_t c_in = 0, kh = 0, kw = 0;     // conv only: k == kh * kw * c_in
  std::vector<uint8_t> data;
};

// (1) rhs element (k, n) at rhs[k * stride_k + n * stride_n] (elements); bias [n] or null.
PackedRhs pack_gemm_f32(Variant v, size_t n, size_t k, const float* rhs, size_t stride_k,
                        size_t stride_n, const float* bias);
// dst[m, n] = clamp(lhs[m, :] @ rhs + bias)
void gemm_f32(const PackedRhs& rhs, size_t m, const float* lhs, size_t lhs_stride_row,
              float* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
              size_t threads);

// (2) 2-D convolution, ONNX semantics (NCHW, OIHW weights, group 1).
struct Conv2dGeometry {
  size_t stride_h = 1, stride_w = 1;
  size_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  size_t dil_h = 1, dil_w = 1;
};
PackedRhs pack_conv2d_f32(Variant v, size_t c_out, size_t c_in, size_t kh, size_t kw,
                          const float* weights_oihw, const float* bias);
// Output spatial size; throws std::invalid_argument if the kernel does not fit.
void conv2d_output_size(size_t h, size_t w, size_t kh, size_t kw, const Conv2dGeometry& g,
                        size_t* out_h, size_t* out_w);
// x: [batch, c_in, h, w] contiguous; y: [batch, c_out, out_h, out_w] contiguous.
void conv2d_f32(const PackedRhs& rhs, size_t batch, size_t h, size_t w, const float* x,
                const Conv2dGeometry& g, float* y, float clamp_min, float clamp_max,
                size_t threads);

// (3) int8 weights element (k, n) at rhs[k * stride_k + n * stride_n]; scales [n]; bias or null.
PackedRhs pack_qsi8cx(Variant v, size_t n, size_t k, const int8_t* rhs, size_t stride_k,
                      size_t stride_n, const float* scales, const float* bias);
void qgemm_qsi8cx(const PackedRhs& rhs, size_t m, const float* lhs, size_t lhs_stride_row,
                  float* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
                  size_t threads);

// (4) qsu4c32 weights: nibbles [n][k/2] (row stride in bytes), scales [n][k/32] (row stride in
// elements); bias or null. K must be a multiple of 32.
PackedRhs pack_qsi4c32(Variant v, size_t n, size_t k, const uint8_t* nibbles,
                       size_t nibble_stride_row, const float* scales, size_t scale_stride_row,
                       const float* bias);
void qgemm_qsi4c32(const PackedRhs& rhs, size_t m, const float* lhs, size_t lhs_stride_row,
                   float* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
                   size_t threads);

// (5) fp16 GEMM, every array IEEE binary16 bit patterns: rhs element (k, n) at
// rhs[k * stride_k + n * stride_n] (elements); bias [n] or null. Numerics per variant in
// ukernel.h (GemmF16Ukernel).
PackedRhs pack_gemm_f16(Variant v, size_t n, size_t k, const f16_bits* rhs, size_t stride_k,
                        size_t stride_n, const f16_bits* bias);
// dst[m, n] = f16(clamp(lhs[m, :] @ rhs + bias))
void gemm_f16(const PackedRhs& rhs, size_t m, const f16_bits* lhs, size_t lhs_stride_row,
              f16_bits* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
              size_t threads);

// qai8dx quantization of an m x k matrix, unpacked (for tests of the numerics):
// q [m][k] int8, neg_zp [m] (= -zero point), scale [m].
void quantize_qai8dx(size_t m, size_t k, const float* lhs, size_t lhs_stride_row, int8_t* q,
                     int32_t* neg_zp, float* scale);

}  // namespace onnxplex::kleidi
