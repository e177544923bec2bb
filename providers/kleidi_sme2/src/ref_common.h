// Helpers shared by the portable reference kernels (not part of the contract).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fp16.h"
#include "ukernel.h"

namespace onnxplex::kleidi::ref {

inline float clamp(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

template <class T>
inline void store(T* dst, size_t i, size_t j, size_t stride_row, size_t stride_col, T v) {
  std::memcpy(reinterpret_cast<char*>(dst) + i * stride_row + j * stride_col, &v, sizeof(v));
}
inline void store_f32(float* dst, size_t i, size_t j, size_t stride_row, size_t stride_col,
                      float v) {
  store(dst, i, j, stride_row, stride_col, v);
}

template <class T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Element type <-> the fp32 the reference computes in (fp16: exact widening, one rounding back).
inline float widen(float v) { return v; }
inline float widen(f16_bits v) { return f16_to_f32(v); }
template <class T>
T narrow(float v);
template <>
inline float narrow<float>(float v) { return v; }
template <>
inline f16_bits narrow<f16_bits>(float v) { return f32_to_f16(v); }

// The plain-GEMM tile loop over the packed layouts (layout::lhs_plain / rhs_plain with
// elem = sizeof(T)), for any (mr, nr, kr, sr). Per element, all in fp32 with one rounding per
// operation (the including TUs are built with -ffp-contract=off): acc = 0; acc += a * b for
// k = 0..K-1; acc += bias; clamp; convert to T (fp16: the only other rounding).
template <class T>
void plain_tile(size_t m, size_t n, size_t k, size_t mr, size_t nr, size_t kr, size_t sr,
                const T* lhs, const T* rhs, T* dst, size_t dst_stride_row, size_t dst_stride_col,
                float clamp_min, float clamp_max) {
  const size_t k_pad = layout::plain_k_pad(k, kr);
  const size_t depth = kr / sr;
  for (size_t i = 0; i < m; ++i) {
    const T* lblock = lhs + (i / mr) * mr * k_pad;
    const size_t r = i % mr;
    for (size_t j = 0; j < n; ++j) {
      const T* panel = rhs + (j / nr) * nr * (1 + k_pad);
      const size_t c = j % nr;
      float acc = 0.0f;
      for (size_t kk = 0; kk < k; ++kk) {
        acc += widen(lblock[interleaved_index(r, kk, mr, depth)]) *
               widen(panel[nr + interleaved_index(c, kk, nr, depth)]);
      }
      acc += widen(panel[c]);
      store(dst, i, j, dst_stride_row, dst_stride_col,
            narrow<T>(clamp(acc, clamp_min, clamp_max)));
    }
  }
}

// The plain-GEMM reference variants (families (1) and (5)), traits for make_plain_gemm: tiles
// of 8 x 16 packed with mr 4, nr 8 and kr 2, so the packers' interleaving is part of what they
// check. Only TUs built with -ffp-contract=off may instantiate it (see plain_tile).
template <class T>
struct PlainGemmRef {
  static size_t m_step() { return 8; }
  static size_t n_step() { return 16; }
  static size_t mr() { return 4; }
  static size_t nr() { return 8; }
  static size_t kr() { return 2; }
  static size_t sr() { return 1; }
  static void run(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                  T* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                  float clamp_max) {
    plain_tile(m, n, k, mr(), nr(), kr(), sr(), static_cast<const T*>(lhs_packed),
               static_cast<const T*>(rhs_packed), dst, dst_stride_row, dst_stride_col, clamp_min,
               clamp_max);
  }
};

// The fp32 tile loop shared by the GEMM and indirect-matmul references (same packed layouts).
void f32_tile(size_t m, size_t n, size_t k, size_t mr, size_t nr, size_t kr, size_t sr,
              const float* lhs, const float* rhs, float* dst, size_t dst_stride_row,
              size_t dst_stride_col, float clamp_min, float clamp_max);

}  // namespace onnxplex::kleidi::ref
