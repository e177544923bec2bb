// Portable reference of family (2), fp32 indirect matmul (2-D convolution). Once the LHS is
// packed from its indirection table the operands have the fp32 GEMM layouts with
// k = k_chunk_count * round_up(k_chunk_length, kr), zero in the per-chunk padding.
#include "ref_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

struct RefIGemmF32 {
  static size_t m_step() { return 8; }
  static size_t n_step() { return 8; }
  static size_t mr() { return 4; }
  static size_t nr() { return 8; }
  static size_t kr() { return 2; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k_chunk_count, size_t k_chunk_length,
                  const void* lhs_packed, const void* rhs_packed, float* dst,
                  size_t dst_stride_row, float clamp_min, float clamp_max) {
    ref::f32_tile(m, n, layout::imatmul_k(k_chunk_count, k_chunk_length, kr()), mr(), nr(), kr(),
                  sr(), static_cast<const float*>(lhs_packed),
                  static_cast<const float*>(rhs_packed), dst, dst_stride_row, sizeof(float),
                  clamp_min, clamp_max);
  }
};

}  // namespace

const IGemmF32Ukernel igemm_f32_reference =
    make_igemm_f32<RefIGemmF32>("igemm_f32_reference_8x8", Variant::reference);

}  // namespace onnxplex::kleidi
