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
#include "sme2_float_mopa.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

// dst[0:m, 0:n] = clamp(lhs * rhs + bias); the skeleton and its register map are in
// sme2_float_mopa.h. One K step = one k: 2VL LHS rows and 2VL RHS columns, four FMOPAs.
__attribute__((noinline)) void sme2_f32_kernel(const sme2::MopaArgs* args) {
  __asm__ volatile(KLEIDI_SME2_FLOAT_MOPA_ASM(
                       /*SETUP=*/"ptrue pn8.s\n",
                       /*WEIGHTS=*/"addvl x19, x15, #2\n",  // 2VL fp32 bias = 2 vectors
                       /*K_STEP=*/
                       "ld1w {z0.s, z1.s}, pn8/z, [x17]\n"
                       "ld1w {z2.s, z3.s}, pn8/z, [x19]\n"
                       "fmopa za0.s, p0/m, p0/m, z0.s, z2.s\n"
                       "fmopa za1.s, p0/m, p0/m, z0.s, z3.s\n"
                       "fmopa za2.s, p0/m, p0/m, z1.s, z2.s\n"
                       "fmopa za3.s, p0/m, p0/m, z1.s, z3.s\n",
                       /*K_STEP16=*/KLEIDI_SME2_K_STEP16("ld1w", "fmopa", "p0", "s"),
                       /*BIAS=*/"ld1w {z4.s, z5.s}, pn8/z, [x15]\n",
                       /*NARROW=*/"",
                       /*NARROW4=*/"",
                       /*ELEM=*/"4", /*ST=*/"st1w",
                       /*SCALAR=*/
                       "ldr w27, [x28, x25, lsl #2]\n"
                       "str w27, [x26]\n",
                       /*FULL_TILE=*/"")
                   :
                   : [args] "r"(args)
                   : KLEIDI_SME2_FLOAT_MOPA_CLOBBERS);
}

// Indirect matmul: once packed from the indirection table the operands are the fp32 GEMM ones
// with k = k_chunk_count * k_chunk_length (kr = 1: no per-chunk padding), so the same core runs.
struct Sme2IGemmF32 : sme2::Tile2VL<1> {
  static void run(size_t m, size_t n, size_t k_chunk_count, size_t k_chunk_length,
                  const void* lhs_packed, const void* rhs_packed, float* dst,
                  size_t dst_stride_row, float clamp_min, float clamp_max) {
    sme2::run_float_mopa<1>(&sme2_f32_kernel, m, n,
                            layout::imatmul_k(k_chunk_count, k_chunk_length, kr()), lhs_packed,
                            rhs_packed, dst, dst_stride_row, sizeof(float), clamp_min, clamp_max);
  }
};

}  // namespace

const GemmF32Ukernel gemm_f32_sme2 =
    make_gemm_f32<sme2::PlainGemm2VL<1, float, &sme2_f32_kernel>>(
        "gemm_f32_sme2_2vlx2vl_mopa", Variant::sme2);
const IGemmF32Ukernel igemm_f32_sme2 =
    make_igemm_f32<Sme2IGemmF32>("igemm_f32_sme2_2vlx2vl_mopa", Variant::sme2);

}  // namespace onnxplex::kleidi
