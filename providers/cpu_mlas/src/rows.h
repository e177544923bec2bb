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

constexpr size_t kSumMidChunk = 32;   // columns summed in registers down all the rows

// sum_mid's columns [0, w) of one outer item (w <= kSumMidChunk): every row's w values added
// at once, not one column's whole chain of dependent adds after another's (a [1, 56, 56, 16]
// mean took 43 us that way). Called with w = kSumMidChunk the loops have a constant count.
inline void sum_mid_columns(const float* __restrict x, size_t mid, size_t inner, size_t w,
                            bool mean, float* __restrict y) {
  const auto count = static_cast<float>(mid);
  float acc[kSumMidChunk];
  for (size_t t = 0; t < w; ++t) acc[t] = 0.0f + x[t];
  for (size_t m = 1; m < mid; ++m) {
    const float* xm = x + m * inner;
    for (size_t t = 0; t < w; ++t) acc[t] += xm[t];
  }
  for (size_t t = 0; t < w; ++t) y[t] = mean ? acc[t] / count : acc[t];
}

// y[o, i] = 0 + x[o, 0, i] + x[o, 1, i] + ... + x[o, mid - 1, i] in float32, left to right,
// then divided by `mid` when `mean`: numpy's sum over axes that are not the innermost one (it
// adds whole rows in order to its identity, so a sum of -0.0s is +0.0), to the bit. A
// channels-last global average pooling is [n, h * w, c]. `mid` is at least 1.
inline void sum_mid(const float* __restrict x, size_t outer, size_t mid, size_t inner,
                    bool mean, float* __restrict y) {
  for (size_t o = 0; o < outer; ++o) {
    const float* xo = x + o * mid * inner;
    float* yo = y + o * inner;
    size_t i = 0;
    for (; i + kSumMidChunk <= inner; i += kSumMidChunk)
      sum_mid_columns(xo + i, mid, inner, kSumMidChunk, mean, yo + i);
    if (i < inner) sum_mid_columns(xo + i, mid, inner, inner - i, mean, yo + i);
  }
}

}  // namespace onnxplex::mlas
