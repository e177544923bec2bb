// Helpers shared by the portable reference kernels (not part of the contract).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ukernel.h"

namespace onnxplex::kleidi::ref {

inline float clamp(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

inline void store_f32(float* dst, size_t i, size_t j, size_t stride_row, size_t stride_col,
                      float v) {
  std::memcpy(reinterpret_cast<char*>(dst) + i * stride_row + j * stride_col, &v, sizeof(v));
}

template <class T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The fp32 tile loop shared by the GEMM and indirect-matmul references (same packed layouts).
void f32_tile(size_t m, size_t n, size_t k, size_t mr, size_t nr, size_t kr, size_t sr,
              const float* lhs, const float* rhs, float* dst, size_t dst_stride_row,
              size_t dst_stride_col, float clamp_min, float clamp_max);

}  // namespace onnxplex::kleidi::ref
