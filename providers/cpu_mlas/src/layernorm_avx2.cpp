// Layer normalization, compiled with AVX2 and FMA (call through layer_norm_f32 only).
#include "layernorm_impl.h"

namespace onnxplex::mlas {

void layer_norm_rows_avx2(const LayerNormArgs& a, size_t r0, size_t r1) {
  detail::layer_norm_rows_any(a, r0, r1);
}

}  // namespace onnxplex::mlas
