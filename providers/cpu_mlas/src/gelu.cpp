// The GELU driver: variant choice and the split over threads; the portable variant.
#include "gelu.h"

#include <algorithm>
#include <cmath>

#include "cpu_features.h"
#include "parallel.h"

namespace onnxplex::mlas {

namespace {

// Elements per task: large enough to amortize the hand-over, a multiple of any bias length
// would be nicer but is not needed (each task starts at its own bias offset).
constexpr size_t kChunk = 1 << 15;

}  // namespace

void gelu_f32_portable(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
                       const GeluForm& form) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] + (bias != nullptr ? bias[i % bias_count] : 0.0f);
    const float z = std::min(v * v, form.clamp);
    float q = form.coeffs[0];
    for (size_t c = 1; c < form.count; ++c) q = q * z + form.coeffs[c];
    const float u = v * q;
    y[i] = v / (1.0f + std::exp(-2.0f * u));
  }
}

void gelu_f32(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
              const GeluForm& form, size_t threads) {
  const auto variant = ONNXPLEX_MLAS_BEST_VARIANT(gelu_f32);
  const size_t tasks = (n + kChunk - 1) / kChunk;
  parallel_for(tasks, tasks > 1 ? threads : 1, [&](size_t t) {
    const size_t lo = t * kChunk, len = std::min(kChunk, n - lo);
    // The bias restarts at this chunk's offset: pass a bias view rotated to it.
    if (bias == nullptr) {
      variant(x + lo, nullptr, 0, y + lo, len, form);
      return;
    }
    size_t done = 0, offset = lo % bias_count;
    while (done < len) {  // runs aligned to whole bias periods
      const size_t run = std::min(len - done, bias_count - offset);
      variant(x + lo + done, bias + offset, run, y + lo + done, run, form);
      done += run;
      offset = 0;
    }
  });
}

}  // namespace onnxplex::mlas
