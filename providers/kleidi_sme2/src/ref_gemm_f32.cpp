// Portable reference of family (1), fp32 GEMM with bias and clamp. Written against the packed
// layouts with the variant's own (mr, nr, kr, sr) so it checks the layout as much as the math.
// Summation order: k = 0, 1, ..., k-1 from 0.0f, then + bias, then clamp; no FMA contraction.
#include <algorithm>

#include "ref_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

struct RefGemmF32 {
  static size_t m_step() { return 8; }
  static size_t n_step() { return 16; }
  static size_t mr() { return 4; }
  static size_t nr() { return 8; }
  static size_t kr() { return 2; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    ref::f32_tile(m, n, k, mr(), nr(), kr(), sr(), static_cast<const float*>(lhs_packed),
                  static_cast<const float*>(rhs_packed), dst, dst_stride_row, dst_stride_col,
                  clamp_min, clamp_max);
  }
};

}  // namespace

const GemmF32Ukernel gemm_f32_reference =
    make_gemm_f32<RefGemmF32>("gemm_f32_reference_8x16", Variant::reference);

namespace ref {

void f32_tile(size_t m, size_t n, size_t k, size_t mr, size_t nr, size_t kr, size_t sr,
              const float* lhs, const float* rhs, float* dst, size_t dst_stride_row,
              size_t dst_stride_col, float clamp_min, float clamp_max) {
  const size_t k_pad = layout::f32_k_pad(k, kr);
  const size_t depth = kr / sr;
  for (size_t i = 0; i < m; ++i) {
    const float* lblock = lhs + (i / mr) * mr * k_pad;
    const size_t r = i % mr;
    for (size_t j = 0; j < n; ++j) {
      const float* panel = rhs + (j / nr) * nr * (1 + k_pad);
      const size_t c = j % nr;
      float acc = 0.0f;
      for (size_t kk = 0; kk < k; ++kk) {
        acc += lblock[interleaved_index(r, kk, mr, depth)] *
               panel[nr + interleaved_index(c, kk, nr, depth)];
      }
      acc += panel[c];
      store_f32(dst, i, j, dst_stride_row, dst_stride_col, clamp(acc, clamp_min, clamp_max));
    }
  }
}

}  // namespace ref
}  // namespace onnxplex::kleidi
