// The attention softmax row with the ISA's vector exp, included by one translation unit per ISA
// (compiled with its flags). V is __m512 or __m256; the lane count L.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <limits>

#include "attention.h"
#include "vexp.h"

namespace onnxplex::mlas::detail {
namespace {

#if defined(__AVX512F__)
using V = __m512;
constexpr size_t L = 16;
inline V load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V set1(float f) { return _mm512_set1_ps(f); }
inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V add(V a, V b) { return _mm512_add_ps(a, b); }
inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
inline float hmax(V a) { return _mm512_reduce_max_ps(a); }
inline float hsum(V a) { return _mm512_reduce_add_ps(a); }
inline bool any_nan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) != 0; }
#else
using V = __m256;
constexpr size_t L = 8;
inline V load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V set1(float f) { return _mm256_set1_ps(f); }
inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vmax(V a, V b) { return _mm256_max_ps(a, b); }
inline float hmax(V a) {
  alignas(32) float f[8];
  _mm256_store_ps(f, a);
  float m = f[0];
  for (int i = 1; i < 8; ++i) m = f[i] > m ? f[i] : m;
  return m;
}
inline float hsum(V a) {
  alignas(32) float f[8];
  _mm256_store_ps(f, a);
  return ((f[0] + f[4]) + (f[1] + f[5])) + ((f[2] + f[6]) + (f[3] + f[7]));
}
inline bool any_nan(V a) { return _mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)) != 0; }
#endif

// exp(x[j] - m) for j < n into e (may be x; null: not stored), returning their sum (float
// vectors of partial sums, then the tail in order).
inline float exp_sum(const float* x, float* e, size_t n, float m) {
  const V mv = set1(m);
  V acc = set1(0.0f);
  size_t j = 0;
  for (; j + L <= n; j += L) {
    const V v = vexp::exp_ps(sub(load(x + j), mv));
    if (e != nullptr) store(e + j, v);
    acc = add(acc, v);
  }
  float sum = hsum(acc);
  for (; j < n; ++j) {
    const float v = std::exp(x[j] - m);
    if (e != nullptr) e[j] = v;
    sum += v;
  }
  return sum;
}

// y[j] *= s for j < n.
inline void scale_by(float* y, size_t n, float s) {
  const V sv = set1(s);
  size_t j = 0;
  for (; j + L <= n; j += L) store(y + j, mul(load(y + j), sv));
  for (; j < n; ++j) y[j] *= s;
}

inline void softmax_row_any(float* x, size_t n, float scale, const float* bias) {
  const V vs = set1(scale);
  V vm = set1(-std::numeric_limits<float>::infinity());
  bool nan = false;
  size_t j = 0;
  for (; j + L <= n; j += L) {
    V v = bias != nullptr ? fmadd(load(x + j), vs, load(bias + j)) : mul(load(x + j), vs);
    store(x + j, v);
    nan |= any_nan(v);
    vm = vmax(vm, v);
  }
  float m = hmax(vm);
  for (; j < n; ++j) {
    x[j] = bias != nullptr ? x[j] * scale + bias[j] : x[j] * scale;
    nan |= std::isnan(x[j]);
    m = x[j] > m ? x[j] : m;
  }
  if (nan || !std::isfinite(m)) {  // NaN, or a row all -inf (or holding +inf): as numpy
    softmax_row_scalar(x, n, 1.0f, nullptr);
    return;
  }
  scale_by(x, n, 1.0f / exp_sum(x, x, n, m));
}

// The Softmax / LogSoftmax ops over the last axis (softmax.h's contract: a row whose max is not
// finite, or that holds a NaN, is NaN throughout), a row at a time with the vector exp: the
// max, then exp(x - max) and its sum (in float vectors of partial sums), then the scaling by
// the sum's reciprocal, or for LogSoftmax (x - max) - log(sum).
inline void softmax_rows_any(const float* x, float* y, size_t rows, size_t cols, bool log) {
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    V vm = set1(-inf);
    bool nan = false;
    size_t j = 0;
    for (; j + L <= cols; j += L) {
      const V v = load(xr + j);
      nan |= any_nan(v);
      vm = vmax(vm, v);
    }
    float m = hmax(vm);
    for (; j < cols; ++j) {
      nan |= std::isnan(xr[j]);
      m = xr[j] > m ? xr[j] : m;
    }
    if (nan || !std::isfinite(m)) {
      for (size_t c = 0; c < cols; ++c) yr[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float sum = exp_sum(xr, log ? nullptr : yr, cols, m);
    if (!log) {
      scale_by(yr, cols, 1.0f / sum);
      continue;
    }
    const float ls = std::log(sum);
    const V mv = set1(m), lv = set1(ls);
    for (j = 0; j + L <= cols; j += L) store(yr + j, sub(sub(load(xr + j), mv), lv));
    for (; j < cols; ++j) yr[j] = (xr[j] - m) - ls;
  }
}

}  // namespace
}  // namespace onnxplex::mlas::detail
