// dotprod (SDOT, Armv8.2-A) variants of the dynamic int8 families (3) qsi8cx and (4) qsi4c32.
// Packing kr = 4, sr = 1: per group of 4 k values each row (column) stores its 4 int8 values
// contiguously, so one 16-byte LHS load holds 4 rows and one 16-byte RHS load 4 columns; SDOT by
// element (lane = row) accumulates 4x4 int32 at a time. Integer sums are exact; the float
// reconstruction repeats the reference's operations in its order (no contraction), so results
// are bit-identical to the reference. Compiled for aarch64 with -march=armv8.2-a+dotprod.
#include <stdexcept>
#include <string>

#include "arm_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

inline int8x16_t ld8(const int8_t* p) { return vld1q_s8(p); }
inline float32x4_t ldf(const uint8_t* p) { return vreinterpretq_f32_u8(vld1q_u8(p)); }

// ---- qai8dx x qsi8cx: 4x16 tile (16 int32 accumulators) --------------------------------------
struct DotprodQsi8cx {
  static constexpr size_t kMr = 4, kNr = 16, kKr = 4;
  static size_t m_step() { return kMr; }
  static size_t n_step() { return kNr; }
  static size_t mr() { return kMr; }
  static size_t nr() { return kNr; }
  static size_t kr() { return kKr; }
  static size_t sr() { return 1; }
  // One group of 4 k: the 4 rows' values in av (lane = row), 16 columns' at w (one 4-register
  // LD1), 16 SDOTs by element.
  static void group(int32x4_t (&acc)[kMr][4], int8x16_t av, const int8_t* w) {
    const int8x16x4_t b = vld1q_s8_x4(w);
#define KLEIDI_SDOT_ROW(r)                                  \
  acc[r][0] = vdotq_laneq_s32(acc[r][0], b.val[0], av, r); \
  acc[r][1] = vdotq_laneq_s32(acc[r][1], b.val[1], av, r); \
  acc[r][2] = vdotq_laneq_s32(acc[r][2], b.val[2], av, r); \
  acc[r][3] = vdotq_laneq_s32(acc[r][3], b.val[3], av, r);
    KLEIDI_SDOT_ROW(0)
    KLEIDI_SDOT_ROW(1)
    KLEIDI_SDOT_ROW(2)
    KLEIDI_SDOT_ROW(3)
#undef KLEIDI_SDOT_ROW
  }

  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    const size_t k_int = layout::q_k_int(k, kKr);
    const size_t lhs_block = layout::lhs_qai8dx_block_bytes(k, kMr, kKr);
    const size_t rhs_panel = layout::rhs_qsi8cx_panel_bytes(k, kNr, kKr);
    const auto* lhs = static_cast<const uint8_t*>(lhs_packed);
    const auto* rhs = static_cast<const uint8_t*>(rhs_packed);
    const float32x4_t lo = vdupq_n_f32(clamp_min), hi = vdupq_n_f32(clamp_max);
    for (size_t i0 = 0; i0 < m; i0 += kMr) {
      const uint8_t* lb = lhs + (i0 / kMr) * lhs_block;
      for (size_t j0 = 0; j0 < n; j0 += kNr) {
        const uint8_t* pb = rhs + (j0 / kNr) * rhs_panel;
        int32x4_t acc[kMr][4];
        for (auto& row : acc)
          for (auto& v : row) v = vdupq_n_s32(0);
        const auto* a = reinterpret_cast<const int8_t*>(lb);
        const auto* w = reinterpret_cast<const int8_t*>(pb);
        // two groups of 4 k an iteration: one 2-register LD1 of the LHS (32 bytes), one
        // 4-register LD1 of the RHS per group, 32 SDOTs
        const size_t groups = k_int / kKr;
        size_t g = 0;
        for (; g + 2 <= groups; g += 2, a += 2 * kMr * kKr, w += 2 * kNr * kKr) {
          const int8x16x2_t av = vld1q_s8_x2(a);
          group(acc, av.val[0], w);
          group(acc, av.val[1], w + kNr * kKr);
        }
        if (g < groups) group(acc, ld8(a), w);
        const uint8_t* ltail = lb + kMr * k_int;
        const uint8_t* tail = pb + kNr * k_int;
        float tile[kMr * kNr];
        for (size_t r = 0; r < kMr; ++r) {
          const auto neg_zp = arm::load_scalar<int32_t>(ltail + r * 4);
          const auto s_a = arm::load_scalar<float>(ltail + kMr * 4 + r * 4);
          for (size_t q = 0; q < 4; ++q) {
            vst1q_f32(tile + r * kNr + 4 * q,
                      arm::qsi8cx_out(acc[r][q], neg_zp, s_a, tail + 16 * q,
                                      tail + kNr * 4 + 16 * q, tail + kNr * 8 + 16 * q, lo, hi));
          }
        }
        const size_t rows = m - i0 < kMr ? m - i0 : kMr, cols = n - j0 < kNr ? n - j0 : kNr;
        arm::store_tile(tile, kNr, rows, cols,
                        reinterpret_cast<float*>(reinterpret_cast<char*>(dst) +
                                                 i0 * dst_stride_row + j0 * dst_stride_col),
                        dst_stride_row, dst_stride_col);
      }
    }
  }
};

// ---- qai8dx x qsi4c32: 4x8 tile (8 int32 block sums + 8 fp32 accumulators) ------------------
// Per 32-block and group of 4 k: 16 bytes of nibbles = 8 columns x 4 values, unpacked to two
// int8 registers of 4 columns each.
struct DotprodQsi4c32 {
  static constexpr size_t kMr = 4, kNr = 8, kKr = 4;
  static size_t m_step() { return kMr; }
  static size_t n_step() { return kNr; }
  static size_t mr() { return kMr; }
  static size_t nr() { return kNr; }
  static size_t kr() { return kKr; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k, size_t bl, const void* lhs_packed,
                  const void* rhs_packed, float* dst, size_t dst_stride_row,
                  size_t dst_stride_col, float clamp_min, float clamp_max) {
    if (bl != kInt4Block || k == 0 || k % bl != 0) {
      throw std::invalid_argument("qgemm_qsi4c32: K=" + std::to_string(k) +
                                  " must be a multiple of the block length 32 (bl=" +
                                  std::to_string(bl) + ")");
    }
    const size_t k_int = layout::q_k_int(k, kKr);  // == k
    const size_t blocks = k / bl;
    const size_t lhs_block = layout::lhs_qai8dx_block_bytes(k, kMr, kKr);
    const size_t rhs_panel = layout::rhs_qsi4c32_panel_bytes(k, kNr, bl);
    const size_t block_bytes = layout::rhs_qsi4c32_block_bytes(kNr, bl);
    const auto* lhs = static_cast<const uint8_t*>(lhs_packed);
    const auto* rhs = static_cast<const uint8_t*>(rhs_packed);
    const float32x4_t lo = vdupq_n_f32(clamp_min), hi = vdupq_n_f32(clamp_max);
    for (size_t i0 = 0; i0 < m; i0 += kMr) {
      const uint8_t* lb = lhs + (i0 / kMr) * lhs_block;
      for (size_t j0 = 0; j0 < n; j0 += kNr) {
        const uint8_t* pb = rhs + (j0 / kNr) * rhs_panel;
        float32x4_t facc[kMr][2];
        for (auto& row : facc)
          for (auto& v : row) v = vdupq_n_f32(0.0f);
        const auto* a = reinterpret_cast<const int8_t*>(lb);
        for (size_t b = 0; b < blocks; ++b) {
          const uint8_t* vals = pb + b * block_bytes;
          int32x4_t isum[kMr][2];
          for (auto& row : isum)
            for (auto& v : row) v = vdupq_n_s32(0);
          for (size_t g = 0; g < kInt4Block / kKr; ++g, a += kMr * kKr) {
            const int8x16_t av = ld8(a);
            int8x16_t b0, b1;
            arm::unpack_int4(vals + g * (kNr * kKr / 2), &b0, &b1);
#define KLEIDI_SDOT_ROW(r)                             \
  isum[r][0] = vdotq_laneq_s32(isum[r][0], b0, av, r); \
  isum[r][1] = vdotq_laneq_s32(isum[r][1], b1, av, r);
            KLEIDI_SDOT_ROW(0)
            KLEIDI_SDOT_ROW(1)
            KLEIDI_SDOT_ROW(2)
            KLEIDI_SDOT_ROW(3)
#undef KLEIDI_SDOT_ROW
          }
          const uint8_t* sc = vals + kNr * kInt4Block / 2;
          const float32x4_t s0 = ldf(sc), s1 = ldf(sc + 16);
          for (size_t r = 0; r < kMr; ++r) {
            facc[r][0] = vaddq_f32(facc[r][0], vmulq_f32(vcvtq_f32_s32(isum[r][0]), s0));
            facc[r][1] = vaddq_f32(facc[r][1], vmulq_f32(vcvtq_f32_s32(isum[r][1]), s1));
          }
        }
        const uint8_t* ltail = lb + kMr * k_int;
        const uint8_t* tail = pb + blocks * block_bytes;
        float tile[kMr * kNr];
        for (size_t r = 0; r < kMr; ++r) {
          const auto neg_zp = arm::load_scalar<int32_t>(ltail + r * 4);
          const auto s_a = arm::load_scalar<float>(ltail + kMr * 4 + r * 4);
          for (size_t q = 0; q < 2; ++q) {
            vst1q_f32(tile + r * kNr + 4 * q,
                      arm::qsi4c32_out(facc[r][q], neg_zp, s_a, tail + 16 * q,
                                       tail + kNr * 4 + 16 * q, lo, hi));
          }
        }
        const size_t rows = m - i0 < kMr ? m - i0 : kMr, cols = n - j0 < kNr ? n - j0 : kNr;
        arm::store_tile(tile, kNr, rows, cols,
                        reinterpret_cast<float*>(reinterpret_cast<char*>(dst) +
                                                 i0 * dst_stride_row + j0 * dst_stride_col),
                        dst_stride_row, dst_stride_col);
      }
    }
  }
};

}  // namespace

const QGemmQsi8cxUkernel qgemm_qsi8cx_dotprod =
    make_qgemm_qsi8cx<DotprodQsi8cx>("qgemm_qai8dx_qsi8cx_dotprod_4x16", Variant::dotprod);
const QGemmQsi4c32Ukernel qgemm_qsi4c32_dotprod =
    make_qgemm_qsi4c32<DotprodQsi4c32>("qgemm_qai8dx_qsi4c32_dotprod_4x8", Variant::dotprod);

}  // namespace onnxplex::kleidi
