// NEON (Advanced SIMD FMLA) variant of family (2), fp32 indirect matmul: once packed, the
// operands have the fp32 GEMM layouts with k = k_chunk_count * k_chunk_length (kr = 1: no
// per-chunk padding), so the 8x12 GEMM tile of neon_f32_kernel.h runs unchanged.
#include "neon_f32_kernel.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

struct NeonIGemmF32 {
  static size_t m_step() { return neon_f32::kMr; }
  static size_t n_step() { return neon_f32::kNr; }
  static size_t mr() { return neon_f32::kMr; }
  static size_t nr() { return neon_f32::kNr; }
  static size_t kr() { return 1; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k_chunk_count, size_t k_chunk_length,
                  const void* lhs_packed, const void* rhs_packed, float* dst,
                  size_t dst_stride_row, float clamp_min, float clamp_max) {
    neon_f32::run_8x12(m, n, layout::imatmul_k(k_chunk_count, k_chunk_length, kr()),
                       static_cast<const float*>(lhs_packed),
                       static_cast<const float*>(rhs_packed), dst, dst_stride_row,
                       sizeof(float), clamp_min, clamp_max);
  }
};

}  // namespace

const IGemmF32Ukernel igemm_f32_neon =
    make_igemm_f32<NeonIGemmF32>("igemm_f32_neon_fmla_8x12", Variant::neon);

}  // namespace onnxplex::kleidi
