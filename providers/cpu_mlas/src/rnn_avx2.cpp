// The recurrent loops with AVX2 + FMA (the activations: rnn_acts_x86.h).
#include "rnn_acts_x86.h"

namespace onnxplex::mlas {

void rnn_seq_f32_avx2(const RnnSeq& s) { rnn_detail::rnn_seq<rnn_x86::Acts>(s); }

}  // namespace onnxplex::mlas
