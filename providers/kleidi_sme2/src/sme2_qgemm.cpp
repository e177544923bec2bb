// SME2 variants of the dynamic int8 families: (3) qai8dx x qsi8cx and (4) qai8dx x qsi4c32,
// fp32 out. (4) is described after the qsi8cx kernel below.
// Same structure as sme2_gemm_f32.cpp (read its header): inline assembly in a TU with the
// default aarch64 flags, every streaming instruction between the SMSTART and SMSTOP of one asm
// statement, RDSVL-based getters, one 2VL x 2VL output tile in the four 32-bit ZA tiles.
//
// Packing kr = 4, sr = 1 (ukernel.h interleaving with depth 4): per group of 4 k values the LHS
// block holds mr rows x 4 int8 contiguously, i.e. 2 vectors whose 32-bit lanes are the 4 k
// values of one row - exactly the operand of the 4-way SMOPA (int8 x int8 -> int32); the RHS
// panel likewise for nr columns. So the K loop is the fp32 one with FMOPA -> SMOPA and
// k_int / 4 steps (k_int = K padded to 32, padding zero). After the loop the LHS and RHS cursors
// stand exactly on the block / panel tails (LHS: mr int32 -zp, mr fp32 s_a; RHS: nr int32 rsum,
// nr fp32 s_w, nr fp32 bias).
//
// Output step, per row of the tile, in streaming SVE (integer ops wrap like the reference's
// uint32; each fp32 op rounds once; the TU is compiled with -ffp-contract=off, though all of it
// is asm anyway):
//   acc += (-zp[m]) * rsum[n]        MLA
//   y = float(acc)                   SCVTF (round to nearest, like static_cast<float>)
//   y = y * (s_a[m] * s_w[n])        FMUL, FMUL (unfused)
//   y = y + bias[n]                  FADD
//   y = lo > y ? lo : y; y = y > hi ? hi : y   FCMGT + SEL (std::max / std::min semantics,
//                                              signed zeros and NaN as ref::clamp)
// i.e. the reference's operations in its order, so results are bit-identical to it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_features.h"
#include "sme2_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

using sme2::svl_words;

constexpr size_t kKr = 4;

// The kernels read sme2::MopaArgs (sme2_common.h); for qsi8cx k_steps = k_int / 4 groups, for
// qsi4c32 k_steps = k / 32 blocks and acc_buf = ZT0's lookup table.
using sme2::MopaArgs;

// Register map (x0 args; x29/x30/sp untouched):
//   x1 LHS block  x2 RHS panel  x3 dst (block row)  x4 rows left  x5 n  x6 k groups
//   x7 row stride x8 col stride x9 LHS block stride  x10 RHS panel stride  x11 VL  x12 ZA slice
//   x13 2VL  x14 cols left  x15 RHS panel (current)  x16 dst (tile)  x17 LHS cursor, then LHS
//   tail (-zp)  x19 RHS cursor, then RHS tail  x20 k left, then s_a  x21 rows in tile
//   x22 cols in tile  x23 row  x24 dst row  x25 j  x26 dst elem  x27 scratch  x28 row_buf.
//   z0-z31 operands in the K loop (z0-z3 one group at a time), then z4-z5 rsum, z8-z9 s_w,
//   z10-z11 bias, z6-z7 row, z12 -zp, z13 s_a, z14-z15 s_a * s_w, z30/z31 clamp bounds
//   (set after the K loop); x26 also the K loop's 32-vector advance; p0 all true, p1/p2
//   column-edge store predicates, p3/p4 clamp compares; pn8 all-true bytes, pn9 all-true
//   words.
//   ZA tiles: za0 rows [0,VL) x cols [0,VL), za1 rows [0,VL) x cols [VL,2VL), za2/za3 the same
//   for rows [VL,2VL).
// Four contiguous rows x23..x23+3 of the tile, in z16-z19 (columns [0,VL)) and z20-z23
// ([VL,2VL)): the row-by-row path's operations in its order, the per-row values (-zp, s_a)
// of the four rows loaded once (LD1RQW) and taken by index (MLA/FMUL z0/z1.s[i]); s_w * s_a
// is the s_a * s_w of that path (IEEE multiplication commutes), the compare-and-select clamp
// is kept (FMAX would turn lo = +0, y = -0 into +0). ~86 instructions for four rows, where the
// row-by-row path takes ~36 a row.
#define KLEIDI_SME2_QSI8CX_STORE4                                                           \
  "add x27, x17, x23, lsl #2\n"                                                             \
  "ld1rqw {z0.s}, p0/z, [x27]\n"                                                            \
  "add x27, x20, x23, lsl #2\n"                                                             \
  "ld1rqw {z1.s}, p0/z, [x27]\n"                                                            \
  "mla z16.s, z4.s, z0.s[0]\n"                                                              \
  "mla z20.s, z5.s, z0.s[0]\n"                                                              \
  "mla z17.s, z4.s, z0.s[1]\n"                                                              \
  "mla z21.s, z5.s, z0.s[1]\n"                                                              \
  "mla z18.s, z4.s, z0.s[2]\n"                                                              \
  "mla z22.s, z5.s, z0.s[2]\n"                                                              \
  "mla z19.s, z4.s, z0.s[3]\n"                                                              \
  "mla z23.s, z5.s, z0.s[3]\n"                                                              \
  "scvtf {z16.s-z19.s}, {z16.s-z19.s}\n"                                                    \
  "scvtf {z20.s-z23.s}, {z20.s-z23.s}\n"                                                    \
  "fmul z24.s, z8.s, z1.s[0]\n"                                                             \
  "fmul z25.s, z9.s, z1.s[0]\n"                                                             \
  "fmul z16.s, z16.s, z24.s\n"                                                              \
  "fmul z20.s, z20.s, z25.s\n"                                                              \
  "fadd z16.s, z16.s, z10.s\n"                                                              \
  "fadd z20.s, z20.s, z11.s\n"                                                              \
  "fmul z24.s, z8.s, z1.s[1]\n"                                                             \
  "fmul z25.s, z9.s, z1.s[1]\n"                                                             \
  "fmul z17.s, z17.s, z24.s\n"                                                              \
  "fmul z21.s, z21.s, z25.s\n"                                                              \
  "fadd z17.s, z17.s, z10.s\n"                                                              \
  "fadd z21.s, z21.s, z11.s\n"                                                              \
  "fmul z24.s, z8.s, z1.s[2]\n"                                                             \
  "fmul z25.s, z9.s, z1.s[2]\n"                                                             \
  "fmul z18.s, z18.s, z24.s\n"                                                              \
  "fmul z22.s, z22.s, z25.s\n"                                                              \
  "fadd z18.s, z18.s, z10.s\n"                                                              \
  "fadd z22.s, z22.s, z11.s\n"                                                              \
  "fmul z24.s, z8.s, z1.s[3]\n"                                                             \
  "fmul z25.s, z9.s, z1.s[3]\n"                                                             \
  "fmul z19.s, z19.s, z24.s\n"                                                              \
  "fmul z23.s, z23.s, z25.s\n"                                                              \
  "fadd z19.s, z19.s, z10.s\n"                                                              \
  "fadd z23.s, z23.s, z11.s\n"                                                              \
  "fcmgt p3.s, p0/z, z30.s, z16.s\n" "sel z16.s, p3, z30.s, z16.s\n"                        \
  "fcmgt p3.s, p0/z, z16.s, z31.s\n" "sel z16.s, p3, z31.s, z16.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z17.s\n" "sel z17.s, p3, z30.s, z17.s\n"                        \
  "fcmgt p3.s, p0/z, z17.s, z31.s\n" "sel z17.s, p3, z31.s, z17.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z18.s\n" "sel z18.s, p3, z30.s, z18.s\n"                        \
  "fcmgt p3.s, p0/z, z18.s, z31.s\n" "sel z18.s, p3, z31.s, z18.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z19.s\n" "sel z19.s, p3, z30.s, z19.s\n"                        \
  "fcmgt p3.s, p0/z, z19.s, z31.s\n" "sel z19.s, p3, z31.s, z19.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z20.s\n" "sel z20.s, p3, z30.s, z20.s\n"                        \
  "fcmgt p3.s, p0/z, z20.s, z31.s\n" "sel z20.s, p3, z31.s, z20.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z21.s\n" "sel z21.s, p3, z30.s, z21.s\n"                        \
  "fcmgt p3.s, p0/z, z21.s, z31.s\n" "sel z21.s, p3, z31.s, z21.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z22.s\n" "sel z22.s, p3, z30.s, z22.s\n"                        \
  "fcmgt p3.s, p0/z, z22.s, z31.s\n" "sel z22.s, p3, z31.s, z22.s\n"                        \
  "fcmgt p3.s, p0/z, z30.s, z23.s\n" "sel z23.s, p3, z30.s, z23.s\n"                        \
  "fcmgt p3.s, p0/z, z23.s, z31.s\n" "sel z23.s, p3, z31.s, z23.s\n"                        \
  "st1w {z16.s}, p1, [x24]\n"                                                               \
  "st1w {z20.s}, p2, [x24, #1, mul vl]\n"                                                   \
  "add x24, x24, x7\n"                                                                      \
  "st1w {z17.s}, p1, [x24]\n"                                                               \
  "st1w {z21.s}, p2, [x24, #1, mul vl]\n"                                                   \
  "add x24, x24, x7\n"                                                                      \
  "st1w {z18.s}, p1, [x24]\n"                                                               \
  "st1w {z22.s}, p2, [x24, #1, mul vl]\n"                                                   \
  "add x24, x24, x7\n"                                                                      \
  "st1w {z19.s}, p1, [x24]\n"                                                               \
  "st1w {z23.s}, p2, [x24, #1, mul vl]\n"                                                   \
  "add x24, x24, x7\n"                                                                      \
  "add w12, w12, #4\n"                                                                      \
  "add x23, x23, #4\n"

__attribute__((noinline)) void sme2_qsi8cx_kernel(const MopaArgs* args) {
  __asm__ volatile(
      ".arch_extension sme2\n"
      "mov x0, %[args]\n"
      "ldp x1, x2, [x0, #0]\n"
      "ldp x3, x4, [x0, #16]\n"
      "ldp x5, x6, [x0, #32]\n"
      "ldp x7, x8, [x0, #48]\n"
      "ldp x9, x10, [x0, #64]\n"
      "ldr x28, [x0, #88]\n"
      "smstart\n"
      "rdsvl x11, #1\n"
      "lsr x11, x11, #2\n"  // x11 = VL (32-bit lanes)
      "add x13, x11, x11\n"
      "ptrue p0.b\n"
      "ptrue pn8.b\n"
      "ptrue pn9.s\n"
      // ---- loop over row blocks
      "10:\n"
      "mov x14, x5\n"
      "mov x15, x2\n"
      "mov x16, x3\n"
      "cmp x4, x13\n"
      "csel x21, x4, x13, lo\n"
      // ---- loop over column panels
      "20:\n"
      "zero {za}\n"
      "mov x17, x1\n"
      "mov x19, x15\n"
      // K: sixteen groups of 4 k an iteration (KLEIDI_SME2_K_STEP16: 84 instructions for 64
      // SMOPAs), then one group at a time; the int32 sums are exact in any order
      "rdvl x26, #16\n"
      "lsl x26, x26, #1\n"  // x26 = 32 vectors: the cursors' advance per 16 groups
      "subs x20, x6, #16\n"
      "b.lt 32f\n"
      "31:\n" KLEIDI_SME2_K_STEP16("ld1b", "smopa", "p0", "b")
      "add x17, x17, x26\n"
      "add x19, x19, x26\n"
      "subs x20, x20, #16\n"
      "b.ge 31b\n"
      "32:\n"
      "adds x20, x20, #16\n"
      "b.eq 40f\n"
      "30:\n"
      "ld1b {z0.b, z1.b}, pn8/z, [x17]\n"
      "ld1b {z2.b, z3.b}, pn8/z, [x19]\n"
      "smopa za0.s, p0/m, p0/m, z0.b, z2.b\n"
      "smopa za1.s, p0/m, p0/m, z0.b, z3.b\n"
      "smopa za2.s, p0/m, p0/m, z1.b, z2.b\n"
      "smopa za3.s, p0/m, p0/m, z1.b, z3.b\n"
      "addvl x17, x17, #2\n"
      "addvl x19, x19, #2\n"
      "subs x20, x20, #1\n"
      "b.ne 30b\n"
      // ---- output step: x17 = LHS tail, x19 = RHS tail
      "40:\n"
      "ldr w27, [x0, #80]\n"  // (the clamp bounds here: the K loop uses z30/z31)
      "dup z30.s, w27\n"
      "ldr w27, [x0, #84]\n"
      "dup z31.s, w27\n"
      "addvl x20, x17, #2\n"  // s_a[0]
      "ld1w {z4.s, z5.s}, pn9/z, [x19]\n"
      "ld1w {z8.s, z9.s}, pn9/z, [x19, #2, mul vl]\n"
      "ld1w {z10.s, z11.s}, pn9/z, [x19, #4, mul vl]\n"
      "whilelt p1.s, xzr, x14\n"
      "whilelt p2.s, x11, x14\n"
      "cmp x14, x13\n"
      "csel x22, x14, x13, lo\n"
      "mov x23, #0\n"
      "mov x24, x16\n"
      "cmp x8, #4\n"
      "b.ne 59f\n"  // strided columns: row by row
      // ---- contiguous rows four at a time, za0/za1 (rows [0,VL)) then za2/za3
      "cmp x21, x11\n"
      "csel x25, x21, x11, lo\n"  // x25 = the tile's rows in za0/za1
      "mov w12, #0\n"
      "60:\n"
      "add x27, x23, #4\n"
      "cmp x27, x25\n"
      "b.hi 61f\n"
      "mova {z16.s-z19.s}, za0h.s[w12, 0:3]\n"
      "mova {z20.s-z23.s}, za1h.s[w12, 0:3]\n"
      KLEIDI_SME2_QSI8CX_STORE4
      "b 60b\n"
      "61:\n"
      "cmp x23, x25\n"  // rows of za0/za1 left (a tile of fewer than VL rows)
      "b.lo 59f\n"
      "mov w12, #0\n"
      "62:\n"
      "add x27, x23, #4\n"
      "cmp x27, x21\n"
      "b.hi 59f\n"
      "mova {z16.s-z19.s}, za2h.s[w12, 0:3]\n"
      "mova {z20.s-z23.s}, za3h.s[w12, 0:3]\n"
      KLEIDI_SME2_QSI8CX_STORE4
      "b 62b\n"
      // ---- the rows left one at a time (fewer than four; every row when strided)
      "59:\n"
      "cmp x23, x21\n"
      "b.hs 56f\n"
      "50:\n"
      "cmp x23, x11\n"
      "b.hs 51f\n"
      "mov w12, w23\n"
      "mova z6.s, p0/m, za0h.s[w12, 0]\n"
      "mova z7.s, p0/m, za1h.s[w12, 0]\n"
      "b 52f\n"
      "51:\n"
      "sub w12, w23, w11\n"
      "mova z6.s, p0/m, za2h.s[w12, 0]\n"
      "mova z7.s, p0/m, za3h.s[w12, 0]\n"
      "52:\n"
      "ldr w27, [x17, x23, lsl #2]\n"
      "dup z12.s, w27\n"
      "mla z6.s, p0/m, z4.s, z12.s\n"
      "mla z7.s, p0/m, z5.s, z12.s\n"
      "scvtf z6.s, p0/m, z6.s\n"
      "scvtf z7.s, p0/m, z7.s\n"
      "ldr w27, [x20, x23, lsl #2]\n"
      "dup z13.s, w27\n"
      "fmul z14.s, z13.s, z8.s\n"
      "fmul z15.s, z13.s, z9.s\n"
      "fmul z6.s, z6.s, z14.s\n"
      "fmul z7.s, z7.s, z15.s\n"
      "fadd z6.s, z6.s, z10.s\n"
      "fadd z7.s, z7.s, z11.s\n"
      "fcmgt p3.s, p0/z, z30.s, z6.s\n"
      "fcmgt p4.s, p0/z, z30.s, z7.s\n"
      "sel z6.s, p3, z30.s, z6.s\n"
      "sel z7.s, p4, z30.s, z7.s\n"
      "fcmgt p3.s, p0/z, z6.s, z31.s\n"
      "fcmgt p4.s, p0/z, z7.s, z31.s\n"
      "sel z6.s, p3, z31.s, z6.s\n"
      "sel z7.s, p4, z31.s, z7.s\n"
      "cmp x8, #4\n"
      "b.ne 53f\n"
      "st1w {z6.s}, p1, [x24]\n"
      "st1w {z7.s}, p2, [x24, #1, mul vl]\n"
      "b 55f\n"
      "53:\n"  // strided columns: through row_buf, then scalar stores
      "st1w {z6.s}, p0, [x28]\n"
      "st1w {z7.s}, p0, [x28, #1, mul vl]\n"
      "mov x25, #0\n"
      "mov x26, x24\n"
      "54:\n"
      "ldr w27, [x28, x25, lsl #2]\n"
      "str w27, [x26]\n"
      "add x26, x26, x8\n"
      "add x25, x25, #1\n"
      "cmp x25, x22\n"
      "b.lo 54b\n"
      "55:\n"
      "add x24, x24, x7\n"
      "add x23, x23, #1\n"
      "cmp x23, x21\n"
      "b.lo 50b\n"
      "56:\n"
      // ---- next column panel
      "add x15, x15, x10\n"
      "mul x27, x13, x8\n"
      "add x16, x16, x27\n"
      "subs x14, x14, x13\n"
      "b.gt 20b\n"
      // ---- next row block
      "add x1, x1, x9\n"
      "mul x27, x13, x7\n"
      "add x3, x3, x27\n"
      "subs x4, x4, x13\n"
      "b.gt 10b\n"
      "smstop\n"
      :
      : [args] "r"(args)
      : "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9",
        "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21",
        "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31");
}

struct Sme2QGemmQsi8cx : sme2::Tile2VL<kKr> {
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    if (m == 0 || n == 0) return;
    const size_t tile = 2 * svl_words();
    float row_buf[128];  // 2 * VL floats; VL <= 64 (SVL <= 2048 bits)
    const MopaArgs a = sme2::mopa_args(
        lhs_packed, rhs_packed, dst, m, n, layout::q_k_int(k, kKr) / kKr, dst_stride_row,
        dst_stride_col, layout::lhs_qai8dx_block_bytes(k, tile, kKr),
        layout::rhs_qsi8cx_panel_bytes(k, tile, kKr), clamp_min, clamp_max, row_buf);
    sme2_qsi8cx_kernel(&a);
  }
};

// ---- qai8dx x qsi4c32 -----------------------------------------------------------------------
// A 1VL x 2VL tile: za0/za1 hold one 32-block's int32 sums (rows [0,VL) x columns [0,VL) and
// [VL,2VL)), za2/za3 the fp32 accumulators of the same rows and columns, so the blocks are
// accumulated inside ZA: per block, after its 16 SMOPAs, four rows at a time are moved out of
// za0/za1 as ZA-array vector groups (MOVA VGx4), converted (multi-vector SCVTF) and multiplied
// by the block's column scales into za2/za3 (FMLA VGx4, one fused rounding), about 2
// instructions per tile row (the previous kernel drained every row of a 2VL x 2VL tile through
// a float buffer in memory each block: ~13 instructions a row, 0.04 of ideal). Packing as
// qsi8cx (kr 4, sr 1), mr = VL, nr = 2VL: per group of 4 k the LHS block has one vector (VL
// rows x 4 int8) and the RHS panel one vector of nibbles (2VL columns x 4 k), which LUTI4
// expands through ZT0 (the 16 signed int4 values) into the two SMOPA operands - columns [0,VL)
// and [VL,2VL), each lane 4 k values of one column - in one instruction (5 before: shifts and
// ZIPs). A ZA-array vector group VGx4 at index x (0 <= x < VL) is the vectors x, x + VL,
// x + 2VL, x + 3VL; with x = 4i + t that is slices i, i + VL/4, i + VL/2, i + 3VL/4 of tile t,
// so offsets 0/1 (za0/za1) and 2/3 (za2/za3) of one group pair the same rows.
//
// Numerics: y = s_a * (acc + float(-zp) * rsum) + bias, then the clamp, as the reference, where
// acc = fma(float(isum_b), scale_b, acc) block after block: the block product is not rounded
// before it is added (the reference rounds it: acc + float(isum_b) * scale_b). Each block then
// differs from the reference's by at most half an ulp of the product, |d| <= 2^-24 |p_b|, so
// |acc - acc_ref| <= 2^-24 * sum_b |isum_b * scale_b| plus the reassociation of those
// differences through the later additions (bounded by 2^-24 * blocks * max |acc|): within the
// kleidi_test bound 1e-5 * s_a * (sum |terms| + |acc| + |zp term|) for K up to 2^24 / 1e5 * 32.
// KleidiAI's own int4 NEON kernels fuse the block accumulation too.
//
// Register map (x0 args): x1 LHS block  x2 RHS panel  x3 dst (block row)  x4 rows left  x5 n
// x6 blocks  x7 row stride  x8 ZA-array vector index  x9 LHS block stride  x10 RHS panel stride
// x11 VL  x12 ZA slice (output)  x13 2VL  x14 cols left  x15 RHS panel (current)
// x16 dst (tile)  x17 LHS cursor, then tail (-zp, s_a)  x19 RHS cursor, then tail (rsum, bias)
// x20 blocks left  x21 rows in tile  x22 cols in tile  x23 row  x24 dst row  x25/x27 scratch
// x26 col stride  x28 row_buf.  z0-z7 LHS groups, z8-z15 packed nibbles, z16-z23 expanded
// columns; in the drain z0-z7 the moved sums, z8/z9 the block's scales; after the K loop
// z4/z5 rsum, z10/z11 bias, z6/z7 a row, z12/z13 -zp / s_a, z14/z15 scratch, z30/z31 clamp.
#define KLEIDI_SME2_Q4_GROUPS4(N0, N1, N2, N3, A0, A1, A2, A3)                                 \
  "luti4 {z16.b-z17.b}, zt0, z" #N0 "[0]\n"                                                  \
  "luti4 {z18.b-z19.b}, zt0, z" #N1 "[0]\n"                                                  \
  "luti4 {z20.b-z21.b}, zt0, z" #N2 "[0]\n"                                                  \
  "luti4 {z22.b-z23.b}, zt0, z" #N3 "[0]\n"                                                  \
  "smopa za0.s, p0/m, p0/m, z" #A0 ".b, z16.b\n"                                             \
  "smopa za1.s, p0/m, p0/m, z" #A0 ".b, z17.b\n"                                             \
  "smopa za0.s, p0/m, p0/m, z" #A1 ".b, z18.b\n"                                             \
  "smopa za1.s, p0/m, p0/m, z" #A1 ".b, z19.b\n"                                             \
  "smopa za0.s, p0/m, p0/m, z" #A2 ".b, z20.b\n"                                             \
  "smopa za1.s, p0/m, p0/m, z" #A2 ".b, z21.b\n"                                             \
  "smopa za0.s, p0/m, p0/m, z" #A3 ".b, z22.b\n"                                             \
  "smopa za1.s, p0/m, p0/m, z" #A3 ".b, z23.b\n"

__attribute__((noinline)) void sme2_qsi4c32_kernel(const MopaArgs* args) {
  __asm__ volatile(
      ".arch_extension sme2\n"
      "mov x0, %[args]\n"
      "ldp x1, x2, [x0, #0]\n"
      "ldp x3, x4, [x0, #16]\n"
      "ldp x5, x6, [x0, #32]\n"
      "ldr x7, [x0, #48]\n"
      "ldr x26, [x0, #56]\n"
      "ldp x9, x10, [x0, #64]\n"
      "ldr x28, [x0, #88]\n"
      "smstart\n"
      "ldr x27, [x0, #96]\n"  // the 16 signed int4 values, one per 32-bit entry
      "ldr zt0, [x27]\n"
      "rdsvl x11, #1\n"
      "lsr x11, x11, #2\n"  // x11 = VL (32-bit lanes)
      "add x13, x11, x11\n"
      "ptrue p0.b\n"
      "ptrue pn8.b\n"
      "ptrue pn9.s\n"
      "ldr w27, [x0, #80]\n"
      "dup z30.s, w27\n"
      "ldr w27, [x0, #84]\n"
      "dup z31.s, w27\n"
      // ---- loop over row blocks of VL rows
      "10:\n"
      "mov x14, x5\n"
      "mov x15, x2\n"
      "mov x16, x3\n"
      "cmp x4, x11\n"
      "csel x21, x4, x11, lo\n"
      // ---- loop over column panels of 2VL columns
      "20:\n"
      "zero {za}\n"  // int32 sums and fp32 accumulators
      "mov x17, x1\n"
      "mov x19, x15\n"
      "mov x20, x6\n"
      "cbz x20, 40f\n"
      "b 32f\n"
      "31:\n"
      "zero {za0.s, za1.s}\n"
      // ---- one 32-block: eight groups of 4 k, 16 SMOPAs
      "32:\n"
      "ld1b {z0.b-z3.b}, pn8/z, [x17]\n"
      "ld1b {z4.b-z7.b}, pn8/z, [x17, #4, mul vl]\n"
      "ld1b {z8.b-z11.b}, pn8/z, [x19]\n"
      "ld1b {z12.b-z15.b}, pn8/z, [x19, #4, mul vl]\n"
      KLEIDI_SME2_Q4_GROUPS4(8, 9, 10, 11, 0, 1, 2, 3)
      KLEIDI_SME2_Q4_GROUPS4(12, 13, 14, 15, 4, 5, 6, 7)
      "ld1w {z8.s-z9.s}, pn9/z, [x19, #8, mul vl]\n"  // the block's 2VL column scales
      "addvl x17, x17, #8\n"
      "addvl x19, x19, #10\n"
      // za2 += float(za0) * scales[0,VL), za3 += float(za1) * scales[VL,2VL), four rows a step
      // (FMLA's single vector must be one of z0-z15)
      // (eight rows a step, the second four at offsets 4-7, when VL >= 8: VL / 4 is then even)
      "mov w8, #0\n"
      "cmp x11, #8\n"
      "b.lo 34f\n"
      "33:\n"
      "mova {z0.d-z3.d}, za.d[w8, 0, vgx4]\n"
      "mova {z4.d-z7.d}, za.d[w8, 1, vgx4]\n"
      "mova {z12.d-z15.d}, za.d[w8, 4, vgx4]\n"
      "mova {z16.d-z19.d}, za.d[w8, 5, vgx4]\n"
      "scvtf {z0.s-z3.s}, {z0.s-z3.s}\n"
      "scvtf {z4.s-z7.s}, {z4.s-z7.s}\n"
      "scvtf {z12.s-z15.s}, {z12.s-z15.s}\n"
      "scvtf {z16.s-z19.s}, {z16.s-z19.s}\n"
      "fmla za.s[w8, 2, vgx4], {z0.s-z3.s}, z8.s\n"
      "fmla za.s[w8, 3, vgx4], {z4.s-z7.s}, z9.s\n"
      "fmla za.s[w8, 6, vgx4], {z12.s-z15.s}, z8.s\n"
      "fmla za.s[w8, 7, vgx4], {z16.s-z19.s}, z9.s\n"
      "add w8, w8, #8\n"
      "cmp x8, x11\n"
      "b.lo 33b\n"
      "b 35f\n"
      "34:\n"  // VL = 4 (SVL 128): one step of four rows
      "mova {z0.d-z3.d}, za.d[w8, 0, vgx4]\n"
      "mova {z4.d-z7.d}, za.d[w8, 1, vgx4]\n"
      "scvtf {z0.s-z3.s}, {z0.s-z3.s}\n"
      "scvtf {z4.s-z7.s}, {z4.s-z7.s}\n"
      "fmla za.s[w8, 2, vgx4], {z0.s-z3.s}, z8.s\n"
      "fmla za.s[w8, 3, vgx4], {z4.s-z7.s}, z9.s\n"
      "35:\n"
      "subs x20, x20, #1\n"
      "b.ne 31b\n"
      // ---- output step: x17 = LHS tail (-zp, then s_a), x19 = RHS tail (rsum, bias)
      "40:\n"
      "ld1w {z4.s, z5.s}, pn9/z, [x19]\n"
      "ld1w {z10.s, z11.s}, pn9/z, [x19, #2, mul vl]\n"
      "addvl x25, x17, #1\n"  // s_a[0]
      "whilelt p1.s, xzr, x14\n"
      "whilelt p2.s, x11, x14\n"
      "cmp x14, x13\n"
      "csel x22, x14, x13, lo\n"
      "mov x23, #0\n"
      "mov w12, #0\n"
      "mov x24, x16\n"
      "50:\n"
      "mova z6.s, p0/m, za2h.s[w12, 0]\n"
      "mova z7.s, p0/m, za3h.s[w12, 0]\n"
      "ldr w27, [x17, x23, lsl #2]\n"
      "dup z12.s, w27\n"
      "scvtf z12.s, p0/m, z12.s\n"
      "fmul z14.s, z12.s, z4.s\n"
      "fmul z15.s, z12.s, z5.s\n"
      "fadd z6.s, z6.s, z14.s\n"
      "fadd z7.s, z7.s, z15.s\n"
      "ldr w27, [x25, x23, lsl #2]\n"
      "dup z13.s, w27\n"
      "fmul z6.s, z13.s, z6.s\n"
      "fmul z7.s, z13.s, z7.s\n"
      "fadd z6.s, z6.s, z10.s\n"
      "fadd z7.s, z7.s, z11.s\n"
      "fcmgt p3.s, p0/z, z30.s, z6.s\n"
      "fcmgt p4.s, p0/z, z30.s, z7.s\n"
      "sel z6.s, p3, z30.s, z6.s\n"
      "sel z7.s, p4, z30.s, z7.s\n"
      "fcmgt p3.s, p0/z, z6.s, z31.s\n"
      "fcmgt p4.s, p0/z, z7.s, z31.s\n"
      "sel z6.s, p3, z31.s, z6.s\n"
      "sel z7.s, p4, z31.s, z7.s\n"
      "cmp x26, #4\n"
      "b.ne 53f\n"
      "st1w {z6.s}, p1, [x24]\n"
      "st1w {z7.s}, p2, [x24, #1, mul vl]\n"
      "b 55f\n"
      "53:\n"  // strided columns: through row_buf, then scalar stores
      "st1w {z6.s}, p0, [x28]\n"
      "st1w {z7.s}, p0, [x28, #1, mul vl]\n"
      "mov x8, #0\n"
      "mov x27, x24\n"
      "54:\n"
      "ldr w20, [x28, x8, lsl #2]\n"
      "str w20, [x27]\n"
      "add x27, x27, x26\n"
      "add x8, x8, #1\n"
      "cmp x8, x22\n"
      "b.lo 54b\n"
      "55:\n"
      "add x24, x24, x7\n"
      "add x23, x23, #1\n"
      "add w12, w12, #1\n"
      "cmp x23, x21\n"
      "b.lo 50b\n"
      // ---- next column panel
      "add x15, x15, x10\n"
      "mul x27, x13, x26\n"
      "add x16, x16, x27\n"
      "subs x14, x14, x13\n"
      "b.gt 20b\n"
      // ---- next row block
      "add x1, x1, x9\n"
      "mul x27, x11, x7\n"
      "add x3, x3, x27\n"
      "subs x4, x4, x11\n"
      "b.gt 10b\n"
      "smstop\n"
      :
      : [args] "r"(args)
      : "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9",
        "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21",
        "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31");
}

// ZT0's table for LUTI4: entry i is the signed int4 value of nibble i (two's complement), in
// the low byte of its 32-bit entry (LUTI4 .b takes the low 8 bits).
alignas(64) constexpr int32_t kInt4Lut[16] = {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1};

// mr = m_step = VL, nr = n_step = 2 VL, kr 4, sr 1.
struct Sme2Tile1x2VL {
  static size_t m_step() { return svl_words(); }
  static size_t n_step() { return 2 * svl_words(); }
  static size_t mr() { return svl_words(); }
  static size_t nr() { return 2 * svl_words(); }
  static size_t kr() { return kKr; }
  static size_t sr() { return 1; }
};

struct Sme2QGemmQsi4c32 : Sme2Tile1x2VL {
  static void run(size_t m, size_t n, size_t k, size_t bl, const void* lhs_packed,
                  const void* rhs_packed, float* dst, size_t dst_stride_row,
                  size_t dst_stride_col, float clamp_min, float clamp_max) {
    if (bl != kInt4Block || k % bl != 0) {
      throw std::invalid_argument("qgemm_qsi4c32: K=" + std::to_string(k) +
                                  " must be a multiple of the block length 32 (bl=" +
                                  std::to_string(bl) + ")");
    }
    if (m == 0 || n == 0) return;
    float row_buf[128];
    MopaArgs a = sme2::mopa_args(lhs_packed, rhs_packed, dst, m, n, k / bl, dst_stride_row,
                                 dst_stride_col, layout::lhs_qai8dx_block_bytes(k, mr(), kKr),
                                 layout::rhs_qsi4c32_panel_bytes(k, nr(), bl), clamp_min,
                                 clamp_max, row_buf);
    a.acc_buf = const_cast<int32_t*>(kInt4Lut);
    sme2_qsi4c32_kernel(&a);
  }
};

}  // namespace

const QGemmQsi8cxUkernel qgemm_qsi8cx_sme2 =
    make_qgemm_qsi8cx<Sme2QGemmQsi8cx>("qgemm_qai8dx_qsi8cx_sme2_2vlx2vl_mopa", Variant::sme2);

const QGemmQsi4c32Ukernel qgemm_qsi4c32_sme2 =
    make_qgemm_qsi4c32<Sme2QGemmQsi4c32>("qgemm_qai8dx_qsi4c32_sme2_2vlx2vl_mopa", Variant::sme2);

}  // namespace onnxplex::kleidi
