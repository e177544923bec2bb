// NEON variant of family (5), fp16 GEMM: FMLA (by element) on 8 fp16 lanes, an 8x24 register
// tile of fp16 accumulators (24 q registers), packed with mr = 8, nr = 24, kr = sr = 1, so per
// k the LHS block holds the 8 rows' values (one q register) and the RHS panel 24 columns' (three).
//
// Built with -march=armv8.2-a+fp16 and run only when the CPU has FEAT_FP16 (dispatch checks
// cpu_features().fp16; Armv8.0 cores such as Cortex-A72 fall to the reference). Everything has
// internal linkage (see arm_common.h).
//
// Numerics (the error bound is in ukernel.h, GemmF16Ukernel): like KleidiAI's and XNNPACK's NEON
// f16 kernels this accumulates in fp16. Per output element: s = +0; s = fp16(s + a_k * b_k) for
// k = 0..K-1, each a fused multiply-add (one rounding); y = fp16(s + bias); y clamped to
// [fp16(clamp_min), fp16(clamp_max)] (round to nearest even throughout; FPCR as Linux sets it:
// no flush to zero). tests/native/kleidi_test.cpp checks it bit for bit against that model.
#include <utility>

#include "arm_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

constexpr size_t kMr = 8, kNr = 24, kVecs = kNr / 8;

using Acc = float16x8_t[kMr][kVecs];

inline float16x8_t load_f16(const f16_bits* p) { return vreinterpretq_f16_u16(vld1q_u16(p)); }

// All 8 lanes hold fp16(v), rounded to nearest even (+-inf beyond the fp16 range).
inline float16x8_t dup_f16(float v) {
  const float16x4_t h = vcvt_f16_f32(vdupq_n_f32(v));
  return vcombine_f16(h, h);
}

// min(max(v, lo), hi) with std::max / std::min semantics, as arm::clamp for fp32.
inline float16x8_t clamp_f16(float16x8_t v, float16x8_t lo, float16x8_t hi) {
  v = vbslq_f16(vcltq_f16(v, lo), lo, v);
  return vbslq_f16(vcltq_f16(hi, v), hi, v);
}

// Row R of the tile += a[R] * (b0 b1 b2); the lane must be a constant, hence the template.
template <int R>
inline void fma_row(Acc& c, float16x8_t a, float16x8_t b0, float16x8_t b1, float16x8_t b2) {
  c[R][0] = vfmaq_laneq_f16(c[R][0], b0, a, R);
  c[R][1] = vfmaq_laneq_f16(c[R][1], b1, a, R);
  c[R][2] = vfmaq_laneq_f16(c[R][2], b2, a, R);
}
template <size_t... R>
inline void fma_rows(Acc& c, float16x8_t a, float16x8_t b0, float16x8_t b1, float16x8_t b2,
                     std::index_sequence<R...>) {
  (fma_row<static_cast<int>(R)>(c, a, b0, b1, b2), ...);
}

void run_8x24(size_t m, size_t n, size_t k, const f16_bits* lhs, const f16_bits* rhs,
              f16_bits* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
              float clamp_max) {
  const float16x8_t lo = dup_f16(clamp_min), hi = dup_f16(clamp_max);
  arm::for_each_tile<kMr, kNr>(
      m, n, k, lhs, rhs, dst, dst_stride_row, dst_stride_col,
      [&](const f16_bits* a, const f16_bits* panel, f16_bits* tile) {
        Acc c;
        for (auto& row : c)
          for (auto& v : row) v = vdupq_n_f16(0);
        const f16_bits* b = panel + kNr;
        for (size_t kk = 0; kk < k; ++kk, a += kMr, b += kNr) {
          fma_rows(c, load_f16(a), load_f16(b), load_f16(b + 8), load_f16(b + 16),
                   std::make_index_sequence<kMr>());
        }
        for (size_t r = 0; r < kMr; ++r) {
          for (size_t v = 0; v < kVecs; ++v) {
            const float16x8_t y = clamp_f16(vaddq_f16(c[r][v], load_f16(panel + 8 * v)), lo, hi);
            vst1q_u16(tile + r * kNr + 8 * v, vreinterpretq_u16_f16(y));
          }
        }
      });
}

struct NeonGemmF16 {
  static size_t m_step() { return kMr; }
  static size_t n_step() { return kNr; }
  static size_t mr() { return kMr; }
  static size_t nr() { return kNr; }
  static size_t kr() { return 1; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  f16_bits* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    run_8x24(m, n, k, static_cast<const f16_bits*>(lhs_packed),
             static_cast<const f16_bits*>(rhs_packed), dst, dst_stride_row, dst_stride_col,
             clamp_min, clamp_max);
  }
};

}  // namespace

const GemmF16Ukernel gemm_f16_neon =
    make_gemm_f16<NeonGemmF16>("gemm_f16_neon_fmla_8x24", Variant::neon);

}  // namespace onnxplex::kleidi
