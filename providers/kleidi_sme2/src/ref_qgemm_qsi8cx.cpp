// Portable reference of family (3): qai8dx activations x qsi8cx weights -> fp32.
// int32 accumulation (exact for K <= kQuantMaxK; wrap-around arithmetic done unsigned), then
// float(acc) * (s_a * s_w) + bias, then clamp; no FMA contraction.
#include "ref_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

struct RefQGemmQsi8cx {
  static size_t m_step() { return 4; }
  static size_t n_step() { return 4; }
  static size_t mr() { return 4; }
  static size_t nr() { return 4; }
  static size_t kr() { return 8; }
  static size_t sr() { return 2; }
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    const size_t k_int = layout::q_k_int(k, kr());
    const size_t depth = kr() / sr();
    const auto* lhs = static_cast<const uint8_t*>(lhs_packed);
    const auto* rhs = static_cast<const uint8_t*>(rhs_packed);
    for (size_t i = 0; i < m; ++i) {
      const uint8_t* lblock = lhs + (i / mr()) * layout::lhs_qai8dx_block_bytes(k, mr(), kr());
      const size_t r = i % mr();
      const auto* a = reinterpret_cast<const int8_t*>(lblock);
      const auto neg_zp = ref::load<int32_t>(lblock + mr() * k_int + r * sizeof(int32_t));
      const auto s_a =
          ref::load<float>(lblock + mr() * (k_int + sizeof(int32_t)) + r * sizeof(float));
      for (size_t j = 0; j < n; ++j) {
        const uint8_t* panel = rhs + (j / nr()) * layout::rhs_qsi8cx_panel_bytes(k, nr(), kr());
        const size_t c = j % nr();
        const auto* w = reinterpret_cast<const int8_t*>(panel);
        const uint8_t* tail = panel + nr() * k_int;
        const auto rsum = ref::load<int32_t>(tail + c * sizeof(int32_t));
        const auto s_w = ref::load<float>(tail + nr() * sizeof(int32_t) + c * sizeof(float));
        const auto bias =
            ref::load<float>(tail + nr() * (sizeof(int32_t) + sizeof(float)) + c * sizeof(float));
        uint32_t acc = 0;  // unsigned: intermediate wrap-around is defined, the result is exact
        for (size_t kk = 0; kk < k_int; ++kk) {
          acc += static_cast<uint32_t>(a[interleaved_index(r, kk, mr(), depth)] *
                                       w[interleaved_index(c, kk, nr(), depth)]);
        }
        acc += static_cast<uint32_t>(neg_zp) * static_cast<uint32_t>(rsum);
        const float y = static_cast<float>(static_cast<int32_t>(acc)) * (s_a * s_w) + bias;
        ref::store_f32(dst, i, j, dst_stride_row, dst_stride_col,
                       ref::clamp(y, clamp_min, clamp_max));
      }
    }
  }
};

}  // namespace

const QGemmQsi8cxUkernel qgemm_qsi8cx_reference =
    make_qgemm_qsi8cx<RefQGemmQsi8cx>("qgemm_qai8dx_qsi8cx_reference_4x4", Variant::reference);

}  // namespace onnxplex::kleidi
