// The recurrent loops' variant choice and their portable variant (libm's exp and tanh).
#include "rnn.h"

#include <cmath>

#include "cpu_features.h"
#include "rnn_impl.h"

namespace onnxplex::mlas {

namespace {

struct PortableActs {  // libm's functions, the generic GEMM
  static void sigmoid(float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
  }
  static void tanh(float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
  }
  struct Matrix {  // (read where it is)
    const float* m;
    size_t ld, k, n;
  };
  static Matrix prepare(const float* m, size_t ld, size_t k, size_t n, size_t) {
    return {m, ld, k, n};
  }
  static void gemm(const float* v, size_t ldv, size_t rows, const Matrix& p, float* out,
                   size_t ldo) {
    rnn_detail::gemm_acc(v, ldv, rows, p.k, p.m, p.ld, out, ldo, p.n);
  }
};

}  // namespace

void rnn_seq_f32_portable(const RnnSeq& s) { rnn_detail::rnn_seq<PortableActs>(s); }

void rnn_seq_f32(const RnnSeq& s) { ONNXPLEX_MLAS_BEST_VARIANT(rnn_seq_f32)(s); }

}  // namespace onnxplex::mlas
