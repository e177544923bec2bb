// Portable reference of family (1), fp32 GEMM with bias and clamp. Written against the packed
// layouts with the variant's own (mr, nr, kr, sr) so it checks the layout as much as the math.
// Summation order: k = 0, 1, ..., k-1 from 0.0f, then + bias, then clamp; no FMA contraction.
#include "ref_common.h"
#include "variants.h"

namespace onnxplex::kleidi {

const GemmF32Ukernel gemm_f32_reference =
    make_gemm_f32<ref::PlainGemmRef<float>>("gemm_f32_reference_8x16", Variant::reference);

namespace ref {

void f32_tile(size_t m, size_t n, size_t k, size_t mr, size_t nr, size_t kr, size_t sr,
              const float* lhs, const float* rhs, float* dst, size_t dst_stride_row,
              size_t dst_stride_col, float clamp_min, float clamp_max) {
  plain_tile(m, n, k, mr, nr, kr, sr, lhs, rhs, dst, dst_stride_row, dst_stride_col, clamp_min,
             clamp_max);
}

}  // namespace ref
}  // namespace onnxplex::kleidi
