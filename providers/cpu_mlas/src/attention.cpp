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

// Each thread's scores of one head, [S, T], kept between calls up to this many floats (4 MiB;
// a thread-local buffer that only grows would hold a long context's S x T for the rest of the
// process). A longer head runs in blocks of query rows instead (see attention_blocks).
constexpr size_t kKeptScores = size_t{1} << 20;
thread_local std::vector<float> t_scores;

// A block's scores stay within this many floats (256 KiB, in L2 between the products).
constexpr size_t kBlockScores = size_t{1} << 16;

// One head whose S x T scores exceed kKeptScores, a block of query rows at a time: each
// block's scores, softmax and probs x V while the block is in L2, K^T and V packed once for
// all blocks. (Whole, a 1500-token head's 9 MB of scores were written, read back by the
// softmax and read again by the second product from memory, in a buffer allocated and
// zero-filled per head: Whisper-tiny's encoder attention 1.2x onnxruntime's unfused
// MatMul + Softmax + MatMul.) The same sums in the same order as the whole head's.
void attention_blocks(const AttentionArgs& a, const MatrixView& q, const MatrixView& kt,
                      const MatrixView& v, const float* bias_head, float* y,
                      void (*row)(float*, size_t, float, const float*), SgemmIsa isa) {
  const SgemmEpilogue plain;
  const auto kp = sgemm_pack_b(kt, a.dh, a.t, 1);
  const auto vp = sgemm_pack_b(v, a.t, a.dv, 1);
  const size_t rows = std::max(kSgemmMr, kBlockScores / a.t / kSgemmMr * kSgemmMr);
  static thread_local std::vector<float> block;
  if (block.size() < rows * a.t) block.resize(rows * a.t);
  float* scores = block.data();
  for (size_t i0 = 0; i0 < a.s; i0 += rows) {
    const size_t n = std::min(rows, a.s - i0);
    const MatrixView qb{q.data + static_cast<std::ptrdiff_t>(i0) * q.rs, q.rs, q.cs};
    sgemm(qb, nullptr, MatrixView{}, kp.get(), n, a.t, a.dh, scores, a.t, plain, 1, isa);
    for (size_t i = 0; i < n; ++i) {
      const float* bias = bias_head != nullptr
          ? bias_head + static_cast<std::ptrdiff_t>(i0 + i) * a.bias_ss : nullptr;
      row(scores + i * a.t, a.t, a.scale, bias);
    }
    const MatrixView p{scores, static_cast<std::ptrdiff_t>(a.t), 1};
    sgemm(p, nullptr, MatrixView{}, vp.get(), n, a.dv, a.t, y + i0 * a.h * a.dv, a.h * a.dv,
          plain, 1, isa);
  }
  if (block.size() > kBlockScores * 4) std::vector<float>().swap(block);   // (one long T)
}

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
    const MatrixView q{a.q + sb * a.q_sb + sh * a.q_sh, a.q_ss, 1};
    const MatrixView kt{a.k + sb * a.k_sb + sh * a.k_sh, 1, a.k_st};  // K^T [Dh, T]
    if (a.s * a.t > kKeptScores) {
      attention_blocks(a, q, kt, MatrixView{a.v + sb * a.v_sb + sh * a.v_sh, a.v_st, 1},
                       a.bias != nullptr ? a.bias + sb * a.bias_sb + sh * a.bias_sh : nullptr,
                       y, row, isa);
      return;
    }
    std::vector<float>& buf = t_scores;
    if (buf.size() < a.s * a.t) buf.resize(a.s * a.t);
    float* scores = buf.data();
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
