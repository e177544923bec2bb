// Runtime CPU feature detection for the cpu_mlas native kernels. Knows nothing about Python.
#pragma once

namespace onnxplex::mlas {

struct CpuFeatures {
  bool avx2 = false;        // AVX2 + FMA (and the OS saves the ymm state)
  bool avx512f = false;     // AVX-512 F/BW/VL/DQ + FMA (and the OS saves the zmm state)
  bool avx512_vnni = false; // AVX-512 F/BW/VL + VNNI (and the OS saves the zmm state)
  bool avx512_vbmi = false; // AVX-512 F/BW + VBMI (byte permutes; the OS saves the zmm state)
  bool amx_int8 = false;    // reported for information only
};

// Probes the CPU once (cpuid via __builtin_cpu_supports on x86-64; nothing elsewhere).
const CpuFeatures& cpu_features();

}  // namespace onnxplex::mlas

// The variant of a kernel family this CPU runs best, for families whose variants are named
// <name>_avx512, <name>_avx2 and <name>_portable (the x86 ones exist only in x86 builds).
#if defined(ONNXPLEX_MLAS_HAVE_X86) && ONNXPLEX_MLAS_HAVE_X86
#define ONNXPLEX_MLAS_BEST_VARIANT(name)                       \
  (::onnxplex::mlas::cpu_features().avx512f ? name##_avx512    \
   : ::onnxplex::mlas::cpu_features().avx2  ? name##_avx2      \
                                            : name##_portable)
#else
#define ONNXPLEX_MLAS_BEST_VARIANT(name) (name##_portable)
#endif
