// Runtime CPU feature detection for the Kleidi micro-kernels. Knows nothing about Python.
#pragma once

#include <string>
#include <vector>

namespace onnxplex::kleidi {

struct CpuFeatures {
  std::string arch;      // "aarch64", "x86_64", ...
  bool neon = false;     // Advanced SIMD (always present on aarch64)
  bool dotprod = false;  // SDOT/UDOT
  bool i8mm = false;     // SMMLA/UMMLA
  bool fp16 = false;     // FEAT_FP16: scalar and Advanced SIMD half-precision arithmetic
  bool bf16 = false;
  bool sve = false;
  bool sve2 = false;
  bool sme = false;
  bool sme2 = false;
  // x86 features, reported for information only (no Kleidi kernels use them).
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_vnni = false;
  bool amx_int8 = false;

  std::vector<std::string> names() const;  // the features that are present
};

// Probes the CPU once (getauxval on Linux/aarch64, sysctl on macOS, cpuid on x86_64).
const CpuFeatures& cpu_features();

}  // namespace onnxplex::kleidi
