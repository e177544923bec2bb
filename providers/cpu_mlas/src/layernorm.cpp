// The layer-norm driver: variant choice and the split over threads; the portable variant.
#include "layernorm.h"

#include <algorithm>
#include <thread>

#include "cpu_features.h"
#include "layernorm_impl.h"
#include "parallel.h"

namespace onnxplex::mlas {

namespace {

// Below this many values a row block is not worth handing to another thread.
constexpr size_t kMinTaskValues = 16384;

}  // namespace

void layer_norm_rows_portable(const LayerNormArgs& a, size_t r0, size_t r1) {
  detail::layer_norm_rows_any(a, r0, r1);
}

void layer_norm_f32(const LayerNormArgs& a, size_t threads) {
  if (a.rows == 0 || a.d == 0) return;
  const auto variant = ONNXPLEX_MLAS_BEST_VARIANT(layer_norm_rows);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t tasks =
      std::max<size_t>(1, std::min({a.rows, threads, a.rows * a.d / kMinTaskValues}));
  parallel_for(tasks, tasks > 1 ? threads : 1, [&](size_t t) {
    variant(a, a.rows * t / tasks, a.rows * (t + 1) / tasks);
  });
}

}  // namespace onnxplex::mlas
