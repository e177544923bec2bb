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
  static void gemm(const float* v, size_t ldv, size_t rows, size_t k, const float* m, size_t ld,
                   float* out, size_t ldo, size_t n) {
    rnn_detail::gemm_acc(v, ldv, rows, k, m, ld, out, ldo, n);
  }
};

}  // namespace

void rnn_seq_f32_portable(const RnnSeq& s) { rnn_detail::rnn_seq<PortableActs>(s); }

void rnn_seq_f32(const RnnSeq& s) { ONNXPLEX_MLAS_BEST_VARIANT(rnn_seq_f32)(s); }

}  // namespace onnxplex::mlas
