// Float32 scaled dot-product attention for the fused attention ops (Attention,
// MultiHeadAttention): per batch and head, scores = scale * Q K^T + bias, softmax over the keys,
// then probs V into the head's columns of the output. Knows nothing about Python.
//
// The two products run on the float GEMM (one thread a head); the softmax subtracts the row's
// max, exponentiates with the ISA's vector exp and multiplies by the reciprocal of the row sum
// (summed in float32 lanes). A row whose max is not finite (NaN, or all -inf) goes through
// std::exp element by element, as numpy would: NaN out.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace onnxplex::mlas {

struct AttentionArgs {
  // q [B, H, S, Dh], k [B, H, T, Dh], v [B, H, T, Dv]: strides in elements for the batch, the
  // head and the row; each row's values contiguous.
  const float* q;
  std::ptrdiff_t q_sb, q_sh, q_ss;
  const float* k;
  std::ptrdiff_t k_sb, k_sh, k_st;
  const float* v;
  std::ptrdiff_t v_sb, v_sh, v_st;
  // An additive bias broadcast to [B, H, S, T] (a stride 0 along a broadcast axis; each row's
  // T values contiguous), or null.
  const float* bias;
  std::ptrdiff_t bias_sb, bias_sh, bias_ss;
  float* y;  // [B, S, H, Dv], contiguous
  size_t b, h, s, t, dh, dv;
  float scale;
};

// threads 0 = all.
void attention_f32(const AttentionArgs& a, size_t threads);

namespace detail {

// The softmax row one value at a time: the portable variant, and the vector variants' path
// for a row whose max is not finite (scale 1 and no bias then: the row already holds them).
inline void softmax_row_scalar(float* x, size_t n, float scale, const float* bias) {
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (size_t j = 0; j < n; ++j) {
    x[j] = bias != nullptr ? x[j] * scale + bias[j] : x[j] * scale;
    nan |= std::isnan(x[j]);
    m = std::max(m, x[j]);
  }
  if (nan) m = std::numeric_limits<float>::quiet_NaN();
  float sum = 0.0f;
  for (size_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - m);
    sum += x[j];
  }
  const float inv = 1.0f / sum;
  for (size_t j = 0; j < n; ++j) x[j] *= inv;
}

}  // namespace detail

// scores (n values, contiguous) = softmax(scores * scale + bias), bias n values or null
// (call through attention_f32 only).
void softmax_row_portable(float* x, size_t n, float scale, const float* bias);
void softmax_row_avx2(float* x, size_t n, float scale, const float* bias);
void softmax_row_avx512(float* x, size_t n, float scale, const float* bias);

// y [rows, cols] = (Log)Softmax of x [rows, cols] over each row (softmax.h's contract: a row
// whose max is not finite or that holds a NaN is NaN), with the CPU's vector exp; no threads.
void softmax_rows(const float* x, float* y, size_t rows, size_t cols, bool log);
void softmax_rows_portable(const float* x, float* y, size_t rows, size_t cols, bool log);
void softmax_rows_avx2(const float* x, float* y, size_t rows, size_t cols, bool log);
void softmax_rows_avx512(const float* x, float* y, size_t rows, size_t cols, bool log);

}  // namespace onnxplex::mlas
