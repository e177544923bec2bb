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

// Arm variants come here, e.g.
//   #if ONNXPLEX_KLEIDI_HAVE_SME2
//   extern const GemmF32Ukernel gemm_f32_sme2;
//   #endif

}  // namespace onnxplex::kleidi
