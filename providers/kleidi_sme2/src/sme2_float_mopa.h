// The 2VL x 2VL floating-point MOPA kernel shared by the SME2 fp32 GEMM / indirect matmul
// (sme2_gemm_f32.cpp: FMOPA fp32) and the SME2 fp16 GEMM (sme2_gemm_f16.cpp: widening FMOPA,
// fp16 pairs into fp32). aarch64 only; included by TUs built with the default flags (see
// sme2_gemm_f32.cpp's header for why: no compiler-generated SME code, no SME ABI routines).
//
// Both accumulate a 2VL x 2VL output tile (VL = streaming vector length in fp32 lanes) in the
// four 32-bit ZA tiles and share everything but the element type: the loop over row blocks and
// column panels, ZA zeroing, the K loop's cursors, and per output row the bias add, the clamp
// and the predicated (M/N edge) or strided stores. The element-specific pieces are asm
// fragments given to KLEIDI_SME2_FLOAT_MOPA_ASM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sme2_common.h"
#include "ukernel.h"

namespace onnxplex::kleidi::sme2 {

// dst[0:m, 0:n] for packed operands (layout::lhs_plain / rhs_plain with elem = sizeof(T), mr =
// nr = 2 VL, kr = KR) through `kernel`.
template <size_t KR, class T>
void run_float_mopa(void (*kernel)(const MopaArgs*), size_t m, size_t n, size_t k,
                    const void* lhs_packed, const void* rhs_packed, T* dst,
                    size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                    float clamp_max) {
  if (m == 0 || n == 0) return;
  const size_t tile = 2 * svl_words();
  T row_buf[128];  // 2 * VL elements; VL <= 64 (SVL <= 2048 bits)
  const MopaArgs a = mopa_args(lhs_packed, rhs_packed, dst, m, n, div_up(k, KR), dst_stride_row,
                               dst_stride_col,
                               layout::lhs_plain_block_bytes(k, tile, KR, sizeof(T)),
                               layout::rhs_plain_panel_bytes(k, tile, KR, sizeof(T)), clamp_min,
                               clamp_max, row_buf);
  kernel(&a);
}

// The plain GEMM variant over one such kernel: traits for make_plain_gemm (ukernel.h).
template <size_t KR, class T, void (*Kernel)(const MopaArgs*)>
struct PlainGemm2VL : Tile2VL<KR> {
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  T* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    run_float_mopa<KR>(Kernel, m, n, k, lhs_packed, rhs_packed, dst, dst_stride_row,
                       dst_stride_col, clamp_min, clamp_max);
  }
};

}  // namespace onnxplex::kleidi::sme2

// The asm body (use with `: : [args] "r"(args) : KLEIDI_SME2_FLOAT_MOPA_CLOBBERS`, args a
// const sme2::MopaArgs*).
// Register map (x0 args; x29/x30/sp untouched):
//   x1 LHS block  x2 RHS panel  x3 dst (block row)  x4 rows left  x5 n  x6 K steps
//   x7 row stride x8 col stride x9 LHS block stride  x10 RHS panel stride  x11 VL  x12 ZA slice
//   x13 2VL  x14 cols left  x15 RHS panel (current)  x16 dst (tile)  x17 LHS cursor
//   x19 RHS cursor  x20 k left  x21 rows in tile  x22 cols in tile  x23 row  x24 dst row  x25 j
//   x26 32 vectors' bytes (K loop), dst elem (strided store)  x27 scratch  x28 row_buf.
//   p0 all-true .s; z0-z31 operands in the K loop (z0-z3 in K_STEP), then z0/z1 clamp bounds
//   and z16-z23 rows (four-row store), z2 ones, z4-z5 bias (fp32), z6-z7 row, z30/z31 clamp
//   bounds (fp32); ZA tiles: za0 rows [0,VL) x cols [0,VL), za1 rows [0,VL) x cols [VL,2VL),
//   za2/za3 the same for rows [VL,2VL).
// Fragments:
//   SETUP       predicates the K step needs (p0.s is all-true already)
//   WEIGHTS     "addvl x19, x15, #N\n": the RHS cursor past the panel's 2VL bias elements
//   K_STEP      one K step: z0/z1 = LHS rows [0,VL)/[VL,2VL) from [x17], z2/z3 = RHS columns
//               from [x19], the four MOPAs; each cursor then advances by 2 vectors
//   K_STEP16    sixteen K steps (KLEIDI_SME2_K_STEP16): eight 4-vector loads of each
//               operand (z0-z15 LHS, z16-z31 RHS, twice) and their 64 MOPAs, in K order (the
//               sums are those of sixteen K_STEPs, bit for bit); each cursor then advances
//               by 32 vectors (x26). The K loop runs these while sixteen or more steps are
//               left, then K_STEP: 84 instructions for 64 MOPAs instead of 10 for 4 (loads,
//               cursor updates and the loop branch were 6 of every 10).
//   BIAS        z4/z5 = the panel's bias columns [0,VL)/[VL,2VL) as fp32, from [x15]
//   NARROW      z6/z7 (fp32, biased and clamped) -> the stored element in each 32-bit lane
//   NARROW4     the same for z16-z23 (the four-row store, KLEIDI_SME2_STORE4)
//   ELEM        element size in bytes ("4", "2"): the contiguous stride
//   ST          "st1w" / "st1h": store of the low ELEM bytes of each 32-bit lane
//   SCALAR      copies element x25 of row_buf (x28) to [x26] through w27
//   FULL_TILE   optional: the stores of a full tile (2VL rows, contiguous columns, p1/p2 and
//               z0/z1 set as for KLEIDI_SME2_STORE4), branching to 56 when done; "" for none
// Four contiguous rows of the tile, moved to z16-z19 (columns [0,VL)) and z20-z23 ([VL,2VL)):
// clamped (multi-vector FMAX/FMIN, which keep a NaN as the per-row FMAX/FMIN do), narrowed
// (NARROW4), stored predicated on the columns left (p1/p2), rows x7 bytes apart from x24; w12
// (ZA slice), x23 (row) and x24 advance by four rows. With the two MOVAs and the loop's four,
// 24 instructions for four fp32 rows (32 with fp16's FCVTs), where the row-by-row path takes
// ~17 a row.
#define KLEIDI_SME2_STORE4(NARROW4, ST)                                                        \
  "fmax {z16.s-z19.s}, {z16.s-z19.s}, z0.s\n"                                                 \
  "fmax {z20.s-z23.s}, {z20.s-z23.s}, z0.s\n"                                                 \
  "fmin {z16.s-z19.s}, {z16.s-z19.s}, z1.s\n"                                                 \
  "fmin {z20.s-z23.s}, {z20.s-z23.s}, z1.s\n" NARROW4                                         \
  ST " {z16.s}, p1, [x24]\n" ST " {z20.s}, p2, [x24, #1, mul vl]\n"                           \
  "add x24, x24, x7\n"                                                                        \
  ST " {z17.s}, p1, [x24]\n" ST " {z21.s}, p2, [x24, #1, mul vl]\n"                           \
  "add x24, x24, x7\n"                                                                        \
  ST " {z18.s}, p1, [x24]\n" ST " {z22.s}, p2, [x24, #1, mul vl]\n"                           \
  "add x24, x24, x7\n"                                                                        \
  ST " {z19.s}, p1, [x24]\n" ST " {z23.s}, p2, [x24, #1, mul vl]\n"                           \
  "add x24, x24, x7\n"                                                                        \
  "add w12, w12, #4\n"                                                                        \
  "add x23, x23, #4\n"

#define KLEIDI_SME2_FLOAT_MOPA_ASM(SETUP, WEIGHTS, K_STEP, K_STEP16, BIAS, NARROW, NARROW4,  \
                                   ELEM, ST, SCALAR, FULL_TILE)                            \
  ".arch_extension sme2\n"                                                                 \
  "mov x0, %[args]\n"                                                                      \
  "ldp x1, x2, [x0, #0]\n"                                                                 \
  "ldp x3, x4, [x0, #16]\n"                                                                \
  "ldp x5, x6, [x0, #32]\n"                                                                \
  "ldp x7, x8, [x0, #48]\n"                                                                \
  "ldp x9, x10, [x0, #64]\n"                                                               \
  "ldr x28, [x0, #88]\n"                                                                   \
  "smstart\n" /* PSTATE.SM = PSTATE.ZA = 1 */                                              \
  "rdsvl x11, #1\n"                                                                        \
  "lsr x11, x11, #2\n" /* x11 = VL (streaming vector length in fp32 lanes) */              \
  "add x13, x11, x11\n"                                                                    \
  "ptrue p0.s\n" SETUP                                                                     \
  /* ---- loop over row blocks */                                                          \
  "10:\n"                                                                                  \
  "mov x14, x5\n"                                                                          \
  "mov x15, x2\n"                                                                          \
  "mov x16, x3\n"                                                                          \
  "cmp x4, x13\n"                                                                          \
  "csel x21, x4, x13, lo\n"                                                                \
  /* ---- loop over column panels */                                                       \
  "20:\n"                                                                                  \
  "zero {za}\n"                                                                            \
  "mov x17, x1\n" WEIGHTS                                                                  \
  "rdvl x26, #16\n"                                                                         \
  "lsl x26, x26, #1\n" /* x26 = 32 vectors: the cursors' advance per K_STEP16 */           \
  "subs x20, x6, #16\n" /* x20 = K steps - 16 */                                        \
  "b.lt 32f\n"                                                                             \
  "31:\n" K_STEP16                                                                         \
  "add x17, x17, x26\n"                                                                    \
  "add x19, x19, x26\n"                                                                    \
  "subs x20, x20, #16\n"                                                                   \
  "b.ge 31b\n"                                                                             \
  "32:\n"                                                                                  \
  "adds x20, x20, #16\n" /* the 0-15 steps left */                                        \
  "b.eq 40f\n"                                                                             \
  "30:\n" K_STEP                                                                           \
  "addvl x17, x17, #2\n"                                                                   \
  "addvl x19, x19, #2\n"                                                                   \
  "subs x20, x20, #1\n"                                                                    \
  "b.ne 30b\n"                                                                             \
  /* ---- store: bias, clamp, predicated on the columns left */                            \
  "40:\n"                                                                                  \
  "ldr w27, [x0, #80]\n" /* (clamp bounds here: K_STEP16 uses z30/z31) */                   \
  "dup z30.s, w27\n"                                                                       \
  "ldr w27, [x0, #84]\n"                                                                   \
  "dup z31.s, w27\n" BIAS                                                                  \
  /* the bias folded into ZA, one FMOPA of 1.0 x bias per tile: za + 1 x b rounds */       \
  /* as za + b, the FADD it replaces (one a row pair before) */                            \
  "fmov z2.s, #1.0\n"                                                                      \
  "fmopa za0.s, p0/m, p0/m, z2.s, z4.s\n"                                                  \
  "fmopa za1.s, p0/m, p0/m, z2.s, z5.s\n"                                                  \
  "fmopa za2.s, p0/m, p0/m, z2.s, z4.s\n"                                                  \
  "fmopa za3.s, p0/m, p0/m, z2.s, z5.s\n"                                                  \
  "mov z0.d, z30.d\n" /* multi-vector FMAX/FMIN take their bound from z0-z15 */            \
  "mov z1.d, z31.d\n"                                                                      \
  "whilelt p1.s, xzr, x14\n"                                                               \
  "whilelt p2.s, x11, x14\n"                                                               \
  "cmp x14, x13\n"                                                                         \
  "csel x22, x14, x13, lo\n"                                                               \
  "mov x23, #0\n"                                                                          \
  "mov x24, x16\n"                                                                         \
  "cmp x8, #" ELEM "\n"                                                                    \
  "b.ne 59f\n" /* strided columns: row by row */                                           \
  FULL_TILE /* (a path of its own for a full tile of contiguous rows, ending at 56) */     \
  /* ---- contiguous rows four at a time, za0/za1 (rows [0,VL)) then za2/za3 */            \
  "cmp x21, x11\n"                                                                         \
  "csel x25, x21, x11, lo\n" /* x25 = the tile's rows in za0/za1 */                        \
  "mov w12, #0\n"                                                                          \
  "60:\n"                                                                                  \
  "add x27, x23, #4\n"                                                                     \
  "cmp x27, x25\n"                                                                         \
  "b.hi 61f\n"                                                                             \
  "mova {z16.s-z19.s}, za0h.s[w12, 0:3]\n"                                                 \
  "mova {z20.s-z23.s}, za1h.s[w12, 0:3]\n"                                                 \
  KLEIDI_SME2_STORE4(NARROW4, ST)                                                          \
  "b 60b\n"                                                                                \
  "61:\n"                                                                                  \
  "cmp x23, x25\n" /* rows of za0/za1 left (a tile of fewer than VL rows) */               \
  "b.lo 59f\n"                                                                             \
  "mov w12, #0\n"                                                                          \
  "62:\n"                                                                                  \
  "add x27, x23, #4\n"                                                                     \
  "cmp x27, x21\n"                                                                         \
  "b.hi 59f\n"                                                                             \
  "mova {z16.s-z19.s}, za2h.s[w12, 0:3]\n"                                                 \
  "mova {z20.s-z23.s}, za3h.s[w12, 0:3]\n"                                                 \
  KLEIDI_SME2_STORE4(NARROW4, ST)                                                          \
  "b 62b\n"                                                                                \
  /* ---- the rows left one at a time (fewer than four; every row when strided) */         \
  "59:\n"                                                                                  \
  "cmp x23, x21\n"                                                                         \
  "b.hs 56f\n"                                                                             \
  "50:\n"                                                                                  \
  "cmp x23, x11\n"                                                                         \
  "b.hs 51f\n"                                                                             \
  "mov w12, w23\n"                                                                         \
  "mova z6.s, p0/m, za0h.s[w12, 0]\n"                                                      \
  "mova z7.s, p0/m, za1h.s[w12, 0]\n"                                                      \
  "b 52f\n"                                                                                \
  "51:\n"                                                                                  \
  "sub w12, w23, w11\n"                                                                    \
  "mova z6.s, p0/m, za2h.s[w12, 0]\n"                                                      \
  "mova z7.s, p0/m, za3h.s[w12, 0]\n"                                                      \
  "52:\n"                                                                                  \
  "fmax z6.s, p0/m, z6.s, z30.s\n"                                                         \
  "fmax z7.s, p0/m, z7.s, z30.s\n"                                                         \
  "fmin z6.s, p0/m, z6.s, z31.s\n"                                                         \
  "fmin z7.s, p0/m, z7.s, z31.s\n" NARROW                                                  \
  "cmp x8, #" ELEM "\n"                                                                    \
  "b.ne 53f\n" ST " {z6.s}, p1, [x24]\n" ST " {z7.s}, p2, [x24, #1, mul vl]\n"             \
  "b 55f\n"                                                                                \
  /* strided columns: through row_buf, then scalar copies (no scatter in streaming mode) */\
  "53:\n" ST " {z6.s}, p0, [x28]\n" ST " {z7.s}, p0, [x28, #1, mul vl]\n"                  \
  "mov x25, #0\n"                                                                          \
  "mov x26, x24\n"                                                                         \
  "54:\n" SCALAR                                                                           \
  "add x26, x26, x8\n"                                                                     \
  "add x25, x25, #1\n"                                                                     \
  "cmp x25, x22\n"                                                                         \
  "b.lo 54b\n"                                                                             \
  "55:\n"                                                                                  \
  "add x24, x24, x7\n"                                                                     \
  "add x23, x23, #1\n"                                                                     \
  "cmp x23, x21\n"                                                                         \
  "b.lo 50b\n"                                                                             \
  "56:\n"                                                                                  \
  /* ---- next column panel */                                                             \
  "add x15, x15, x10\n"                                                                    \
  "mul x27, x13, x8\n"                                                                     \
  "add x16, x16, x27\n"                                                                    \
  "subs x14, x14, x13\n"                                                                   \
  "b.gt 20b\n"                                                                             \
  /* ---- next row block */                                                                \
  "add x1, x1, x9\n"                                                                       \
  "mul x27, x13, x7\n"                                                                     \
  "add x3, x3, x27\n"                                                                      \
  "subs x4, x4, x13\n"                                                                     \
  "b.gt 10b\n"                                                                             \
  "smstop\n" /* back to non-streaming, ZA off */

// SMSTART/SMSTOP zero every Z register, so all of v0-v31 are clobbered (the compiler saves and
// restores the callee-saved d8-d15); x19-x28 likewise saved by the compiler.
#define KLEIDI_SME2_FLOAT_MOPA_CLOBBERS                                                        \
  "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",     \
      "x14", "x15", "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",     \
      "x27", "x28", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", \
      "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21",     \
      "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31"
