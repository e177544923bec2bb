// The fp32 NEON micro-kernel shared by the GEMM and indirect-matmul NEON variants (same packed
// layouts): an 8x12 tile of fp32 accumulators (24 q registers) updated with FMLA by element.
// Packing parameters kr = sr = 1, so per k step the LHS block holds 8 consecutive row values and
// the RHS panel 12 consecutive column values. Internal linkage (see arm_common.h).
#pragma once

#include "arm_common.h"
#include "ukernel.h"

namespace onnxplex::kleidi {
namespace {
namespace neon_f32 {

constexpr size_t kMr = 8, kNr = 12;

// dst[i, j] for i < m, j < n; lhs/rhs point at the blocks of row 0 / column 0.
// Per element: fused multiply-add over k = 0..k-1 from 0, then + bias, then clamp.
inline void run_8x12(size_t m, size_t n, size_t k, const float* lhs, const float* rhs,
                     float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                     float clamp_max) {
  const float32x4_t lo = vdupq_n_f32(clamp_min), hi = vdupq_n_f32(clamp_max);
  arm::for_each_tile<kMr, kNr>(
      m, n, k, lhs, rhs, dst, dst_stride_row, dst_stride_col,
      [&](const float* a, const float* panel, float* tile) {
        float32x4_t c00 = vdupq_n_f32(0), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00,
                    c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00,
                    c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00,
                    c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
        const float* b = panel + kNr;
        for (size_t kk = 0; kk < k; ++kk, a += kMr, b += kNr) {
          const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
          const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
#define KLEIDI_NEON_ROW(r, av, lane)                  \
  c##r##0 = vfmaq_laneq_f32(c##r##0, b0, av, lane); \
  c##r##1 = vfmaq_laneq_f32(c##r##1, b1, av, lane); \
  c##r##2 = vfmaq_laneq_f32(c##r##2, b2, av, lane);
          KLEIDI_NEON_ROW(0, a0, 0)
          KLEIDI_NEON_ROW(1, a0, 1)
          KLEIDI_NEON_ROW(2, a0, 2)
          KLEIDI_NEON_ROW(3, a0, 3)
          KLEIDI_NEON_ROW(4, a1, 0)
          KLEIDI_NEON_ROW(5, a1, 1)
          KLEIDI_NEON_ROW(6, a1, 2)
          KLEIDI_NEON_ROW(7, a1, 3)
#undef KLEIDI_NEON_ROW
        }
        const float32x4_t bias0 = vld1q_f32(panel), bias1 = vld1q_f32(panel + 4),
                          bias2 = vld1q_f32(panel + 8);
#define KLEIDI_NEON_OUT(r)                                                       \
  vst1q_f32(tile + (r)*kNr + 0, arm::clamp(vaddq_f32(c##r##0, bias0), lo, hi)); \
  vst1q_f32(tile + (r)*kNr + 4, arm::clamp(vaddq_f32(c##r##1, bias1), lo, hi)); \
  vst1q_f32(tile + (r)*kNr + 8, arm::clamp(vaddq_f32(c##r##2, bias2), lo, hi));
        KLEIDI_NEON_OUT(0)
        KLEIDI_NEON_OUT(1)
        KLEIDI_NEON_OUT(2)
        KLEIDI_NEON_OUT(3)
        KLEIDI_NEON_OUT(4)
        KLEIDI_NEON_OUT(5)
        KLEIDI_NEON_OUT(6)
        KLEIDI_NEON_OUT(7)
#undef KLEIDI_NEON_OUT
      });
}

}  // namespace neon_f32
}  // namespace
}  // namespace onnxplex::kleidi
