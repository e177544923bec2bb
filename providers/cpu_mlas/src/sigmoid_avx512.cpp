// The sigmoid compiled with AVX-512 flags (the 8-lane loop of vacts_x86.h).
#include "sigmoid.h"
#include "vacts_x86.h"

namespace onnxplex::mlas {

void sigmoid_f32_avx512(const float* x, float* y, size_t n) { vacts::sigmoid_into(x, y, n); }

}  // namespace onnxplex::mlas
