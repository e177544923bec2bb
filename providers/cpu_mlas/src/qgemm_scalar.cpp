// The portable qgemm variant (any CPU): plain C++ the compiler may vectorize for the baseline
// ISA. Also the float32 helpers of DynamicQuantizeLinear. Built with -ffp-contract=off.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "qgemm.h"

namespace onnxplex::mlas {

namespace {
constexpr size_t kPanel = 16;
}

void qgemm_tile_scalar(const QgemmTile& t) {
  for (size_t r = 0; r < t.rows; ++r) {
    int32_t acc[kPanel] = {};
    const uint8_t* a = t.a + r * t.lda;
    const auto* b = reinterpret_cast<const int8_t*>(t.b);
    for (size_t k = 0; k < t.kp; ++k) {
      const int32_t av = a[k];
      const int8_t* bk = b + k * kPanel;
      for (size_t j = 0; j < kPanel; ++j) acc[j] += av * int32_t{bk[j]};
    }
    const auto azp = static_cast<uint32_t>(t.a_zp[r]);
    const auto asum = static_cast<uint32_t>(t.a_sum[r]);
    for (size_t j = 0; j < t.cols; ++j) {
      const uint32_t c = static_cast<uint32_t>(acc[j]) + azp * static_cast<uint32_t>(t.b_corr[j]) -
                         static_cast<uint32_t>(t.b_zp[j]) * asum;
      if (t.c_i32 != nullptr) {
        t.c_i32[r * t.ldc + j] = static_cast<int32_t>(c);
      } else {
        float v = static_cast<float>(static_cast<int32_t>(c)) * t.scale[j];
        if (t.bias != nullptr) v = v + t.bias[j];
        t.c_f32[r * t.ldc + j] = v;
      }
    }
  }
}

void minmax_scalar(const float* x, size_t n, float* lo, float* hi) {
  float l = *lo, h = *hi;
  for (size_t i = 0; i < n; ++i) {
    l = std::min(l, x[i]);
    h = std::max(h, x[i]);
  }
  *lo = l;
  *hi = h;
}

void quantize_row_scalar(const float* x, size_t k, float scale, float zp, uint8_t* q,
                         int32_t* sum) {
  int32_t s = 0;
  for (size_t i = 0; i < k; ++i) {
    float v = std::nearbyint(x[i] / scale);
    v = std::min(std::max(v, -zp), 255.0f - zp);
    const auto u = static_cast<uint8_t>(static_cast<int32_t>(v + zp));
    q[i] = u;
    s += u;
  }
  *sum = s;
}

}  // namespace onnxplex::mlas
