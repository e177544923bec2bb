// Shared by the SME2 kernels (aarch64 only). Knows nothing about Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_features.h"

namespace onnxplex::kleidi::sme2 {

// Streaming vector length in 32-bit lanes, read once with RDSVL. Without SME it is 4 (128 bits),
// which keeps the tile getters harmless on CPUs that cannot run an SME2 variant: dispatch never
// runs one there.
inline size_t svl_words() {
  static const size_t words = [] {
    if (!cpu_features().sme) return size_t{4};
    uint64_t bytes;
    __asm__ volatile(".arch_extension sme\n rdsvl %0, #1\n" : "=r"(bytes));
    return static_cast<size_t>(bytes / 4);
  }();
  return words;
}

// The argument block of every SME2 2VL x 2VL kernel (fp32, fp16, int8, int4): the asm loads it
// from one pointer at these fixed offsets.
struct MopaArgs {
  const void* lhs;          // 0: packed LHS block of row 0
  const void* rhs;          // 8: packed RHS panel of column 0
  void* dst;                // 16
  uint64_t m;               // 24 (>= 1)
  uint64_t n;               // 32 (>= 1)
  uint64_t k_steps;         // 40: trip count of the kernel's K loop (may be 0)
  uint64_t dst_stride_row;  // 48 bytes
  uint64_t dst_stride_col;  // 56 bytes (element size = contiguous; else through row_buf)
  uint64_t lhs_block;       // 64 bytes between LHS blocks
  uint64_t rhs_panel;       // 72 bytes between RHS panels
  uint32_t clamp_min;       // 80 (fp32 bits)
  uint32_t clamp_max;       // 84
  void* row_buf;            // 88: 2 * VL elements (<= 128: SVL is at most 2048 bits)
  void* acc_buf;            // 96: kernel-specific (the int4 kernel's LUTI4 table), or null
};
static_assert(offsetof(MopaArgs, row_buf) == 88 && offsetof(MopaArgs, acc_buf) == 96,
              "asm offsets");

inline MopaArgs mopa_args(const void* lhs, const void* rhs, void* dst, size_t m, size_t n,
                          size_t k_steps, size_t dst_stride_row, size_t dst_stride_col,
                          size_t lhs_block, size_t rhs_panel, float clamp_min, float clamp_max,
                          void* row_buf) {
  MopaArgs a{lhs, rhs, dst, m, n, k_steps, dst_stride_row, dst_stride_col, lhs_block, rhs_panel,
             0, 0, row_buf, nullptr};
  std::memcpy(&a.clamp_min, &clamp_min, 4);
  std::memcpy(&a.clamp_max, &clamp_max, 4);
  return a;
}

// The tile getters of a 2VL x 2VL kernel: mr = nr = m_step = n_step = 2 VL; K packed in runs of
// KR (sr = 1).
template <size_t KR>
struct Tile2VL {
  static size_t m_step() { return 2 * svl_words(); }
  static size_t n_step() { return 2 * svl_words(); }
  static size_t mr() { return 2 * svl_words(); }
  static size_t nr() { return 2 * svl_words(); }
  static size_t kr() { return KR; }
  static size_t sr() { return 1; }
};

}  // namespace onnxplex::kleidi::sme2

// ---- the K loop's multi-step bodies, shared by the MOPA kernels (asm fragments) -------------
// Operands as the kernels pack them: per K step, 2 vectors of the LHS block at x17 (rows
// [0,VL) and [VL,2VL)) and 2 of the RHS panel at x19 (columns likewise); the four MOPAs add
// their outer products into za0 (rows [0,VL) x cols [0,VL)), za1, za2, za3.

#define KLEIDI_SME2_MOPA_2X2(MOPA, P, T, A0, A1, B0, B1)                                   \
  MOPA " za0.s, " P "/m, " P "/m, z" #A0 "." T ", z" #B0 "." T "\n"                          \
  MOPA " za1.s, " P "/m, " P "/m, z" #A0 "." T ", z" #B1 "." T "\n"                          \
  MOPA " za2.s, " P "/m, " P "/m, z" #A1 "." T ", z" #B0 "." T "\n"                          \
  MOPA " za3.s, " P "/m, " P "/m, z" #A1 "." T ", z" #B1 "." T "\n"

// Eight K steps of the 2VL x 2VL tile at vector offsets O0-O3 (+4 each) of both cursors: LD
// the multi-vector load ("ld1w", "ld1h") under the
// all-true counter pn8, four of each operand (LHS z0-z15, RHS z16-z31), MOPA the outer product
// into the four 32-bit tiles, P its predicate ("p0", "p3"), T the operands' element suffix
// ("s", "h").
#define KLEIDI_SME2_K_STEP8(LD, MOPA, P, T, O0, O1, O2, O3)                                   \
  LD " {z0." T "-z3." T "}, pn8/z, [x17, #" #O0 ", mul vl]\n"                                \
  LD " {z4." T "-z7." T "}, pn8/z, [x17, #" #O1 ", mul vl]\n"                                \
  LD " {z8." T "-z11." T "}, pn8/z, [x17, #" #O2 ", mul vl]\n"                               \
  LD " {z12." T "-z15." T "}, pn8/z, [x17, #" #O3 ", mul vl]\n"                              \
  LD " {z16." T "-z19." T "}, pn8/z, [x19, #" #O0 ", mul vl]\n"                              \
  LD " {z20." T "-z23." T "}, pn8/z, [x19, #" #O1 ", mul vl]\n"                              \
  LD " {z24." T "-z27." T "}, pn8/z, [x19, #" #O2 ", mul vl]\n"                              \
  LD " {z28." T "-z31." T "}, pn8/z, [x19, #" #O3 ", mul vl]\n"                              \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 0, 1, 16, 17)                                            \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 2, 3, 18, 19)                                            \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 4, 5, 20, 21)                                            \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 6, 7, 22, 23)                                            \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 8, 9, 24, 25)                                            \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 10, 11, 26, 27)                                          \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 12, 13, 28, 29)                                          \
  KLEIDI_SME2_MOPA_2X2(MOPA, P, T, 14, 15, 30, 31)

// Sixteen K steps: eight at vector offsets 0-15 of each cursor, eight at 16-31 (the loads'
// immediates reach 28), the registers reused.
#define KLEIDI_SME2_K_STEP16(LD, MOPA, P, T)                                                  \
  KLEIDI_SME2_K_STEP8(LD, MOPA, P, T, 0, 4, 8, 12)                                          \
  KLEIDI_SME2_K_STEP8(LD, MOPA, P, T, 16, 20, 24, 28)
