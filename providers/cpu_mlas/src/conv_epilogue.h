// The epilogue of a convolution or GEMM output: bias per channel, an optional sum input, then
// a clamp (Relu, Clip), in one pass, in place. Knows nothing about Python.
#pragma once

#include <cstddef>

namespace onnxplex::mlas {

// For n < batch, m < channels, l < length:
//   y[n, m, l] = clamp(y[n, m, l] + bias[m] + z[n, m, l], lo, hi)
// bias and z may be nullptr. Strides are in elements; the last axis is contiguous. NaNs
// propagate.
void bias_act_f32(float* y, const std::ptrdiff_t y_strides[2], const float* bias,
                  const float* z, const std::ptrdiff_t z_strides[2], size_t batch,
                  size_t channels, size_t length, float lo, float hi);

}  // namespace onnxplex::mlas
