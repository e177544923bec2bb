// Convolution epilogue (portable; memory-bound, the compiler's baseline vectorization does).
#include "conv_epilogue.h"

#include <algorithm>

namespace onnxplex::mlas {

void bias_act_f32(float* y, const std::ptrdiff_t y_strides[2], const float* bias,
                  const float* z, const std::ptrdiff_t z_strides[2], size_t batch,
                  size_t channels, size_t length, float lo, float hi) {
  for (size_t n = 0; n < batch; ++n) {
    for (size_t m = 0; m < channels; ++m) {
      float* row = y + static_cast<std::ptrdiff_t>(n) * y_strides[0] +
                   static_cast<std::ptrdiff_t>(m) * y_strides[1];
      const float b = bias != nullptr ? bias[m] : 0.0f;
      if (z != nullptr) {
        const float* zr = z + static_cast<std::ptrdiff_t>(n) * z_strides[0] +
                          static_cast<std::ptrdiff_t>(m) * z_strides[1];
        for (size_t l = 0; l < length; ++l) {
          row[l] = std::min(std::max(row[l] + b + zr[l], lo), hi);
        }
      } else {
        for (size_t l = 0; l < length; ++l) row[l] = std::min(std::max(row[l] + b, lo), hi);
      }
    }
  }
}

}  // namespace onnxplex::mlas
