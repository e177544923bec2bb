// FEAT_I8MM check: this file alone is compiled with +i8mm.
#include <arm_neon.h>

#include <cstdio>

#include "checks.h"

namespace arm_smoke {

// SMMLA: acc (2x2 int32, row-major) += A (2x8 int8, row-major) * B^T, with B given as 2 rows of 8
// (i.e. the 8x2 right-hand matrix stored column by column).
CheckResult check_i8mm_smmla() {
  constexpr int kBlocks = 16;
  int8_t a[kBlocks * 16], b[kBlocks * 16];
  Lcg rng(3);
  for (int i = 0; i < kBlocks * 16; ++i) {
    a[i] = rng.next_i8();
    b[i] = rng.next_i8();
  }
  for (int i = 0; i < 8; ++i) a[i] = b[i] = -128;  // largest magnitude: 8 * 16384
  for (int blk = 0; blk < kBlocks; ++blk) {
    const int8_t* pa = a + blk * 16;
    const int8_t* pb = b + blk * 16;
    int32_t init[4] = {blk, -blk, 2 * blk, -2 * blk};
    int32_t got[4];
    vst1q_s32(got, vmmlaq_s32(vld1q_s32(init), vld1q_s8(pa), vld1q_s8(pb)));
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        int32_t expect = init[i * 2 + j];
        for (int k = 0; k < 8; ++k) expect += int32_t(pa[i * 8 + k]) * int32_t(pb[j * 8 + k]);
        if (got[i * 2 + j] != expect) {
          char msg[128];
          std::snprintf(msg, sizeof msg, "SMMLA block %d [%d][%d]: got %d, expected %d", blk, i,
                        j, got[i * 2 + j], expect);
          return {false, msg};
        }
      }
    }
  }
  return {true, "16 SMMLA 2x8x2 blocks (int8 extremes included) match scalar"};
}

}  // namespace arm_smoke
