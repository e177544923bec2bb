// Per-ISA checks of the Arm smoke test. Each lives in its own translation unit compiled with its
// own -march flags (see CMakeLists.txt), and only on aarch64 (ARM_SMOKE_HAVE_<ISA> says which
// were built); main.cpp calls one only when cpu_features() says the CPU has that ISA, so no
// instruction ever runs on a CPU that lacks it.
#pragma once

#include <cstdint>
#include <string>

namespace arm_smoke {

struct CheckResult {
  bool ok = false;
  std::string detail;  // what was computed, or what differed
};

// Deterministic inputs without <random>, so every build and every CPU sees the same numbers.
class Lcg {
 public:
  explicit Lcg(uint32_t seed) : state_(seed) {}
  uint32_t next() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_ >> 8;
  }
  int8_t next_i8() { return static_cast<int8_t>(static_cast<int32_t>(next() & 0xffu) - 128); }
  // Small integers as floats: every product and sum below is exact, so comparisons are exact.
  float next_small_float() { return static_cast<float>(static_cast<int32_t>(next() % 17u) - 8); }

 private:
  uint32_t state_;
};

// Advanced SIMD FMLA (vfmaq_f32) against scalar arithmetic. Any aarch64 CPU.
CheckResult check_neon_fmla();
// SDOT (vdotq_s32) against scalar int32 dot products, with int8 extremes. Needs FEAT_DotProd.
CheckResult check_dotprod_sdot();
// SMMLA (vmmlaq_s32) 2x8 * 8x2 -> 2x2 int32 blocks against scalar. Needs FEAT_I8MM.
CheckResult check_i8mm_smmla();
// SME2: SMSTART, multi-vector LD1W with a predicate-as-counter (SME2-only), two fp32 FMOPA outer
// products accumulated over K into ZA tiles 0 and 1, rows stored with ST1W, SMSTOP. Needs SME2.
CheckResult check_sme2_fmopa();
// Streaming vector length in bytes (RDSVL #1). Needs SME.
uint64_t sme_vector_length_bytes();

}  // namespace arm_smoke
