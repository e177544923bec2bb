// The sigmoid driver: variant choice and the split over threads; the portable variant.
#include "sigmoid.h"

#include <algorithm>
#include <cmath>

#include "cpu_features.h"
#include "parallel.h"

namespace onnxplex::mlas {

namespace {

constexpr size_t kChunk = 1 << 15;  // elements per task

}  // namespace

void sigmoid_f32_portable(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void sigmoid_f32(const float* x, float* y, size_t n, size_t threads) {
  const auto variant = ONNXPLEX_MLAS_BEST_VARIANT(sigmoid_f32);
  const size_t tasks = (n + kChunk - 1) / kChunk;
  parallel_for(tasks, tasks > 1 ? threads : 1, [&](size_t t) {
    const size_t lo = t * kChunk;
    variant(x + lo, y + lo, std::min(kChunk, n - lo));
  });
}

}  // namespace onnxplex::mlas
