// SME2 variant of family (5), fp16 GEMM: the widening FMOPA (fp16 x fp16 -> fp32, FEAT_SME)
// into the four 32-bit ZA tiles, one 2VL x 2VL output tile at a time (VL = streaming vector
// length in fp32 lanes), converted to fp16 only when stored - KleidiAI's f16 "2vlx2vl
// sme2_mopa" scheme. The inline-asm skeleton, shared with the fp32 kernel, is in
// sme2_float_mopa.h; the same rules hold as in sme2_gemm_f32.cpp (default compiler flags, every
// streaming instruction between one asm statement's SMSTART and SMSTOP, no SME ABI routines).
//
// Packed layouts (ukernel.h, elem 2) with kr = 2, sr = 1: per pair of k values the LHS block
// holds, for each of its mr = 2VL rows, the two fp16 values next to each other - one 32-bit lane
// per row, exactly the operand of `fmopa za.s, p/m, p/m, z.h, z.h`, which adds a[2i] * b[2j] +
// a[2i+1] * b[2j+1] to ZA[i][j]; the RHS panel likewise (after its 2VL fp16 bias = one vector).
// An odd K is padded with a zero pair partner. The FMOPAs' predicates are all-true over the
// 16-bit elements (p3.h: a .s predicate would leave every odd fp16 element inactive, i.e. 0).
//
// Output, per row: the fp32 ZA row + bias (fp16 -> fp32 by FCVT, exact), FMAX/FMIN with the
// fp32 bounds, FCVT to fp16 (round to nearest even), a truncating ST1H of each 32-bit lane's low
// half. That is the reference's order after the K sum; the K sum itself is fp32 but rounds in
// pairs, so results match the reference within the bound in ukernel.h (GemmF16Ukernel), mostly
// exactly, otherwise one fp16 ulp apart.
#include "sme2_float_mopa.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

__attribute__((noinline)) void sme2_f16_kernel(const sme2::MopaArgs* args) {
  __asm__ volatile(KLEIDI_SME2_FLOAT_MOPA_ASM(
                       /*SETUP=*/"ptrue pn8.h\n"
                       "ptrue p3.h\n",
                       /*WEIGHTS=*/"addvl x19, x15, #1\n",  // 2VL fp16 bias = 1 vector
                       /*K_STEP=*/
                       "ld1h {z0.h, z1.h}, pn8/z, [x17]\n"
                       "ld1h {z2.h, z3.h}, pn8/z, [x19]\n"
                       "fmopa za0.s, p3/m, p3/m, z0.h, z2.h\n"
                       "fmopa za1.s, p3/m, p3/m, z0.h, z3.h\n"
                       "fmopa za2.s, p3/m, p3/m, z1.h, z2.h\n"
                       "fmopa za3.s, p3/m, p3/m, z1.h, z3.h\n",
                       /*K_STEP16=*/KLEIDI_SME2_K_STEP16("ld1h", "fmopa", "p3", "h"),
                       // VL fp16 values into the low halves of VL 32-bit lanes, then widened
                       // (LD1H to .s: "#1, mul vl" = VL halfwords further).
                       /*BIAS=*/
                       "ld1h {z4.s}, p0/z, [x15]\n"
                       "ld1h {z5.s}, p0/z, [x15, #1, mul vl]\n"
                       "fcvt z4.s, p0/m, z4.h\n"
                       "fcvt z5.s, p0/m, z5.h\n",
                       /*NARROW=*/
                       "fcvt z6.h, p0/m, z6.s\n"
                       "fcvt z7.h, p0/m, z7.s\n",
                       /*NARROW4=*/
                       "fcvt z16.h, p0/m, z16.s\n"
                       "fcvt z17.h, p0/m, z17.s\n"
                       "fcvt z18.h, p0/m, z18.s\n"
                       "fcvt z19.h, p0/m, z19.s\n"
                       "fcvt z20.h, p0/m, z20.s\n"
                       "fcvt z21.h, p0/m, z21.s\n"
                       "fcvt z22.h, p0/m, z22.s\n"
                       "fcvt z23.h, p0/m, z23.s\n",
                       /*ELEM=*/"2", /*ST=*/"st1h",
                       /*SCALAR=*/
                       "ldrh w27, [x28, x25, lsl #1]\n"
                       "strh w27, [x26]\n",
                       // A full tile, four rows a step: the 8-bit tile's slices 4r..4r+3 are
                       // the 32-bit tiles' row r - za0 (row r, columns [0,VL)), za1 (row r,
                       // [VL,2VL)), za2 and za3 (row r + VL) - so one MOVA gives both halves of
                       // rows r and r + VL in consecutive registers, and one two-register FCVT
                       // narrows a whole row into one vector of fp16, stored by one ST1H (the
                       // four-row path: 8 FCVT and 8 stores for four rows). Same clamp, same
                       // rounding: the same bits.
                       /*FULL_TILE=*/
                       "cmp x21, x13\n"
                       "b.ne 70f\n"
                       "whilelt p5.h, xzr, x14\n"  // the columns left, as halfwords
                       "mul x25, x11, x7\n"
                       "lsr x25, x25, #1\n"  // row r + VL, in halfwords from row r
                       "lsl x26, x7, #1\n"  // two rows (x26 is free after the K loop)
                       "mov w12, #0\n"
                       "71:\n"  // rows r, r + 1 (VL is even) and r + VL, r + VL + 1
                       "mova {z16.b-z19.b}, za0h.b[w12, 0:3]\n"
                       "mova {z20.b-z23.b}, za0h.b[w12, 4:7]\n"
                       "fmax {z16.s-z19.s}, {z16.s-z19.s}, z0.s\n"
                       "fmax {z20.s-z23.s}, {z20.s-z23.s}, z0.s\n"
                       "fmin {z16.s-z19.s}, {z16.s-z19.s}, z1.s\n"
                       "fmin {z20.s-z23.s}, {z20.s-z23.s}, z1.s\n"
                       "fcvt z24.h, {z16.s-z17.s}\n"
                       "fcvt z25.h, {z18.s-z19.s}\n"
                       "fcvt z26.h, {z20.s-z21.s}\n"
                       "fcvt z27.h, {z22.s-z23.s}\n"
                       "add x27, x24, x7\n"
                       "st1h {z24.h}, p5, [x24]\n"
                       "st1h {z25.h}, p5, [x24, x25, lsl #1]\n"
                       "st1h {z26.h}, p5, [x27]\n"
                       "st1h {z27.h}, p5, [x27, x25, lsl #1]\n"
                       "add x24, x24, x26\n"
                       "add w12, w12, #8\n"
                       "add x23, x23, #2\n"
                       "cmp x23, x11\n"
                       "b.lo 71b\n"
                       "b 56f\n"
                       "70:\n")
                   :
                   : [args] "r"(args)
                   : KLEIDI_SME2_FLOAT_MOPA_CLOBBERS);
}

}  // namespace

const GemmF16Ukernel gemm_f16_sme2 =
    make_gemm_f16<sme2::PlainGemm2VL<2, f16_bits, &sme2_f16_kernel>>(
        "gemm_f16_sme2_2vlx2vl_mopa", Variant::sme2);

}  // namespace onnxplex::kleidi
