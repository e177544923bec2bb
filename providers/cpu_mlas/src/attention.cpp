// The attention driver: a task per batch and head on the native pool, the two products on the
// float GEMM, the softmax's variant chosen for the CPU; the portable softmax row.
#include "attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu_features.h"
#include "parallel.h"
#include "sgemm.h"
#include "softmax.h"

namespace onnxplex::mlas {

namespace {

// Each thread's scores of one head, [S, T], kept between calls up to this many floats (4 MiB);
// a longer sequence's are allocated per head and freed (a thread-local buffer that only grows
// would hold a long context's S x T for the rest of the process).
constexpr size_t kKeptScores = size_t{1} << 20;
thread_local std::vector<float> t_scores;

}  // namespace

void softmax_row_portable(float* x, size_t n, float scale, const float* bias) {
  detail::softmax_row_scalar(x, n, scale, bias);
}

void softmax_rows_portable(const float* x, float* y, size_t rows, size_t cols, bool log) {
  softmax_rows_f32(x, y, rows, cols, log);
}

void softmax_rows(const float* x, float* y, size_t rows, size_t cols, bool log) {
  ONNXPLEX_MLAS_BEST_VARIANT(softmax_rows)(x, y, rows, cols, log);
}

void attention_f32(const AttentionArgs& a, size_t threads) {
  if (a.b == 0 || a.h == 0 || a.s == 0 || a.dv == 0) return;
  const auto row = ONNXPLEX_MLAS_BEST_VARIANT(softmax_row);
  const SgemmIsa isa = sgemm_best_isa();
  const SgemmEpilogue plain;
  parallel_for(a.b * a.h, threads, [&](size_t task) {
    const size_t bi = task / a.h, hi = task % a.h;
    const auto sb = static_cast<std::ptrdiff_t>(bi), sh = static_cast<std::ptrdiff_t>(hi);
    float* y = a.y + (bi * a.s * a.h + hi) * a.dv;  // row i at y + i * H * Dv
    if (a.t == 0) {  // no keys: a softmax over nothing, NaN as numpy's 0 / 0
      for (size_t i = 0; i < a.s; ++i) {
        std::fill(y + i * a.h * a.dv, y + i * a.h * a.dv + a.dv,
                  std::numeric_limits<float>::quiet_NaN());
      }
      return;
    }
    std::vector<float> own;
    std::vector<float>& buf = a.s * a.t <= kKeptScores ? t_scores : own;
    if (buf.size() < a.s * a.t) buf.resize(a.s * a.t);
    float* scores = buf.data();
    const MatrixView q{a.q + sb * a.q_sb + sh * a.q_sh, a.q_ss, 1};
    const MatrixView kt{a.k + sb * a.k_sb + sh * a.k_sh, 1, a.k_st};  // K^T [Dh, T]
    sgemm(q, nullptr, kt, nullptr, a.s, a.t, a.dh, scores, a.t, plain, 1, isa);
    for (size_t i = 0; i < a.s; ++i) {
      const float* bias = a.bias != nullptr
          ? a.bias + sb * a.bias_sb + sh * a.bias_sh + static_cast<std::ptrdiff_t>(i) * a.bias_ss
          : nullptr;
      row(scores + i * a.t, a.t, a.scale, bias);
    }
    const MatrixView p{scores, static_cast<std::ptrdiff_t>(a.t), 1};
    const MatrixView v{a.v + sb * a.v_sb + sh * a.v_sh, a.v_st, 1};
    sgemm(p, nullptr, v, nullptr, a.s, a.dv, a.t, y, a.h * a.dv, plain, 1, isa);
  });
}

}  // namespace onnxplex::mlas
