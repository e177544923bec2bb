// The layer-norm row loop, included by one translation unit per ISA (each compiled with its own
// -m flags, so the compiler vectorizes the 16-lane loops for that ISA; the lanes are explicit,
// so every ISA sums in the same order).
#pragma once

#include <cmath>
#include <cstddef>

#include "layernorm.h"

namespace onnxplex::mlas::detail {
// Internal linkage: each including translation unit keeps its own copy (see dwconv_impl.h).
namespace {

constexpr size_t kNormLanes = 16;

// The lanes' total in a fixed pairwise order.
inline double lane_total(double* acc) {
  for (size_t w = kNormLanes / 2; w > 0; w /= 2) {
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

// s = x (+ skip) (+ bias) into s; returns the sum of s, or of s^2 when `squares`.
template <bool HasSkip, bool HasBias>
double sum_row(const float* x, const float* skip, const float* bias, float* s, size_t d,
               bool squares) {
  double acc[kNormLanes] = {};
  double tail = 0.0;
  size_t i = 0;
  auto value = [&](size_t k) {
    float v = x[k];
    if constexpr (HasSkip) v += skip[k];
    if constexpr (HasBias) v += bias[k];
    s[k] = v;
    return static_cast<double>(v);
  };
  if (squares) {
    for (; i + kNormLanes <= d; i += kNormLanes) {
      for (size_t j = 0; j < kNormLanes; ++j) {
        const double v = value(i + j);
        acc[j] += v * v;
      }
    }
    for (; i < d; ++i) {
      const double v = value(i);
      tail += v * v;
    }
  } else {
    for (; i + kNormLanes <= d; i += kNormLanes) {
      for (size_t j = 0; j < kNormLanes; ++j) acc[j] += value(i + j);
    }
    for (; i < d; ++i) tail += value(i);
  }
  return lane_total(acc) + tail;
}

// The sum of (s - mean)^2.
inline double squared_deviations(const float* s, size_t d, double mean) {
  double acc[kNormLanes] = {};
  double tail = 0.0;
  size_t i = 0;
  for (; i + kNormLanes <= d; i += kNormLanes) {
    for (size_t j = 0; j < kNormLanes; ++j) {
      const double e = static_cast<double>(s[i + j]) - mean;
      acc[j] += e * e;
    }
  }
  for (; i < d; ++i) {
    const double e = static_cast<double>(s[i]) - mean;
    tail += e * e;
  }
  return lane_total(acc) + tail;
}

template <bool HasSkip, bool HasBias>
void layer_norm_rows_t(const LayerNormArgs& a, size_t r0, size_t r1) {
  const size_t d = a.d;
  const double n = static_cast<double>(d);
  for (size_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * d;
    const float* skip = HasSkip ? a.skip + (r % a.skip_rows) * d : nullptr;
    float* y = a.y + r * d;
    float* s = a.sum != nullptr ? a.sum + r * d : y;
    const double total = sum_row<HasSkip, HasBias>(x, skip, a.bias, s, d, a.rms);
    const float* g = a.gamma;
    if (a.rms) {
      const float inv = static_cast<float>(1.0 / std::sqrt(total / n + a.eps));
      for (size_t i = 0; i < d; ++i) y[i] = (s[i] * inv) * g[i];
      if (a.inv != nullptr) a.inv[r] = inv;
      continue;
    }
    const double mean = total / n;
    const double var = squared_deviations(s, d, mean) / n;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + a.eps));
    const auto m = static_cast<float>(mean);
    if (a.beta != nullptr) {
      const float* b = a.beta;
      for (size_t i = 0; i < d; ++i) y[i] = ((s[i] - m) * inv) * g[i] + b[i];
    } else {
      for (size_t i = 0; i < d; ++i) y[i] = ((s[i] - m) * inv) * g[i];
    }
    if (a.mean != nullptr) a.mean[r] = m;
    if (a.inv != nullptr) a.inv[r] = inv;
  }
}

inline void layer_norm_rows_any(const LayerNormArgs& a, size_t r0, size_t r1) {
  if (a.skip != nullptr) {
    return a.bias != nullptr ? layer_norm_rows_t<true, true>(a, r0, r1)
                             : layer_norm_rows_t<true, false>(a, r0, r1);
  }
  return a.bias != nullptr ? layer_norm_rows_t<false, true>(a, r0, r1)
                           : layer_norm_rows_t<false, false>(a, r0, r1);
}

}  // namespace
}  // namespace onnxplex::mlas::detail
