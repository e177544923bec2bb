// SME2 check, written as inline assembly so that it needs neither +sme compiler flags nor the SME
// ABI support routines (__arm_tpidr2_save, __arm_get_current_vg, ...): this translation unit is
// compiled with the default aarch64 flags, the compiler never emits an SME/SVE instruction of its
// own, and the function below is an ordinary (non-streaming, private-ZA) function to its callers.
// The ACLE alternative, an `__arm_new("za") __arm_locally_streaming` function with arm_sme.h
// intrinsics, makes clang 19 call __arm_tpidr2_save (and __arm_get_current_vg without +sve), which
// libgcc 12 does not provide: the static link fails.
//
// `.arch_extension sme2` lets the assembler accept the mnemonics; nothing here changes code
// generation. Every SME instruction is inside the SMSTART ... SMSTOP bracket except RDSVL and the
// SVCR read, which are legal outside streaming mode on any CPU with SME.
#include <cstdio>
#include <vector>

#include "checks.h"

namespace arm_smoke {
namespace {

// c (2*vl rows x vl columns, row-major) = sum over k of a_k (outer) b_k, with
// a: k rows of 2*vl floats, b: k rows of vl floats, vl = SVL in 32-bit words. Rows 0..vl-1 of c
// come from ZA tile 0, rows vl..2vl-1 from ZA tile 1. Requires k >= 1.
__attribute__((noinline)) void sme2_fmopa_2vlx1vl(const float* a, const float* b, float* c,
                                                  uint64_t k) {
  __asm__ volatile(
      ".arch_extension sme2\n"
      "smstart\n"                  // PSTATE.SM = PSTATE.ZA = 1; Z, P and ZA start zeroed
      "zero {za}\n"
      "rdsvl x9, #1\n"
      "lsr x9, x9, #2\n"           // x9 = vl (32-bit lanes)
      "ptrue p0.s\n"
      "ptrue pn8.s\n"              // SME2: predicate-as-counter
      "1:\n"
      "ld1w {z0.s, z1.s}, pn8/z, [%[a]]\n"  // SME2: two consecutive vectors in one load
      "ld1w {z2.s}, p0/z, [%[b]]\n"
      "fmopa za0.s, p0/m, p0/m, z0.s, z2.s\n"
      "fmopa za1.s, p0/m, p0/m, z1.s, z2.s\n"
      "addvl %[a], %[a], #2\n"
      "addvl %[b], %[b], #1\n"
      "subs %[k], %[k], #1\n"
      "b.ne 1b\n"
      "mov w12, #0\n"
      "2:\n"
      "st1w {za0h.s[w12, 0]}, p0, [%[c]]\n"
      "addvl %[c], %[c], #1\n"
      "add w12, w12, #1\n"
      "cmp x12, x9\n"
      "b.lt 2b\n"
      "mov w12, #0\n"
      "3:\n"
      "st1w {za1h.s[w12, 0]}, p0, [%[c]]\n"
      "addvl %[c], %[c], #1\n"
      "add w12, w12, #1\n"
      "cmp x12, x9\n"
      "b.lt 3b\n"
      "smstop\n"                   // back to non-streaming, ZA off
      : [a] "+r"(a), [b] "+r"(b), [c] "+r"(c), [k] "+r"(k)
      :
      // SMSTART/SMSTOP zero every Z register, so all of v0-v31 (including the callee-saved
      // d8-d15, which the compiler then saves and restores) are clobbered.
      : "x9", "x12", "memory", "cc", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9",
        "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22",
        "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31");
}

uint64_t read_svcr() {
  uint64_t svcr;
  __asm__ volatile(".arch_extension sme\n mrs %0, svcr\n" : "=r"(svcr));
  return svcr;
}

}  // namespace

uint64_t sme_vector_length_bytes() {
  uint64_t bytes;
  __asm__ volatile(".arch_extension sme\n rdsvl %0, #1\n" : "=r"(bytes));
  return bytes;
}

CheckResult check_sme2_fmopa() {
  const uint64_t vl = sme_vector_length_bytes() / 4;
  constexpr uint64_t kDepth = 5;
  std::vector<float> a(kDepth * 2 * vl), b(kDepth * vl), c(2 * vl * vl, -1.0f);
  Lcg rng(4);
  for (float& x : a) x = rng.next_small_float();
  for (float& x : b) x = rng.next_small_float();
  sme2_fmopa_2vlx1vl(a.data(), b.data(), c.data(), kDepth);
  const uint64_t svcr = read_svcr();
  if (svcr != 0) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "SVCR = %llu after SMSTOP (streaming mode or ZA left on)",
                  static_cast<unsigned long long>(svcr));
    return {false, msg};
  }
  for (uint64_t r = 0; r < 2 * vl; ++r) {
    for (uint64_t j = 0; j < vl; ++j) {
      float expect = 0.0f;  // small integers: every partial sum is exact in fp32
      for (uint64_t k = 0; k < kDepth; ++k) expect += a[k * 2 * vl + r] * b[k * vl + j];
      if (c[r * vl + j] != expect) {
        char msg[128];
        std::snprintf(msg, sizeof msg, "FMOPA C[%llu][%llu]: got %g, expected %g",
                      static_cast<unsigned long long>(r), static_cast<unsigned long long>(j),
                      c[r * vl + j], expect);
        return {false, msg};
      }
    }
  }
  char msg[160];
  std::snprintf(msg, sizeof msg,
                "%llux%llu fp32 tile from %llu FMOPA pairs (ZA0+ZA1, SME2 multi-vector LD1W) "
                "matches scalar",
                static_cast<unsigned long long>(2 * vl), static_cast<unsigned long long>(vl),
                static_cast<unsigned long long>(kDepth));
  return {true, msg};
}

}  // namespace arm_smoke
