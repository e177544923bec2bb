// Small-batch linear scores for ai.onnx.ml LinearClassifier / LinearRegressor: scores = x W^T + b
// in float (each score summed over the features in order), the first best score's index, and
// onnxruntime's float LOGISTIC or SOFTMAX (ml_common.h ComputeLogistic / ComputeSoftmax) over a
// row. Knows nothing about Python; header-only (register_trees.cpp binds it). Large batches run
// as numpy products (BLAS) instead: this is one call in place of five numpy calls on a row.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace onnxplex::mlas {

enum class LinearPost : int { kNone = 0, kLogistic = 1, kSoftmax = 2 };

struct LinearModel {
  size_t n_out = 0, n_features = 0;
  std::vector<float> w;  // [n_out, F]
  std::vector<float> b;  // [n_out]
  LinearPost post = LinearPost::kNone;

  // x [rows, F]: scores [rows, n_out] (after the post transform) and best [rows], the index of
  // each row's first largest raw score (a NaN score is taken at once, as numpy's argmax).
  void run(const float* x, size_t rows, float* scores, int64_t* best) const {
    const size_t c = n_out, f = n_features;
    // Four rows at a time: four independent sums in flight instead of one chain of dependent
    // additions (each score is still summed over the features in order: the same bits as
    // one row at a time).
    size_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      for (size_t j = 0; j < c; ++j) {
        const float* wj = w.data() + j * f;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < f; ++i) {
          const float wi = wj[i];
          s0 += x[i] * wi;
          s1 += x[f + i] * wi;
          s2 += x[2 * f + i] * wi;
          s3 += x[3 * f + i] * wi;
        }
        scores[j] = s0 + b[j];
        scores[c + j] = s1 + b[j];
        scores[2 * c + j] = s2 + b[j];
        scores[3 * c + j] = s3 + b[j];
      }
      for (size_t q = 0; q < 4; ++q, scores += c) finish_row(scores, best + r + q);
      x += 4 * f;
    }
    for (; r < rows; ++r, x += f, scores += c) {
      for (size_t j = 0; j < c; ++j) {
        const float* wj = w.data() + j * f;
        float s = 0;
        for (size_t i = 0; i < f; ++i) s += x[i] * wj[i];
        scores[j] = s + b[j];
      }
      finish_row(scores, best + r);
    }
  }

  // A row's scores: its best index, then the post transform in place.
  void finish_row(float* scores, int64_t* best) const {
    const size_t c = n_out;
    size_t k = 0;
    for (size_t j = 0; j < c; ++j) {
      if (std::isnan(scores[j])) {
        k = j;
        break;
      }
      if (scores[j] > scores[k]) k = j;
    }
    *best = static_cast<int64_t>(k);
    if (post == LinearPost::kLogistic) {
      for (size_t j = 0; j < c; ++j) {
        const float v = scores[j];
        const float e = 1.0f / (1.0f + std::exp(-std::fabs(v)));
        scores[j] = v < 0 ? 1.0f - e : e;
      }
    } else if (post == LinearPost::kSoftmax) {
      float m = -std::numeric_limits<float>::max();
      for (size_t j = 0; j < c; ++j) m = scores[j] > m ? scores[j] : m;
      float sum = 0;
      for (size_t j = 0; j < c; ++j) {
        scores[j] = std::exp(scores[j] - m);
        sum += scores[j];
      }
      for (size_t j = 0; j < c; ++j) scores[j] /= sum;
    }
  }
};

}  // namespace onnxplex::mlas
