// The recurrent loops with AVX2 + FMA (the activations: vacts_x86.h).
#include "vacts_x86.h"

namespace onnxplex::mlas {

void rnn_seq_f32_avx2(const RnnSeq& s) {
  rnn_detail::rnn_seq<vacts::Acts<vacts::Lanes8>>(s);
}

}  // namespace onnxplex::mlas
