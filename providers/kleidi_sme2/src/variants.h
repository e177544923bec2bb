// Every compiled micro-kernel variant, by family. Only dispatch.cpp and tests should name them;
// everything else asks dispatch.h. Arm variants are declared only when their translation unit
// is compiled in (ONNXPLEX_KLEIDI_HAVE_<ISA>, set by CMake).
#pragma once

#include "ukernel.h"

namespace onnxplex::kleidi {

// Portable reference (always compiled; pure C++17, no intrinsics).
extern const GemmF32Ukernel gemm_f32_reference;
extern const IGemmF32Ukernel igemm_f32_reference;
extern const QGemmQsi8cxUkernel qgemm_qsi8cx_reference;
extern const QGemmQsi4c32Ukernel qgemm_qsi4c32_reference;
extern const GemmF16Ukernel gemm_f16_reference;

// Arm variants come here, e.g.
//   #if ONNXPLEX_KLEIDI_HAVE_SME2
//   extern const GemmF32Ukernel gemm_f32_sme2;
//   #endif

#if ONNXPLEX_KLEIDI_HAVE_SME2
// sme2_gemm_f32.cpp: FMOPA 2VL x 2VL tiles (mr = nr = 2 * SVL / 32, kr = sr = 1).
extern const GemmF32Ukernel gemm_f32_sme2;
extern const IGemmF32Ukernel igemm_f32_sme2;
// sme2_qgemm.cpp: SMOPA (int8 4-way) 2VL x 2VL tiles, kr 4 sr 1; qsi8cx and qsi4c32.
extern const QGemmQsi8cxUkernel qgemm_qsi8cx_sme2;
extern const QGemmQsi4c32Ukernel qgemm_qsi4c32_sme2;
// sme2_gemm_f16.cpp: widening FMOPA (fp16 pairs -> fp32 ZA) 2VL x 2VL tiles, kr 2 sr 1.
extern const GemmF16Ukernel gemm_f16_sme2;
#endif

#if ONNXPLEX_KLEIDI_HAVE_NEON
// neon_{gemm,igemm}_f32.cpp: FMLA-by-element 8x12 fp32 tile (mr 8, nr 12, kr = sr = 1).
extern const GemmF32Ukernel gemm_f32_neon;
extern const IGemmF32Ukernel igemm_f32_neon;
// neon_gemm_f16.cpp (-march=armv8.2-a+fp16; dispatch also needs FEAT_FP16 at run time): FMLA
// on 8 fp16 lanes, 8x24 tile accumulated in fp16 (mr 8, nr 24, kr = sr = 1).
extern const GemmF16Ukernel gemm_f16_neon;
#endif
#if ONNXPLEX_KLEIDI_HAVE_DOTPROD
// dotprod_qgemm.cpp: SDOT by element, kr 4 sr 1; qsi8cx 4x16, qsi4c32 4x8.
extern const QGemmQsi8cxUkernel qgemm_qsi8cx_dotprod;
extern const QGemmQsi4c32Ukernel qgemm_qsi4c32_dotprod;
#endif
#if ONNXPLEX_KLEIDI_HAVE_I8MM
// i8mm_qgemm.cpp: SMMLA 2x8x2 steps, kr 8 sr 1; qsi8cx 4x8, qsi4c32 4x8.
extern const QGemmQsi8cxUkernel qgemm_qsi8cx_i8mm;
extern const QGemmQsi4c32Ukernel qgemm_qsi4c32_i8mm;
#endif

}  // namespace onnxplex::kleidi
