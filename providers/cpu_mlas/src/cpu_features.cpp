#include "cpu_features.h"

namespace onnxplex::mlas {

namespace {

CpuFeatures probe() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  // __builtin_cpu_supports checks the OS-enabled state (XGETBV) for the AVX families as well.
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("fma");
  f.avx512_vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  f.avx512_vbmi = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vbmi");
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  f.amx_int8 = __builtin_cpu_supports("amx-int8");
#endif
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

}  // namespace onnxplex::mlas
