// The sigmoid compiled with AVX2 + FMA.
#include "sigmoid.h"
#include "vacts_x86.h"

namespace onnxplex::mlas {

void sigmoid_f32_avx2(const float* x, float* y, size_t n) { vacts::sigmoid_into(x, y, n); }

}  // namespace onnxplex::mlas
