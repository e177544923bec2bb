// The recurrent loops compiled for AVX-512 (the GEMV and the state updates vectorize 16 wide);
// the activations are vacts_x86.h's 8-lane ones.
#include "vacts_x86.h"

namespace onnxplex::mlas {

void rnn_seq_f32_avx512(const RnnSeq& s) { rnn_detail::rnn_seq<vacts::Acts>(s); }

}  // namespace onnxplex::mlas
