// Shared by the SME2 kernels (aarch64 only). Knows nothing about Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_features.h"

namespace onnxplex::kleidi::sme2 {

// Streaming vector length in 32-bit lanes, read once with RDSVL. Without SME it is 4 (128 bits),
// which keeps the tile getters harmless on CPUs that cannot run an SME2 variant: dispatch never
// runs one there.
inline size_t svl_words() {
  static const size_t words = [] {
    if (!cpu_features().sme) return size_t{4};
    uint64_t bytes;
    __asm__ volatile(".arch_extension sme\n rdsvl %0, #1\n" : "=r"(bytes));
    return static_cast<size_t>(bytes / 4);
  }();
  return words;
}

// The argument block of every SME2 2VL x 2VL kernel (fp32, fp16, int8, int4): the asm loads it
// from one pointer at these fixed offsets.
struct MopaArgs {
  const void* lhs;          // 0: packed LHS block of row 0
  const void* rhs;          // 8: packed RHS panel of column 0
  void* dst;                // 16
  uint64_t m;               // 24 (>= 1)
  uint64_t n;               // 32 (>= 1)
  uint64_t k_steps;         // 40: trip count of the kernel's K loop (may be 0)
  uint64_t dst_stride_row;  // 48 bytes
  uint64_t dst_stride_col;  // 56 bytes (element size = contiguous; else through row_buf)
  uint64_t lhs_block;       // 64 bytes between LHS blocks
  uint64_t rhs_panel;       // 72 bytes between RHS panels
  uint32_t clamp_min;       // 80 (fp32 bits)
  uint32_t clamp_max;       // 84
  void* row_buf;            // 88: 2 * VL elements (<= 128: SVL is at most 2048 bits)
  void* acc_buf;            // 96: kernel-specific scratch (the int4 kernel's fp32 tile), or null
};
static_assert(offsetof(MopaArgs, row_buf) == 88 && offsetof(MopaArgs, acc_buf) == 96,
              "asm offsets");

inline MopaArgs mopa_args(const void* lhs, const void* rhs, void* dst, size_t m, size_t n,
                          size_t k_steps, size_t dst_stride_row, size_t dst_stride_col,
                          size_t lhs_block, size_t rhs_panel, float clamp_min, float clamp_max,
                          void* row_buf) {
  MopaArgs a{lhs, rhs, dst, m, n, k_steps, dst_stride_row, dst_stride_col, lhs_block, rhs_panel,
             0, 0, row_buf, nullptr};
  std::memcpy(&a.clamp_min, &clamp_min, 4);
  std::memcpy(&a.clamp_max, &clamp_max, 4);
  return a;
}

// The tile getters of a 2VL x 2VL kernel: mr = nr = m_step = n_step = 2 VL; K packed in runs of
// KR (sr = 1).
template <size_t KR>
struct Tile2VL {
  static size_t m_step() { return 2 * svl_words(); }
  static size_t n_step() { return 2 * svl_words(); }
  static size_t mr() { return 2 * svl_words(); }
  static size_t nr() { return 2 * svl_words(); }
  static size_t kr() { return KR; }
  static size_t sr() { return 1; }
};

}  // namespace onnxplex::kleidi::sme2
