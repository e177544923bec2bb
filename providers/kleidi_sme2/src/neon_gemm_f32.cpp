// NEON (Advanced SIMD FMLA) variant of family (1), fp32 GEMM: 8x12 register tile
// (neon_f32_kernel.h), packed with mr = 8, nr = 12, kr = sr = 1. Compiled for aarch64 only.
#include "neon_f32_kernel.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

struct NeonGemmF32 {
  static size_t m_step() { return neon_f32::kMr; }
  static size_t n_step() { return neon_f32::kNr; }
  static size_t mr() { return neon_f32::kMr; }
  static size_t nr() { return neon_f32::kNr; }
  static size_t kr() { return 1; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    neon_f32::run_8x12(m, n, k, static_cast<const float*>(lhs_packed),
                       static_cast<const float*>(rhs_packed), dst, dst_stride_row, dst_stride_col,
                       clamp_min, clamp_max);
  }
};

}  // namespace

const GemmF32Ukernel gemm_f32_neon =
    make_gemm_f32<NeonGemmF32>("gemm_f32_neon_fmla_8x12", Variant::neon);

}  // namespace onnxplex::kleidi
