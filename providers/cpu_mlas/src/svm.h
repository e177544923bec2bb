// SVM evaluation for ai.onnx.ml SVMClassifier (libsvm mode: support vectors) and SVMRegressor,
// with onnxruntime's numerics (core/providers/cpu/ml/svmclassifier.cc, svmregressor.cc,
// ml_common.h). Knows nothing about Python; header-only (register_trees.cpp binds it).
//
// The caller (providers/cpu_mlas/ml_linear.py) lays the attributes out: the support vectors
// [V, F] float, each output's weighted sum over the kernel values as segments (start vector,
// count, offset of their coefficients), a bias per output. A row is: its kernel values against
// every support vector (float, as onnxruntime's); each output the double sum of float
// products coefficient * kernel, plus the bias. A classifier's outputs are its one-vs-one
// pairs in (0,1), (0,2), ..., (1,2), ... order: pair (i, j) votes for i when its sum is > 0,
// else for j, and the label is the first class of the most votes; the scores are the sums as
// float, or with Platt parameters libsvm's pairwise coupling of the pairs' probabilities, in
// float and onnxruntime's order of operations (multiclass_probability).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "parallel.h"

namespace onnxplex::mlas {

// The hot loops, cloned for AVX2 where the compiler can (ifunc dispatch; no FMA, so the
// roundings are the portable clone's).
// no-trapping-math lets the clamps and the float-to-int conversion vectorise (it changes no
// result, only what a floating-point exception flag could observe).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ONNXPLEX_SVM_CLONES \
  __attribute__((target_clones("avx2", "default"), optimize("no-trapping-math")))
#else
#define ONNXPLEX_SVM_CLONES
#endif

// k[j] = sum_i (x[i] - vt[i][j])^2 (rbf) or sum_i x[i] vt[i][j], over vt [f, nv].
ONNXPLEX_SVM_CLONES static void svm_accumulate(const float* x, const float* vt, size_t f,
                                               size_t nv, bool rbf, float* k) {
  std::fill(k, k + nv, 0.0f);
  for (size_t i = 0; i < f; ++i, vt += nv) {
    const float xi = x[i];
    if (rbf) {
      for (size_t j = 0; j < nv; ++j) {
        const float d = xi - vt[j];
        k[j] += d * d;
      }
    } else {
      for (size_t j = 0; j < nv; ++j) k[j] += xi * vt[j];
    }
  }
}

// e^x in float, portable and branch-free (the compiler vectorises a loop of it): range
// reduction to [-ln2/2, ln2/2] with ln2 in two parts, vexp.h's degree-7 polynomial (relative
// error below 1e-8 before rounding), 2^n in the exponent field. x is clamped to
// [-87.3, 88.3]: below, the result is within 1e-37 of 0 (no subnormals).
__attribute__((always_inline)) inline float svm_exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  // floor(x log2(e) + 0.5) by truncating a positive number
  const int n = static_cast<int>(x * 1.44269504088896341f + 128.5f) - 128;
  const float nf = static_cast<float>(n);
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// k[j] = e^(g k[j]).
ONNXPLEX_SVM_CLONES static void svm_exp_scaled(float g, size_t n, float* k) {
  for (size_t j = 0; j < n; ++j) k[j] = svm_exp(g * k[j]);
}

enum class SvmKernel : int { kLinear = 0, kPoly = 1, kRbf = 2, kSigmoid = 3 };

struct SvmModel {
  SvmKernel kind = SvmKernel::kLinear;
  double gamma = 0, coef0 = 0, degree = 0;
  size_t n_vectors = 0, n_features = 0;
  std::vector<float> vectors;        // [V, F]
  std::vector<float> vectors_t;      // [F, V], made by check()
  std::vector<float> coefs;          // the coefficients the segments point into
  std::vector<int64_t> seg_start, seg_count, seg_coef;  // [S]
  std::vector<int64_t> out_begin;    // [P + 1] each output's segments
  std::vector<double> bias;          // [P]
  size_t n_classes = 0;              // 0: a regressor (P outputs, no votes)
  std::vector<float> prob_a, prob_b;  // [P] when the classifier couples probabilities

  size_t n_outputs() const { return bias.size(); }
  bool coupling() const { return n_classes > 0 && !prob_a.empty(); }
  // scores a row: the classes (coupled), else the outputs
  size_t n_scores() const { return coupling() ? n_classes : n_outputs(); }

  // Checks the layout and transposes the vectors.
  void check() {
    if (vectors.size() != n_vectors * n_features) throw std::invalid_argument("vectors size");
    vectors_t.resize(vectors.size());
    for (size_t j = 0; j < n_vectors; ++j) {
      for (size_t i = 0; i < n_features; ++i) {
        vectors_t[i * n_vectors + j] = vectors[j * n_features + i];
      }
    }
    const size_t s = seg_start.size();
    if (seg_count.size() != s || seg_coef.size() != s) {
      throw std::invalid_argument("segment arrays differ in length");
    }
    for (size_t k = 0; k < s; ++k) {
      if (seg_start[k] < 0 || seg_count[k] < 0 || seg_coef[k] < 0 ||
          static_cast<size_t>(seg_start[k] + seg_count[k]) > n_vectors ||
          static_cast<size_t>(seg_coef[k] + seg_count[k]) > coefs.size()) {
        throw std::invalid_argument("a segment runs out of range");
      }
    }
    const size_t p = bias.size();
    if (out_begin.size() != p + 1 || out_begin[0] != 0 ||
        static_cast<size_t>(out_begin[p]) != s) {
      throw std::invalid_argument("output segments out of range");
    }
    for (size_t k = 0; k < p; ++k) {
      if (out_begin[k] > out_begin[k + 1]) throw std::invalid_argument("output segments order");
    }
    if (n_classes > 0 && p != n_classes * (n_classes - 1) / 2) {
      throw std::invalid_argument("a classifier needs one output per pair of classes");
    }
    if (!prob_a.empty() && (prob_a.size() != p || prob_b.size() != p)) {
      throw std::invalid_argument("prob_a/prob_b need one value per pair");
    }
  }

  // The kernel values of one row x [F] against every support vector: k [V]. Each vector's sum
  // runs over the features in order, the vectors side by side (vectorised), in float (RBF:
  // the squared differences, not onnxruntime's double sum: relative error ~1e-7 on a
  // distance, no cancellation).
  void kernel_row(const float* x, float* k) const {
    const size_t nv = n_vectors;
    svm_accumulate(x, vectors_t.data(), n_features, nv, kind == SvmKernel::kRbf, k);
    if (kind == SvmKernel::kRbf) {
      svm_exp_scaled(static_cast<float>(-gamma), nv, k);
      return;
    }
    if (kind == SvmKernel::kLinear) return;
    for (size_t j = 0; j < nv; ++j) {
      double sum = gamma * k[j] + coef0;
      if (kind == SvmKernel::kSigmoid) {
        sum = std::tanh(sum);
      } else if (degree == 2) {
        sum = sum * sum;
      } else if (degree == 3) {
        sum = sum * sum * sum;
      } else {
        sum = std::pow(sum, degree);
      }
      k[j] = static_cast<float>(sum);
    }
  }

  // Each output's sum (double, of float products, in four interleaved partial sums) from the
  // kernel values k [V]: out [P].
  void outputs_row(const float* k, double* out) const {
    const size_t p = bias.size();
    for (size_t o = 0; o < p; ++o) {
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t s = out_begin[o]; s < out_begin[o + 1]; ++s) {
        const float* c = coefs.data() + seg_coef[s];
        const float* kk = k + seg_start[s];
        const int64_t n = seg_count[s];
        int64_t m = 0;
        for (; m + 4 <= n; m += 4) {
          s0 += c[m] * kk[m];
          s1 += c[m + 1] * kk[m + 1];
          s2 += c[m + 2] * kk[m + 2];
          s3 += c[m + 3] * kk[m + 3];
        }
        for (; m < n; ++m) s0 += c[m] * kk[m];
      }
      out[o] = ((s0 + s1) + (s2 + s3)) + bias[o];
    }
  }

  // onnxruntime's ComputeLogistic (float).
  static float logistic(float v) {
    const float e = std::exp(-std::fabs(v));
    const float r = 1.0f / (1.0f + e);
    return v < 0 ? 1.0f - r : r;
  }

  // libsvm's multiclass_probability as onnxruntime writes it, from the pairs' scores s [P]:
  // p [C]. q is scratch [C * C + C].
  void couple_row(const float* s, float* p, float* q) const {
    const size_t c = n_classes;
    float* qp = q + c * c;
    // r[i][j] (i < j): 1 - logistic(s * a + b), clamped; r[j][i] = 1 - r[i][j]. Q[i][i] sums
    // r[j][i]^2 over j != i, Q[i][j] = -r[j][i] r[i][j] (symmetric).
    std::fill(q, q + c * c, 0.0f);
    size_t pair = 0;
    for (size_t i = 0; i < c; ++i) {
      for (size_t j = i + 1; j < c; ++j, ++pair) {
        float rij = 1.0f - logistic(s[pair] * prob_a[pair] + prob_b[pair]);
        rij = std::min(std::max(rij, 1e-7f), 1.0f - 1e-7f);
        const float rji = 1.0f - rij;
        q[i * c + i] += rji * rji;
        q[j * c + j] += rij * rij;
        q[i * c + j] = q[j * c + i] = -rji * rij;
      }
    }
    const float eps = 0.005f / static_cast<float>(c);
    for (size_t i = 0; i < c; ++i) p[i] = 1.0f / static_cast<float>(c);
    for (int loop = 0; loop < 100; ++loop) {
      float pqp = 0;
      for (size_t i = 0; i < c; ++i) {
        float v = 0;
        for (size_t j = 0; j < c; ++j) v += q[i * c + j] * p[j];
        qp[i] = v;
        pqp += p[i] * v;
      }
      float max_error = 0;
      for (size_t i = 0; i < c; ++i) max_error = std::max(max_error, std::fabs(qp[i] - pqp));
      if (max_error < eps) break;
      for (size_t t = 0; t < c; ++t) {
        const float qtt = q[t * c + t];
        const float diff = (-qp[t] + pqp) / qtt;
        p[t] += diff;
        pqp = (pqp + diff * (diff * qtt + 2 * qp[t])) / (1 + diff) / (1 + diff);
        for (size_t j = 0; j < c; ++j) {
          qp[j] = (qp[j] + diff * q[t * c + j]) / (1 + diff);
          p[j] /= (1 + diff);
        }
      }
    }
  }

  // Rows [r0, r1) of x [rows, F]: scores [rows, n_scores()] and, for a classifier, labels
  // [rows] (the class index the votes elect).
  void run_rows(const float* x, size_t r0, size_t r1, float* scores, int64_t* labels) const {
    const size_t p = n_outputs(), c = n_classes, ns = n_scores();
    std::vector<float> k(n_vectors);
    std::vector<double> out(p);
    std::vector<float> s(p);
    std::vector<float> q(c * c + c);
    std::vector<int64_t> votes(c);
    for (size_t r = r0; r < r1; ++r) {
      kernel_row(x + r * n_features, k.data());
      outputs_row(k.data(), out.data());
      float* sr = scores + r * ns;
      if (c == 0) {
        for (size_t o = 0; o < p; ++o) sr[o] = static_cast<float>(out[o]);
        continue;
      }
      std::fill(votes.begin(), votes.end(), 0);
      size_t pair = 0;
      for (size_t i = 0; i < c; ++i) {
        for (size_t j = i + 1; j < c; ++j, ++pair) ++votes[out[pair] > 0 ? i : j];
      }
      labels[r] = std::max_element(votes.begin(), votes.end()) - votes.begin();
      float* dst = coupling() ? s.data() : sr;
      for (size_t o = 0; o < p; ++o) dst[o] = static_cast<float>(out[o]);
      if (coupling()) couple_row(s.data(), sr, q.data());
    }
  }

  // All rows, in blocks of kBlock on up to `threads` threads (0: all cores).
  static constexpr size_t kBlock = 32;
  void run(const float* x, size_t rows, float* scores, int64_t* labels, size_t threads) const {
    if (rows <= kBlock || threads == 1) {
      run_rows(x, 0, rows, scores, labels);
      return;
    }
    parallel_for((rows + kBlock - 1) / kBlock, threads, [&](size_t b) {
      run_rows(x, b * kBlock, std::min(rows, (b + 1) * kBlock), scores, labels);
    });
  }
};

}  // namespace onnxplex::mlas
