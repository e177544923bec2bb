// Float32 layer normalization over the rows of a matrix, for LayerNormalization,
// SkipLayerNormalization and their simplified (RMS) forms. Knows nothing about Python.
//
// Per row of d values: s = x + skip + bias (each optional; added in that order, rounding to
// float32 after each add as numpy does), then
//   LayerNorm: y = ((s - mean) * inv) * gamma + beta,  inv = 1 / sqrt(var + eps);
//   RMS:       y = (s * inv) * gamma,                   inv = 1 / sqrt(mean(s^2) + eps).
// Mean and variance are summed in double (16 fixed lanes, then a fixed pairwise order: every
// variant and thread count gives the same bits), two passes for the variance; the output's
// float arithmetic is numpy's order without fused multiply-adds.
#pragma once

#include <cstddef>

namespace onnxplex::mlas {

struct LayerNormArgs {
  const float* x;      // [rows, d]
  const float* skip;   // [skip_rows, d], row r uses r % skip_rows; or null
  size_t skip_rows;
  const float* bias;   // [d] or null
  const float* gamma;  // [d]
  const float* beta;   // [d] or null (always null for RMS)
  float* y;            // [rows, d]; may be x
  float* sum;          // [rows, d] receives s; or null
  float* mean;         // [rows] or null (RMS: not written)
  float* inv;          // [rows] or null
  size_t rows, d;
  float eps;
  bool rms;
};

// threads 0 = all.
void layer_norm_f32(const LayerNormArgs& a, size_t threads);

// The variants, on rows [r0, r1) (call through layer_norm_f32 only).
void layer_norm_rows_portable(const LayerNormArgs& a, size_t r0, size_t r1);
void layer_norm_rows_avx2(const LayerNormArgs& a, size_t r0, size_t r1);
void layer_norm_rows_avx512(const LayerNormArgs& a, size_t r0, size_t r1);

}  // namespace onnxplex::mlas
