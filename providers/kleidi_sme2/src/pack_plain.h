// The plain (unquantized) GEMM packers as templates over the element type, shared by the fp32
// (pack_f32.cpp) and fp16 (pack_f16.cpp) families: packing only moves elements, so one body
// serves float and fp16 bit patterns alike. Internal to the packers; layouts in ukernel.h.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "ukernel.h"

namespace onnxplex::kleidi::plain {

inline void check_params(const char* who, size_t rows, size_t kr, size_t sr) {
  if (rows == 0 || kr == 0 || sr == 0 || kr % sr != 0) {
    throw std::invalid_argument(std::string(who) + ": need rows > 0 and kr a nonzero multiple "
                                "of sr (got rows=" + std::to_string(rows) + ", kr=" +
                                std::to_string(kr) + ", sr=" + std::to_string(sr) + ")");
  }
}

// Rows [0, m) of `lhs` (row stride in bytes, unit column stride) into layout::lhs_plain.
template <class T>
void lhs_pack(const char* who, size_t m, size_t k, size_t mr, size_t kr, size_t sr, const T* lhs,
              size_t lhs_stride_row, void* lhs_packed) {
  check_params(who, mr, kr, sr);
  const size_t k_pad = layout::plain_k_pad(k, kr);
  const size_t depth = kr / sr;
  auto* out = static_cast<T*>(lhs_packed);
  for (size_t mb = 0; mb < div_up(m, mr); ++mb) {
    T* block = out + mb * mr * k_pad;
    for (size_t r = 0; r < mr; ++r) {
      const size_t row = mb * mr + r;
      const auto* src =
          reinterpret_cast<const T*>(reinterpret_cast<const char*>(lhs) + row * lhs_stride_row);
      for (size_t kk = 0; kk < k_pad; ++kk) {
        block[interleaved_index(r, kk, mr, depth)] = (row < m && kk < k) ? src[kk] : T(0);
      }
    }
  }
}

// RHS with bias, K in k_chunk_count chunks of k_chunk_length values, each chunk padded to kr on
// its own: element (chunk c, index j, column n) is rhs[c * stride_chunk + j * stride_k +
// n * stride_n]; bias may be null (zeros). Writes layout::rhs_plain for
// k = k_chunk_count * round_up(k_chunk_length, kr) (the indirect-matmul RHS); one chunk of k is
// the plain GEMM's RHS.
template <class T>
void rhs_pack_chunks(const char* who, size_t n, size_t k_chunk_count, size_t k_chunk_length,
                     size_t nr, size_t kr, size_t sr, const T* rhs, size_t stride_chunk,
                     size_t stride_k, size_t stride_n, const T* bias, void* rhs_packed) {
  check_params(who, nr, kr, sr);
  const size_t chunk_pad = round_up(k_chunk_length, kr);
  const size_t k_pad = k_chunk_count * chunk_pad;
  const size_t depth = kr / sr;
  auto* out = static_cast<T*>(rhs_packed);
  for (size_t nb = 0; nb < div_up(n, nr); ++nb) {
    T* panel = out + nb * nr * (1 + k_pad);
    T* weights = panel + nr;
    for (size_t col_in = 0; col_in < nr; ++col_in) {
      const size_t col = nb * nr + col_in;
      panel[col_in] = (col < n && bias) ? bias[col] : T(0);
      for (size_t c = 0; c < k_chunk_count; ++c) {
        for (size_t j = 0; j < chunk_pad; ++j) {
          weights[interleaved_index(col_in, c * chunk_pad + j, nr, depth)] =
              (col < n && j < k_chunk_length)
                  ? rhs[c * stride_chunk + j * stride_k + col * stride_n]
                  : T(0);
        }
      }
    }
  }
}

// Element (k, n) is rhs[k * stride_k + n * stride_n]; bias may be null (zeros). Writes
// layout::rhs_plain.
template <class T>
void rhs_pack(const char* who, size_t n, size_t k, size_t nr, size_t kr, size_t sr, const T* rhs,
              size_t stride_k, size_t stride_n, const T* bias, void* rhs_packed) {
  rhs_pack_chunks(who, n, 1, k, nr, kr, sr, rhs, 0, stride_k, stride_n, bias, rhs_packed);
}

}  // namespace onnxplex::kleidi::plain
