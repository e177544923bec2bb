// The recurrent loops compiled for AVX-512: the recurrent product on 16-float vectors, the state
// updates vectorized 16 wide by the compiler; the activations are vacts_x86.h's 16-lane ones.
// gcc 12 reports -W(maybe-)uninitialized inside its own AVX-512 headers at -O3 (the
// _mm512_undefined_* pass-through operands, gcc bug 105593): silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "vacts_x86.h"

namespace onnxplex::mlas {

void rnn_seq_f32_avx512(const RnnSeq& s) {
  rnn_detail::rnn_seq<vacts::Acts<vacts::Lanes16>>(s);
}

}  // namespace onnxplex::mlas
