// (Log)Softmax over the last axis of small float32 inputs, one row at a time: the row's max
// shift, exp, the sum in double, then a scaling by the reciprocal of the sum (or, for
// LogSoftmax, the shifted values less the sum's log). A row whose max is not finite (+inf,
// -inf everywhere, or a NaN) is NaN throughout, as numpy's shifted path gives it. Meant for
// the batch-1 rows of classifiers (a few to a few hundred values): no threads, no SIMD beyond
// what the compiler makes of the loops. The portable variant of attention.h's softmax_rows;
// x86 runs its vector variants (attention_impl.h), at any size.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

namespace onnxplex::mlas {

inline void softmax_rows_f32(const float* x, float* y, size_t rows, size_t cols, bool log) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -std::numeric_limits<float>::infinity();
    bool has_nan = false;
    for (size_t c = 0; c < cols; ++c) {
      const float v = xr[c];
      has_nan |= std::isnan(v);
      m = v > m ? v : m;
    }
    if (has_nan || !std::isfinite(m)) {
      for (size_t c = 0; c < cols; ++c) yr[c] = nan;
      continue;
    }
    double sum = 0.0;
    for (size_t c = 0; c < cols; ++c) {
      const float e = std::exp(xr[c] - m);
      if (!log) yr[c] = e;
      sum += e;
    }
    if (log) {
      const float ls = static_cast<float>(std::log(sum));
      for (size_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) - ls;
    } else {
      const float inv = static_cast<float>(1.0 / sum);
      for (size_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  }
}

}  // namespace onnxplex::mlas
