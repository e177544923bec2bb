// Portable packers of the fp32 families (GEMM and indirect matmul).
#include <cstring>
#include <stdexcept>
#include <string>

#include "pack.h"
#include "ukernel.h"

namespace onnxplex::kleidi {
namespace {

void check_params(const char* who, size_t rows, size_t kr, size_t sr) {
  if (rows == 0 || kr == 0 || sr == 0 || kr % sr != 0) {
    throw std::invalid_argument(std::string(who) + ": need rows > 0 and kr a nonzero multiple "
                                "of sr (got rows=" + std::to_string(rows) + ", kr=" +
                                std::to_string(kr) + ", sr=" + std::to_string(sr) + ")");
  }
}

}  // namespace

void lhs_pack_f32(size_t m, size_t k, size_t mr, size_t kr, size_t sr, const float* lhs,
                  size_t lhs_stride_row, void* lhs_packed) {
  check_params("lhs_pack_f32", mr, kr, sr);
  const size_t k_pad = layout::f32_k_pad(k, kr);
  const size_t depth = kr / sr;
  auto* out = static_cast<float*>(lhs_packed);
  for (size_t mb = 0; mb < div_up(m, mr); ++mb) {
    float* block = out + mb * mr * k_pad;
    for (size_t r = 0; r < mr; ++r) {
      const size_t row = mb * mr + r;
      const auto* src = reinterpret_cast<const float*>(
          reinterpret_cast<const char*>(lhs) + row * lhs_stride_row);
      for (size_t kk = 0; kk < k_pad; ++kk) {
        block[interleaved_index(r, kk, mr, depth)] = (row < m && kk < k) ? src[kk] : 0.0f;
      }
    }
  }
}

void rhs_pack_f32(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const float* rhs,
                  size_t stride_k, size_t stride_n, const float* bias, void* rhs_packed) {
  check_params("rhs_pack_f32", nr, kr, sr);
  const size_t k_pad = layout::f32_k_pad(k, kr);
  const size_t depth = kr / sr;
  auto* out = static_cast<float*>(rhs_packed);
  for (size_t nb = 0; nb < div_up(n, nr); ++nb) {
    float* panel = out + nb * nr * (1 + k_pad);
    float* weights = panel + nr;
    for (size_t c = 0; c < nr; ++c) {
      const size_t col = nb * nr + c;
      panel[c] = (col < n && bias) ? bias[col] : 0.0f;
      for (size_t kk = 0; kk < k_pad; ++kk) {
        weights[interleaved_index(c, kk, nr, depth)] =
            (col < n && kk < k) ? rhs[kk * stride_k + col * stride_n] : 0.0f;
      }
    }
  }
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
  check_params("rhs_imatmul_pack_f32", nr, kr, sr);
  const size_t chunk_pad = round_up(k_chunk_length, kr);
  const size_t k_pad = k_chunk_count * chunk_pad;
  const size_t depth = kr / sr;
  auto* out = static_cast<float*>(rhs_packed);
  for (size_t nb = 0; nb < div_up(n, nr); ++nb) {
    float* panel = out + nb * nr * (1 + k_pad);
    float* weights = panel + nr;
    for (size_t col_in = 0; col_in < nr; ++col_in) {
      const size_t col = nb * nr + col_in;
      panel[col_in] = (col < n && bias) ? bias[col] : 0.0f;
      for (size_t c = 0; c < k_chunk_count; ++c) {
        for (size_t j = 0; j < chunk_pad; ++j) {
          weights[interleaved_index(col_in, c * chunk_pad + j, nr, depth)] =
              (col < n && j < k_chunk_length)
                  ? rhs[c * stride_chunk + j * stride_k + col * stride_n]
                  : 0.0f;
        }
      }
    }
  }
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
