// Portable reference of family (4): qai8dx activations x qsi4c32 weights -> fp32.
// Per block an exact int32 dot product; blocks accumulate in fp32 in order (no FMA), then
// s_a * (acc + float(-zp) * rsum) + bias, then clamp.
#include <stdexcept>
#include <string>

#include "ref_common.h"
#include "variants.h"

namespace onnxplex::kleidi {
namespace {

struct RefQGemmQsi4c32 {
  static size_t m_step() { return 4; }
  static size_t n_step() { return 4; }
  static size_t mr() { return 4; }
  static size_t nr() { return 4; }
  static size_t kr() { return 8; }
  static size_t sr() { return 2; }
  static void run(size_t m, size_t n, size_t k, size_t bl, const void* lhs_packed,
                  const void* rhs_packed, float* dst, size_t dst_stride_row,
                  size_t dst_stride_col, float clamp_min, float clamp_max) {
    if (bl != kInt4Block || k % bl != 0) {
      throw std::invalid_argument("qgemm_qsi4c32: K=" + std::to_string(k) +
                                  " must be a multiple of the block length 32 (bl=" +
                                  std::to_string(bl) + ")");
    }
    const size_t k_int = layout::q_k_int(k, kr());  // == k here: k % 32 == 0 and kr | 32
    const size_t depth = kr() / sr();
    const size_t blocks = k / bl;
    const size_t block_bytes = layout::rhs_qsi4c32_block_bytes(nr(), bl);
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
        const uint8_t* panel = rhs + (j / nr()) * layout::rhs_qsi4c32_panel_bytes(k, nr(), bl);
        const size_t c = j % nr();
        float acc = 0.0f;
        for (size_t b = 0; b < blocks; ++b) {
          const uint8_t* vals = panel + b * block_bytes;
          int32_t isum = 0;
          for (size_t jj = 0; jj < bl; ++jj) {
            const size_t idx = interleaved_index(c, jj, nr(), depth);
            const uint8_t byte = vals[idx / 2];
            const int nib = (idx % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
            const int w = nib >= 8 ? nib - 16 : nib;  // sign-extend int4
            isum += a[interleaved_index(r, b * bl + jj, mr(), depth)] * w;
          }
          const auto scale = ref::load<float>(vals + nr() * bl / 2 + c * sizeof(float));
          acc += static_cast<float>(isum) * scale;
        }
        const uint8_t* tail = panel + blocks * block_bytes;
        const auto rsum = ref::load<float>(tail + c * sizeof(float));
        const auto bias = ref::load<float>(tail + (nr() + c) * sizeof(float));
        const float y = s_a * (acc + static_cast<float>(neg_zp) * rsum) + bias;
        ref::store_f32(dst, i, j, dst_stride_row, dst_stride_col,
                       ref::clamp(y, clamp_min, clamp_max));
      }
    }
  }
};

}  // namespace

const QGemmQsi4c32Ukernel qgemm_qsi4c32_reference =
    make_qgemm_qsi4c32<RefQGemmQsi4c32>("qgemm_qai8dx_qsi4c32_reference_4x4", Variant::reference);

}  // namespace onnxplex::kleidi
