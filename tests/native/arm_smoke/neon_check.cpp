// Baseline Advanced SIMD check: built with the default aarch64 flags (NEON is mandatory there).
#include <arm_neon.h>

#include <cstdio>

#include "checks.h"

namespace arm_smoke {

CheckResult check_neon_fmla() {
  constexpr int kN = 64;
  float acc[kN], a[kN], b[kN], expect[kN];
  Lcg rng(1);
  for (int i = 0; i < kN; ++i) {
    acc[i] = rng.next_small_float();
    a[i] = rng.next_small_float();
    b[i] = rng.next_small_float();
    expect[i] = acc[i] + a[i] * b[i];
  }
  for (int i = 0; i < kN; i += 4) {
    vst1q_f32(acc + i, vfmaq_f32(vld1q_f32(acc + i), vld1q_f32(a + i), vld1q_f32(b + i)));
  }
  for (int i = 0; i < kN; ++i) {
    if (acc[i] != expect[i]) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "FMLA lane %d: got %g, expected %g", i, acc[i], expect[i]);
      return {false, msg};
    }
  }
  return {true, "64 fp32 FMLA lanes match scalar"};
}

}  // namespace arm_smoke
