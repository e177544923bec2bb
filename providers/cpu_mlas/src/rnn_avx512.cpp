// The recurrent loops compiled for AVX-512: the recurrent product on 16-float vectors, the state
// updates vectorized 16 wide by the compiler; the activations are vacts_x86.h's 8-lane ones.
#include "vacts_x86.h"

namespace onnxplex::mlas {

void rnn_seq_f32_avx512(const RnnSeq& s) {
  rnn_detail::rnn_seq<vacts::Acts<vacts::Lanes16>>(s);
}

}  // namespace onnxplex::mlas
