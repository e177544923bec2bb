// SME2 variants of family (1) fp32 GEMM and family (2) fp32 indirect matmul: FMOPA outer
// products into the four 32-bit ZA tiles, one 2VL x 2VL output tile at a time (VL = streaming
// vector length in fp32 lanes, so 8x8 at SVL 128 bits up to 128x128 at SVL 2048 bits).
//
// Written as inline assembly in a translation unit compiled with the *default* aarch64 flags (as
// tests/native/arm_smoke/sme2_check.cpp): the compiler never emits an SME/SVE instruction of its
// own, the run functions are ordinary non-streaming, private-ZA functions to their callers, and
// nothing needs the SME ABI support routines (__arm_tpidr2_save, ...), which the toolchain's
// libgcc lacks. `.arch_extension sme2` only lets the assembler accept the mnemonics. Every
// streaming instruction sits between the SMSTART and SMSTOP of one asm statement; RDSVL (the
// getters) is legal outside streaming mode on any CPU with SME.
//
// Packed layouts (ukernel.h) with kr = sr = 1: LHS block = for each k, mr contiguous floats (the
// LHS column FMOPA wants); RHS panel = nr bias floats, then for each k nr contiguous floats. Pad
// rows / columns of the packed operands are zero and always present (whole blocks / panels), so
// the K loop loads whole vectors unpredicated; only the stores are predicated (M/N edges).
//
// Numerics: FMOPA fuses each multiply-add (one rounding per k instead of two), so results
// differ from the reference within kleidi_test's tolerance, never bit-exactly. The bias is added
// after the K sum and then the clamp applied, in the reference's order (FMAX/FMIN propagate NaN
// like the reference's std::max/std::min chain).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_features.h"
#include "sme2_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

using sme2::svl_words;

// Everything the kernel reads, at fixed offsets (the asm loads them from one pointer).
struct Args {
  const void* lhs;         // 0: packed LHS block of row 0
  const void* rhs;         // 8: packed RHS panel of column 0
  float* dst;              // 16
  uint64_t m;              // 24 (>= 1)
  uint64_t n;              // 32 (>= 1)
  uint64_t k;              // 40 (may be 0)
  uint64_t dst_stride_row; // 48 bytes
  uint64_t dst_stride_col; // 56 bytes (4 = contiguous; anything else goes through row_buf)
  uint64_t lhs_block;      // 64 bytes between LHS blocks
  uint64_t rhs_panel;      // 72 bytes between RHS panels
  uint32_t clamp_min;      // 80 (fp32 bits)
  uint32_t clamp_max;      // 84
  float* row_buf;          // 88: 2 * VL floats (<= 128: SVL is at most 2048 bits)
};
static_assert(offsetof(Args, row_buf) == 88, "asm offsets");

// dst[0:m, 0:n] = clamp(lhs * rhs + bias). Register map (x0 args; x29/x30/sp untouched):
//   x1 LHS block  x2 RHS panel  x3 dst (block row)  x4 rows left  x5 n  x6 k  x7 row stride
//   x8 col stride x9 LHS block stride  x10 RHS panel stride  x11 VL  x12 ZA slice  x13 2VL
//   x14 cols left x15 RHS panel (current)  x16 dst (tile)  x17 LHS cursor  x19 RHS cursor
//   x20 k left    x21 rows in tile  x22 cols in tile  x23 row  x24 dst row  x25 j  x26 dst elem
//   x27 scratch   x28 row_buf.  z0-z3 operands, z4-z5 bias, z6-z7 row, z30/z31 clamp bounds;
//   ZA tiles: za0 rows [0,VL) x cols [0,VL), za1 rows [0,VL) x cols [VL,2VL), za2/za3 the same
//   for rows [VL,2VL).
__attribute__((noinline)) void sme2_f32_kernel(const Args* args) {
  __asm__ volatile(
      ".arch_extension sme2\n"
      "mov x0, %[args]\n"
      "ldp x1, x2, [x0, #0]\n"
      "ldp x3, x4, [x0, #16]\n"
      "ldp x5, x6, [x0, #32]\n"
      "ldp x7, x8, [x0, #48]\n"
      "ldp x9, x10, [x0, #64]\n"
      "ldr x28, [x0, #88]\n"
      "smstart\n"  // PSTATE.SM = PSTATE.ZA = 1
      "rdsvl x11, #1\n"
      "lsr x11, x11, #2\n"  // x11 = VL (streaming vector length in fp32 lanes)
      "add x13, x11, x11\n"
      "ptrue p0.s\n"
      "ptrue pn8.s\n"
      "ldr w27, [x0, #80]\n"
      "dup z30.s, w27\n"
      "ldr w27, [x0, #84]\n"
      "dup z31.s, w27\n"
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
      "addvl x19, x15, #2\n"  // skip the panel's 2VL bias floats
      "mov x20, x6\n"
      "cbz x20, 40f\n"
      "30:\n"
      "ld1w {z0.s, z1.s}, pn8/z, [x17]\n"
      "ld1w {z2.s, z3.s}, pn8/z, [x19]\n"
      "fmopa za0.s, p0/m, p0/m, z0.s, z2.s\n"
      "fmopa za1.s, p0/m, p0/m, z0.s, z3.s\n"
      "fmopa za2.s, p0/m, p0/m, z1.s, z2.s\n"
      "fmopa za3.s, p0/m, p0/m, z1.s, z3.s\n"
      "addvl x17, x17, #2\n"
      "addvl x19, x19, #2\n"
      "subs x20, x20, #1\n"
      "b.ne 30b\n"
      // ---- store: bias, clamp, predicated on the columns left
      "40:\n"
      "ld1w {z4.s, z5.s}, pn8/z, [x15]\n"
      "whilelt p1.s, xzr, x14\n"
      "whilelt p2.s, x11, x14\n"
      "cmp x14, x13\n"
      "csel x22, x14, x13, lo\n"
      "mov x23, #0\n"
      "mov x24, x16\n"
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
      "fadd z6.s, z6.s, z4.s\n"
      "fadd z7.s, z7.s, z5.s\n"
      "fmax z6.s, p0/m, z6.s, z30.s\n"
      "fmax z7.s, p0/m, z7.s, z30.s\n"
      "fmin z6.s, p0/m, z6.s, z31.s\n"
      "fmin z7.s, p0/m, z7.s, z31.s\n"
      "cmp x8, #4\n"
      "b.ne 53f\n"
      "st1w {z6.s}, p1, [x24]\n"
      "st1w {z7.s}, p2, [x24, #1, mul vl]\n"
      "b 55f\n"
      "53:\n"  // strided columns: through row_buf, then scalar stores (no scatter in streaming mode)
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
      "smstop\n"  // back to non-streaming, ZA off
      :
      : [args] "r"(args)
      // SMSTART/SMSTOP zero every Z register, so all of v0-v31 are clobbered (the compiler
      // saves and restores the callee-saved d8-d15); x19-x28 likewise saved by the compiler.
      : "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9",
        "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21",
        "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31");
}

void run_f32(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
             float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
             float clamp_max) {
  if (m == 0 || n == 0) return;
  const size_t tile = 2 * svl_words();
  float row_buf[128];  // 2 * VL floats; VL <= 64 (SVL <= 2048 bits)
  Args a;
  a.lhs = lhs_packed;
  a.rhs = rhs_packed;
  a.dst = dst;
  a.m = m;
  a.n = n;
  a.k = k;
  a.dst_stride_row = dst_stride_row;
  a.dst_stride_col = dst_stride_col;
  a.lhs_block = layout::lhs_f32_block_bytes(k, tile, 1);
  a.rhs_panel = layout::rhs_f32_panel_bytes(k, tile, 1);
  std::memcpy(&a.clamp_min, &clamp_min, 4);
  std::memcpy(&a.clamp_max, &clamp_max, 4);
  a.row_buf = row_buf;
  sme2_f32_kernel(&a);
}

struct Sme2GemmF32 {
  static size_t m_step() { return 2 * svl_words(); }
  static size_t n_step() { return 2 * svl_words(); }
  static size_t mr() { return 2 * svl_words(); }
  static size_t nr() { return 2 * svl_words(); }
  static size_t kr() { return 1; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    run_f32(m, n, k, lhs_packed, rhs_packed, dst, dst_stride_row, dst_stride_col, clamp_min,
            clamp_max);
  }
};

// Indirect matmul: once packed from the indirection table the operands are the fp32 GEMM ones
// with k = k_chunk_count * k_chunk_length (kr = 1: no per-chunk padding), so the same core runs.
struct Sme2IGemmF32 {
  static size_t m_step() { return 2 * svl_words(); }
  static size_t n_step() { return 2 * svl_words(); }
  static size_t mr() { return 2 * svl_words(); }
  static size_t nr() { return 2 * svl_words(); }
  static size_t kr() { return 1; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k_chunk_count, size_t k_chunk_length,
                  const void* lhs_packed, const void* rhs_packed, float* dst,
                  size_t dst_stride_row, float clamp_min, float clamp_max) {
    run_f32(m, n, layout::imatmul_k(k_chunk_count, k_chunk_length, kr()), lhs_packed, rhs_packed,
            dst, dst_stride_row, sizeof(float), clamp_min, clamp_max);
  }
};

}  // namespace

const GemmF32Ukernel gemm_f32_sme2 =
    make_gemm_f32<Sme2GemmF32>("gemm_f32_sme2_2vlx2vl_mopa", Variant::sme2);
const IGemmF32Ukernel igemm_f32_sme2 =
    make_igemm_f32<Sme2IGemmF32>("igemm_f32_sme2_2vlx2vl_mopa", Variant::sme2);

}  // namespace onnxplex::kleidi
