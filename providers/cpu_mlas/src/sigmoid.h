// Float32 logistic sigmoid, 1 / (1 + exp(-x)), for the Sigmoid op, and the activations
// convolutions fuse after their clamp: SiLU (Swish) x * sigmoid(x), HardSwish
// x * clip(x / 6 + 0.5, 0, 1) and its gate HardSigmoid clip(x / 6 + 0.5, 0, 1) (PyTorch's
// Hardsigmoid, a squeeze-excite gate in MobileNetV3). Knows nothing about Python.
#pragma once

#include <cstddef>

namespace onnxplex::mlas {

// y[i] = sigmoid(x[i]) for i in [0, n) (x and y may be the same array); threads 0 = all.
void sigmoid_f32(const float* x, float* y, size_t n, size_t threads);

void sigmoid_f32_portable(const float* x, float* y, size_t n);
void sigmoid_f32_avx2(const float* x, float* y, size_t n);
void sigmoid_f32_avx512(const float* x, float* y, size_t n);

// An activation applied in place after a conv's (or GEMM's) bias, sum input and clamp: the
// kinds the clamp cannot express. The values are the Python binding's `act` codes.
enum class PostAct : int { kNone = 0, kSwish = 1, kHardSwish = 2, kHardSigmoid = 3 };

// y[r * ld + j] = act(y[r * ld + j]) for r < rows, j < cols, on the calling thread (a GEMM
// tile's or a conv task's output while it is in cache); NaN stays NaN.
void post_act_f32(PostAct act, float* y, size_t rows, size_t cols, size_t ld);
// The same over n contiguous values of x into y (y may be x), split over threads (0 = all).
void post_act_f32(PostAct act, const float* x, float* y, size_t n, size_t threads);

// One contiguous run of n values, in place or not; per ISA (call post_act_f32).
void swish_f32_portable(const float* x, float* y, size_t n);
void swish_f32_avx2(const float* x, float* y, size_t n);
void swish_f32_avx512(const float* x, float* y, size_t n);
void hardswish_f32_portable(const float* x, float* y, size_t n);
void hardswish_f32_avx2(const float* x, float* y, size_t n);
void hardswish_f32_avx512(const float* x, float* y, size_t n);
void hardsigmoid_f32_portable(const float* x, float* y, size_t n);
void hardsigmoid_f32_avx2(const float* x, float* y, size_t n);
void hardsigmoid_f32_avx512(const float* x, float* y, size_t n);

}  // namespace onnxplex::mlas
