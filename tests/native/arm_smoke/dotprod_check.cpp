// FEAT_DotProd check: this file alone is compiled with +dotprod.
#include <arm_neon.h>

#include <cstdio>

#include "checks.h"

namespace arm_smoke {

CheckResult check_dotprod_sdot() {
  constexpr int kBlocks = 16;  // 16 x (4 lanes x 4 products)
  int8_t a[kBlocks * 16], b[kBlocks * 16];
  Lcg rng(2);
  for (int i = 0; i < kBlocks * 16; ++i) {
    a[i] = rng.next_i8();
    b[i] = rng.next_i8();
  }
  a[0] = a[1] = a[2] = a[3] = -128;  // extremes: (-128)*(-128)*4 must not overflow int32
  b[0] = b[1] = b[2] = b[3] = -128;
  a[4] = 127;
  b[4] = -128;
  for (int blk = 0; blk < kBlocks; ++blk) {
    const int8_t* pa = a + blk * 16;
    const int8_t* pb = b + blk * 16;
    int32_t got[4];
    vst1q_s32(got, vdotq_s32(vdupq_n_s32(blk), vld1q_s8(pa), vld1q_s8(pb)));
    for (int lane = 0; lane < 4; ++lane) {
      int32_t expect = blk;
      for (int j = 0; j < 4; ++j) expect += int32_t(pa[lane * 4 + j]) * int32_t(pb[lane * 4 + j]);
      if (got[lane] != expect) {
        char msg[128];
        std::snprintf(msg, sizeof msg, "SDOT block %d lane %d: got %d, expected %d", blk, lane,
                      got[lane], expect);
        return {false, msg};
      }
    }
  }
  return {true, "16 SDOT blocks (int8 extremes included) match scalar"};
}

}  // namespace arm_smoke
