// The sigmoid, SiLU and HardSwish drivers: variant choice and the split over threads; the
// portable variants.
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

void swish_f32_portable(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * (1.0f / (1.0f + std::exp(-x[i])));
}

void hardswish_f32_portable(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    // NaN: the product below is NaN whatever the clip gives
    y[i] = v * std::min(1.0f, std::max(0.0f, v * (1.0f / 6.0f) + 0.5f));
  }
}

void hardsigmoid_f32_portable(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    // (NaN fails both comparisons: it stays NaN)
    const float v = x[i] * (1.0f / 6.0f) + 0.5f;
    y[i] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
  }
}

namespace {

using RunFn = void (*)(const float*, float*, size_t);

RunFn post_act_run(PostAct act) {
  switch (act) {
    case PostAct::kSwish: return ONNXPLEX_MLAS_BEST_VARIANT(swish_f32);
    case PostAct::kHardSwish: return ONNXPLEX_MLAS_BEST_VARIANT(hardswish_f32);
    case PostAct::kHardSigmoid: return ONNXPLEX_MLAS_BEST_VARIANT(hardsigmoid_f32);
    case PostAct::kNone: break;
  }
  return nullptr;
}

}  // namespace

void post_act_f32(PostAct act, float* y, size_t rows, size_t cols, size_t ld) {
  const RunFn run = post_act_run(act);
  if (run == nullptr) return;
  if (ld == cols) {
    run(y, y, rows * cols);
    return;
  }
  for (size_t r = 0; r < rows; ++r) run(y + r * ld, y + r * ld, cols);
}

void post_act_f32(PostAct act, const float* x, float* y, size_t n, size_t threads) {
  const RunFn run = post_act_run(act);
  if (run == nullptr) {
    if (x != y) std::copy(x, x + n, y);
    return;
  }
  const size_t tasks = (n + kChunk - 1) / kChunk;
  parallel_for(tasks, tasks > 1 ? threads : 1, [&](size_t t) {
    const size_t lo = t * kChunk;
    run(x + lo, y + lo, std::min(kChunk, n - lo));
  });
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
