// Float32 logistic sigmoid, 1 / (1 + exp(-x)), for the Sigmoid op. Knows nothing about Python.
#pragma once

#include <cstddef>

namespace onnxplex::mlas {

// y[i] = sigmoid(x[i]) for i in [0, n) (x and y may be the same array); threads 0 = all.
void sigmoid_f32(const float* x, float* y, size_t n, size_t threads);

void sigmoid_f32_portable(const float* x, float* y, size_t n);
void sigmoid_f32_avx2(const float* x, float* y, size_t n);
void sigmoid_f32_avx512(const float* x, float* y, size_t n);

}  // namespace onnxplex::mlas
