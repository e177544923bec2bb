// Row-wise kernels on float32 [n, f] rows: Scaler, Imputer, Normalizer, a log-sum-exp. One
// native call in place of the two to six numpy calls each took (most of their cost at batch
// 1). The arithmetic is the numpy path's, element by element. Knows nothing about Python.
#pragma once

#include <cmath>
#include <cstddef>

namespace onnxplex::mlas {

// y = (x - offset[j]) * scale[j], in float32.
inline void scale_rows(const float* x, size_t n, size_t f, const float* offset,
                       const float* scale, float* y) {
  for (size_t i = 0; i < n; ++i) {
    const float* xi = x + i * f;
    float* yi = y + i * f;
    for (size_t j = 0; j < f; ++j) {
      const float d = xi[j] - offset[j];
      yi[j] = d * scale[j];
    }
  }
}

// y = fill[j] where x is `replaced` (NaN when `nan`), else x.
inline void impute_rows(const float* x, size_t n, size_t f, const float* fill, float replaced,
                        bool nan, float* y) {
  for (size_t i = 0; i < n; ++i) {
    const float* xi = x + i * f;
    float* yi = y + i * f;
    for (size_t j = 0; j < f; ++j) {
      const float v = xi[j];
      yi[j] = (nan ? std::isnan(v) : v == replaced) ? fill[j] : v;
    }
  }
}

enum class RowNorm { kMax = 0, kL1 = 1, kL2 = 2 };

// Each row divided by its max (a NaN makes it NaN), the sum of its absolute values, or (L2)
// sqrt(x^2 / sum of squares) with x's sign; a row whose norm is 0 is copied. Sums in float32,
// in column order.
inline void normalize_rows(const float* x, size_t n, size_t f, RowNorm norm, float* y) {
  for (size_t i = 0; i < n; ++i) {
    const float* xi = x + i * f;
    float* yi = y + i * f;
    float d = 0.0f;
    if (norm == RowNorm::kMax) {
      d = xi[0];
      for (size_t j = 1; j < f; ++j) {
        if (std::isnan(d)) break;
        const float v = xi[j];
        d = (std::isnan(v) || v > d) ? v : d;
      }
    } else if (norm == RowNorm::kL1) {
      for (size_t j = 0; j < f; ++j) d += std::fabs(xi[j]);
    } else {
      for (size_t j = 0; j < f; ++j) {
        const float sq = xi[j] * xi[j];
        d += sq;
      }
    }
    if (d == 0.0f) {
      for (size_t j = 0; j < f; ++j) yi[j] = xi[j];
    } else if (norm != RowNorm::kL2) {
      for (size_t j = 0; j < f; ++j) yi[j] = xi[j] / d;
    } else {
      for (size_t j = 0; j < f; ++j) {
        const float sq = xi[j] * xi[j];
        yi[j] = std::copysign(std::sqrt(sq / d), xi[j]);
      }
    }
  }
}

// y[i] = log(sum_j exp(x[i, j])), in double (the max shifted out first), rounded once to
// float32: a row holding +inf gives +inf, a row of -inf -inf, a NaN NaN.
inline void logsumexp_rows(const float* x, size_t n, size_t f, float* y) {
  for (size_t i = 0; i < n; ++i) {
    const float* xi = x + i * f;
    double m = -INFINITY;
    bool nan = false;
    for (size_t j = 0; j < f; ++j) {
      const double v = xi[j];
      nan = nan || std::isnan(v);
      m = v > m ? v : m;
    }
    if (nan || std::isinf(m)) {
      y[i] = nan ? NAN : static_cast<float>(m);
      continue;
    }
    double s = 0.0;
    for (size_t j = 0; j < f; ++j) s += std::exp(static_cast<double>(xi[j]) - m);
    y[i] = static_cast<float>(std::log(s) + m);
  }
}

}  // namespace onnxplex::mlas
