// The attention softmax row, compiled with AVX2 + FMA (call through attention_f32 only).
#include "attention_impl.h"

namespace onnxplex::mlas {

void softmax_row_avx2(float* x, size_t n, float scale, const float* bias) {
  detail::softmax_row_any(x, n, scale, bias);
}

void softmax_rows_avx2(const float* x, float* y, size_t rows, size_t cols, bool log) {
  detail::softmax_rows_any(x, y, rows, cols, log);
}

}  // namespace onnxplex::mlas
