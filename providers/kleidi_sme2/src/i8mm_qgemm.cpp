// i8mm (SMMLA, Armv8.6-A) variants of the dynamic int8 families (3) qsi8cx and (4) qsi4c32.
// Packing kr = 8, sr = 1: per group of 8 k values each row (column) stores its 8 int8 values
// contiguously, so 16 bytes hold a 2x8 operand of SMMLA (rows r, r+1 of the LHS or columns c,
// c+1 of the RHS) and one SMMLA adds a 2x2 int32 tile [r0c0 r0c1 r1c0 r1c1]. Tile 4x8: 2 x 4
// SMMLA accumulators (qsi4c32; qsi8cx: 8x8, 4 x 4). Integer sums are exact; the float reconstruction repeats the reference's
// operations in its order (no contraction), so results are bit-identical to the reference.
// Compiled for aarch64 with -march=armv8.6-a+i8mm.
#include <stdexcept>
#include <string>

#include "arm_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

inline int8x16_t ld8(const int8_t* p) { return vld1q_s8(p); }

constexpr size_t kMr = 4, kNr = 8, kKr = 8;

// Row-major 4x8 float tile from 2x4 SMMLA-layout tiles t[row pair][column pair].
inline void mmla_to_rows(const float32x4_t (&t)[2][4], float* tile) {
  for (size_t rp = 0; rp < 2; ++rp) {
    vst1q_f32(tile + (2 * rp) * kNr, arm::mmla_row0(t[rp][0], t[rp][1]));
    vst1q_f32(tile + (2 * rp) * kNr + 4, arm::mmla_row0(t[rp][2], t[rp][3]));
    vst1q_f32(tile + (2 * rp + 1) * kNr, arm::mmla_row1(t[rp][0], t[rp][1]));
    vst1q_f32(tile + (2 * rp + 1) * kNr + 4, arm::mmla_row1(t[rp][2], t[rp][3]));
  }
}

void store(const float* tile, size_t m, size_t n, size_t i0, size_t j0, float* dst,
           size_t dst_stride_row, size_t dst_stride_col) {
  const size_t rows = m - i0 < kMr ? m - i0 : kMr, cols = n - j0 < kNr ? n - j0 : kNr;
  arm::store_tile(tile, kNr, rows, cols,
                  reinterpret_cast<float*>(reinterpret_cast<char*>(dst) + i0 * dst_stride_row +
                                           j0 * dst_stride_col),
                  dst_stride_row, dst_stride_col);
}

// ---- qai8dx x qsi8cx: 8x8 tile (4 row pairs x 4 column pairs, 16 SMMLA accumulators) ------
// One group of 8 k is 64 bytes of each operand: one 4-register LD1 each, 16 SMMLAs; two groups
// an iteration (the loop's counter and branch amortized), so 16 of every 20 instructions of the
// K loop multiply (the 4x8 tile before: 8 of 14). A full tile stores straight from registers.
struct I8mmQsi8cx {
  static constexpr size_t kM = 8, kN = 8;
  static size_t m_step() { return kM; }
  static size_t n_step() { return kN; }
  static size_t mr() { return kM; }
  static size_t nr() { return kN; }
  static size_t kr() { return kKr; }
  static size_t sr() { return 1; }

  // One group of 8 k for the first RP row pairs (a block of fewer rows - a decoder's single
  // token row - skips the SMMLAs of the padding rows, as the 4x8 tile did).
  template <size_t RP>
  static void group(int32x4_t (&acc)[4][4], const int8_t* a, const int8_t* w) {
    int8x16_t av[4];
    if constexpr (RP == 4) {
      const int8x16x4_t v = vld1q_s8_x4(a);  // row pairs 01, 23, 45, 67
      for (size_t rp = 0; rp < 4; ++rp) av[rp] = v.val[rp];
    } else if constexpr (RP == 2) {
      const int8x16x2_t v = vld1q_s8_x2(a);
      av[0] = v.val[0];
      av[1] = v.val[1];
    } else {
      av[0] = vld1q_s8(a);
    }
    const int8x16x4_t bv = vld1q_s8_x4(w);  // column pairs 01, 23, 45, 67
    for (size_t rp = 0; rp < RP; ++rp)
      for (size_t cp = 0; cp < 4; ++cp) acc[rp][cp] = vmmlaq_s32(acc[rp][cp], av[rp], bv.val[cp]);
  }

  template <size_t RP>
  static void k_loop(int32x4_t (&acc)[4][4], const int8_t* a, const int8_t* w, size_t groups) {
    size_t g = 0;
    for (; g + 2 <= groups; g += 2, a += 2 * kM * kKr, w += 2 * kN * kKr) {
      group<RP>(acc, a, w);
      group<RP>(acc, a + kM * kKr, w + kN * kKr);
    }
    if (g < groups) group<RP>(acc, a, w);
  }

  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    const size_t k_int = layout::q_k_int(k, kKr);
    const size_t groups = k_int / kKr;
    const size_t lhs_block = layout::lhs_qai8dx_block_bytes(k, kM, kKr);
    const size_t rhs_panel = layout::rhs_qsi8cx_panel_bytes(k, kN, kKr);
    const auto* lhs = static_cast<const uint8_t*>(lhs_packed);
    const auto* rhs = static_cast<const uint8_t*>(rhs_packed);
    const float32x4_t lo = vdupq_n_f32(clamp_min), hi = vdupq_n_f32(clamp_max);
    for (size_t i0 = 0; i0 < m; i0 += kM) {
      const uint8_t* lb = lhs + (i0 / kM) * lhs_block;
      const size_t rows = m - i0 < kM ? m - i0 : kM;
      for (size_t j0 = 0; j0 < n; j0 += kN) {
        const uint8_t* pb = rhs + (j0 / kN) * rhs_panel;
        const size_t cols = n - j0 < kN ? n - j0 : kN;
        int32x4_t acc[4][4];
        for (auto& row : acc)
          for (auto& v : row) v = vdupq_n_s32(0);
        const auto* a = reinterpret_cast<const int8_t*>(lb);
        const auto* w = reinterpret_cast<const int8_t*>(pb);
        if (rows > 4) {
          k_loop<4>(acc, a, w, groups);
        } else if (rows > 2) {
          k_loop<2>(acc, a, w, groups);
        } else {
          k_loop<1>(acc, a, w, groups);
        }
        const uint8_t* ltail = lb + kM * k_int;
        const uint8_t* tail = pb + kN * k_int;
        auto* out = reinterpret_cast<char*>(dst) + i0 * dst_stride_row + j0 * dst_stride_col;
        const bool direct = rows == kM && cols == kN && dst_stride_col == sizeof(float);
        float tile[kM * kN];
        for (size_t rp = 0; rp < 4; ++rp) {
          for (size_t h = 0; h < 2; ++h) {  // column half: columns 4h .. 4h + 3
            const int32x4_t r0 = arm::mmla_row0(acc[rp][2 * h], acc[rp][2 * h + 1]);
            const int32x4_t r1 = arm::mmla_row1(acc[rp][2 * h], acc[rp][2 * h + 1]);
            for (size_t e = 0; e < 2; ++e) {
              const size_t r = 2 * rp + e;
              const auto neg_zp = arm::load_scalar<int32_t>(ltail + r * 4);
              const auto s_a = arm::load_scalar<float>(ltail + kM * 4 + r * 4);
              const float32x4_t y =
                  arm::qsi8cx_out(e == 0 ? r0 : r1, neg_zp, s_a, tail + 16 * h,
                                  tail + kN * 4 + 16 * h, tail + kN * 8 + 16 * h, lo, hi);
              vst1q_f32(direct ? reinterpret_cast<float*>(out + r * dst_stride_row) + 4 * h
                               : tile + r * kN + 4 * h,
                        y);
            }
          }
        }
        if (!direct) {
          arm::store_tile(tile, kN, rows, cols, reinterpret_cast<float*>(out), dst_stride_row,
                          dst_stride_col);
        }
      }
    }
  }
};

// ---- qai8dx x qsi4c32 -----------------------------------------------------------------------
// Per 32-block and group of 8 k: 32 bytes of nibbles = 8 columns x 8 values; each 16-byte half
// unpacks to two SMMLA operands (column pairs). Block sums and fp32 accumulators stay in SMMLA
// layout (element-wise operations only) until the epilogue.
struct I8mmQsi4c32 {
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
        float32x4_t facc[2][4];
        for (auto& row : facc)
          for (auto& v : row) v = vdupq_n_f32(0.0f);
        const auto* a = reinterpret_cast<const int8_t*>(lb);
        for (size_t b = 0; b < blocks; ++b) {
          const uint8_t* vals = pb + b * block_bytes;
          int32x4_t isum[2][4];
          for (auto& row : isum)
            for (auto& v : row) v = vdupq_n_s32(0);
          for (size_t g = 0; g < kInt4Block / kKr; ++g, a += kMr * kKr) {
            const int8x16_t a01 = ld8(a), a23 = ld8(a + 16);
            int8x16_t w[4];
            arm::unpack_int4(vals + g * (kNr * kKr / 2), &w[0], &w[1]);
            arm::unpack_int4(vals + g * (kNr * kKr / 2) + 16, &w[2], &w[3]);
            for (size_t cp = 0; cp < 4; ++cp) {
              isum[0][cp] = vmmlaq_s32(isum[0][cp], a01, w[cp]);
              isum[1][cp] = vmmlaq_s32(isum[1][cp], a23, w[cp]);
            }
          }
          const uint8_t* sc = vals + kNr * kInt4Block / 2;
          for (size_t cp = 0; cp < 4; ++cp) {
            // SMMLA layout [c0 c1 c0 c1] for column pair cp.
            const float32x2_t s2 = vreinterpret_f32_u8(vld1_u8(sc + 8 * cp));
            const float32x4_t s = vcombine_f32(s2, s2);
            for (size_t rp = 0; rp < 2; ++rp) {
              facc[rp][cp] = vaddq_f32(facc[rp][cp], vmulq_f32(vcvtq_f32_s32(isum[rp][cp]), s));
            }
          }
        }
        float acc_rows[kMr * kNr];
        mmla_to_rows(facc, acc_rows);
        const uint8_t* ltail = lb + kMr * k_int;
        const uint8_t* tail = pb + blocks * block_bytes;
        float tile[kMr * kNr];
        for (size_t r = 0; r < kMr; ++r) {
          const auto neg_zp = arm::load_scalar<int32_t>(ltail + r * 4);
          const auto s_a = arm::load_scalar<float>(ltail + kMr * 4 + r * 4);
          for (size_t h = 0; h < 2; ++h) {
            vst1q_f32(tile + r * kNr + 4 * h,
                      arm::qsi4c32_out(vld1q_f32(acc_rows + r * kNr + 4 * h), neg_zp, s_a,
                                       tail + 16 * h, tail + kNr * 4 + 16 * h, lo, hi));
          }
        }
        store(tile, m, n, i0, j0, dst, dst_stride_row, dst_stride_col);
      }
    }
  }
};

}  // namespace

const QGemmQsi8cxUkernel qgemm_qsi8cx_i8mm =
    make_qgemm_qsi8cx<I8mmQsi8cx>("qgemm_qai8dx_qsi8cx_i8mm_8x8", Variant::i8mm);
const QGemmQsi4c32Ukernel qgemm_qsi4c32_i8mm =
    make_qgemm_qsi4c32<I8mmQsi4c32>("qgemm_qai8dx_qsi4c32_i8mm_4x8", Variant::i8mm);

}  // namespace onnxplex::kleidi
