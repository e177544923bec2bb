// Portable packers of the fp32 families (GEMM and indirect matmul).
#include <cstring>
#include <stdexcept>
#include <string>

#include "pack.h"
#include "pack_plain.h"
#include "ukernel.h"

namespace onnxplex::kleidi {

using plain::check_params;

void lhs_pack_f32(size_t m, size_t k, size_t mr, size_t kr, size_t sr, const float* lhs,
                  size_t lhs_stride_row, void* lhs_packed) {
  plain::lhs_pack("lhs_pack_f32", m, k, mr, kr, sr, lhs, lhs_stride_row, lhs_packed);
}

void rhs_pack_f32(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const float* rhs,
                  size_t stride_k, size_t stride_n, const float* bias, void* rhs_packed) {
  plain::rhs_pack("rhs_pack_f32", n, k, nr, kr, sr, rhs, stride_k, stride_n, bias, rhs_packed);
}

void lhs_imatmul_pack_f32(size_t m, size_t k_chunk_count, size_t k_chunk_length, size_t m_step,
                          size_t mr, size_t kr, size_t sr, const void* const* indirection,
                          size_t ptr_offset, const void* pad_ptr, void* lhs_packed) {
  check_params("lhs_imatmul_pack_f32", mr, kr, sr);
  if (m_step == 0 || m_step % mr != 0) {
    throw std::invalid_argument("lhs_imatmul_pack_f32: m_step must be a multiple of mr");
  }
  const size_t chunk_pad = round_up(k_chunk_length, kr);
  const size_t k_pad = k_chunk_count * chunk_pad;
  const size_t depth = kr / sr;
  auto* out = static_cast<float*>(lhs_packed);
  for (size_t mb = 0; mb < div_up(m, mr); ++mb) {
    float* block = out + mb * mr * k_pad;
    for (size_t r = 0; r < mr; ++r) {
      const size_t row = mb * mr + r;
      const size_t step_block = row / m_step;
      for (size_t c = 0; c < k_chunk_count; ++c) {
        const float* src = nullptr;
        if (row < m) {
          const void* p = indirection[(step_block * k_chunk_count + c) * m_step + row % m_step];
          src = p == pad_ptr ? static_cast<const float*>(pad_ptr)
                             : reinterpret_cast<const float*>(
                                   reinterpret_cast<uintptr_t>(p) + ptr_offset);
        }
        for (size_t j = 0; j < chunk_pad; ++j) {
          block[interleaved_index(r, c * chunk_pad + j, mr, depth)] =
              (src && j < k_chunk_length) ? src[j] : 0.0f;
        }
      }
    }
  }
}

void rhs_imatmul_pack_f32(size_t n, size_t k_chunk_count, size_t k_chunk_length, size_t nr,
                          size_t kr, size_t sr, const float* rhs, size_t stride_chunk,
                          size_t stride_k, size_t stride_n, const float* bias, void* rhs_packed) {
  plain::rhs_pack_chunks("rhs_imatmul_pack_f32", n, k_chunk_count, k_chunk_length, nr, kr, sr,
                         rhs, stride_chunk, stride_k, stride_n, bias, rhs_packed);
}

void conv2d_indirection(size_t h, size_t w, size_t c, size_t kh, size_t kw, size_t stride_h,
                        size_t stride_w, size_t pad_top, size_t pad_left, size_t dil_h,
                        size_t dil_w, size_t out_h, size_t out_w, size_t m_step,
                        const void* pad_ptr, const void** table) {
  const size_t m = out_h * out_w;
  const size_t chunks = kh * kw;
  for (size_t mb = 0; mb < div_up(m, m_step); ++mb) {
    for (size_t ch = 0; ch < chunks; ++ch) {
      const size_t ky = ch / kw, kx = ch % kw;
      for (size_t r = 0; r < m_step; ++r) {
        const size_t p = mb * m_step + r;
        const void* entry = pad_ptr;
        if (p < m) {
          // Signed arithmetic: padding makes the top-left taps negative.
          const long long iy = static_cast<long long>((p / out_w) * stride_h + ky * dil_h) -
                               static_cast<long long>(pad_top);
          const long long ix = static_cast<long long>((p % out_w) * stride_w + kx * dil_w) -
                               static_cast<long long>(pad_left);
          if (iy >= 0 && ix >= 0 && iy < static_cast<long long>(h) &&
              ix < static_cast<long long>(w)) {
            const size_t byte_offset =
                (static_cast<size_t>(iy) * w + static_cast<size_t>(ix)) * c * sizeof(float);
            entry = reinterpret_cast<const void*>(static_cast<uintptr_t>(byte_offset));
          }
        }
        table[(mb * chunks + ch) * m_step + r] = entry;
      }
    }
  }
}

}  // namespace onnxplex::kleidi
