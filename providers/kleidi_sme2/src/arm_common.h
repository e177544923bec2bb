// Helpers shared by the Arm (NEON / dotprod / i8mm) micro-kernels. Everything here has internal
// linkage: the including translation units are compiled with different -march flags, and an
// inline function with external linkage could be merged across them (an i8mm-compiled copy
// running on a NEON-only CPU). Only Advanced SIMD baseline intrinsics are used here.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace onnxplex::kleidi {
namespace {
namespace arm {

template <class T>
inline T load_scalar(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// min(max(v, lo), hi) with std::max / std::min semantics (as ref::clamp): keeps v unless it
// compares strictly beyond a bound, so signed zeros and NaN behave exactly as the reference.
inline float32x4_t clamp(float32x4_t v, float32x4_t lo, float32x4_t hi) {
  v = vbslq_f32(vcltq_f32(v, lo), lo, v);
  return vbslq_f32(vcltq_f32(hi, v), hi, v);
}

// Stores rows x cols of a row-major tile (row length ld elements) to dst with byte strides.
template <class T>
inline void store_tile(const T* tile, size_t ld, size_t rows, size_t cols, T* dst,
                       size_t stride_row, size_t stride_col) {
  auto* out = reinterpret_cast<char*>(dst);
  for (size_t i = 0; i < rows; ++i) {
    if (stride_col == sizeof(T)) {
      std::memcpy(out + i * stride_row, tile + i * ld, cols * sizeof(T));
    } else {
      for (size_t j = 0; j < cols; ++j) {
        std::memcpy(out + i * stride_row + j * stride_col, tile + i * ld + j, sizeof(T));
      }
    }
  }
}

// Runs a register-tile kernel over an m x n output with kr = 1 plain packed operands (LHS blocks
// of MR x k elements, RHS panels of NR bias elements then NR x k weights): for each MR x NR
// tile, tile_fn(a_block, panel, tile) computes all of it from the whole (zero-padded) block and
// panel into the row-major buffer `tile`, whose in-range part then goes to dst.
template <size_t MR, size_t NR, class T, class TileFn>
inline void for_each_tile(size_t m, size_t n, size_t k, const T* lhs, const T* rhs, T* dst,
                          size_t dst_stride_row, size_t dst_stride_col, TileFn tile_fn) {
  for (size_t i0 = 0; i0 < m; i0 += MR) {
    const T* a_block = lhs + (i0 / MR) * MR * k;
    for (size_t j0 = 0; j0 < n; j0 += NR) {
      T tile[MR * NR];
      tile_fn(a_block, rhs + (j0 / NR) * NR * (1 + k), tile);
      const size_t rows = m - i0 < MR ? m - i0 : MR, cols = n - j0 < NR ? n - j0 : NR;
      store_tile(tile, NR, rows, cols,
                 reinterpret_cast<T*>(reinterpret_cast<char*>(dst) + i0 * dst_stride_row +
                                      j0 * dst_stride_col),
                 dst_stride_row, dst_stride_col);
    }
  }
}

// 16 bytes of packed signed int4 (even element in the low nibble) -> 32 int8 elements in order:
// *lo gets elements 0..15 (bytes 0..7), *hi elements 16..31 (bytes 8..15).
inline void unpack_int4(const uint8_t* p, int8x16_t* lo, int8x16_t* hi) {
  const int8x16_t b = vreinterpretq_s8_u8(vld1q_u8(p));
  const int8x16_t even = vshrq_n_s8(vshlq_n_s8(b, 4), 4);  // sign-extended low nibbles
  const int8x16_t odd = vshrq_n_s8(b, 4);                   // sign-extended high nibbles
  *lo = vzip1q_s8(even, odd);
  *hi = vzip2q_s8(even, odd);
}

// SMMLA / 2x2-tile helpers: t01 holds [r0c0 r0c1 r1c0 r1c1] for columns (0,1), t23 for (2,3);
// returns row 0 (or row 1) of columns 0..3.
inline int32x4_t mmla_row0(int32x4_t t01, int32x4_t t23) {
  return vreinterpretq_s32_s64(
      vzip1q_s64(vreinterpretq_s64_s32(t01), vreinterpretq_s64_s32(t23)));
}
inline int32x4_t mmla_row1(int32x4_t t01, int32x4_t t23) {
  return vreinterpretq_s32_s64(
      vzip2q_s64(vreinterpretq_s64_s32(t01), vreinterpretq_s64_s32(t23)));
}
inline float32x4_t mmla_row0(float32x4_t t01, float32x4_t t23) {
  return vreinterpretq_f32_f64(
      vzip1q_f64(vreinterpretq_f64_f32(t01), vreinterpretq_f64_f32(t23)));
}
inline float32x4_t mmla_row1(float32x4_t t01, float32x4_t t23) {
  return vreinterpretq_f32_f64(
      vzip2q_f64(vreinterpretq_f64_f32(t01), vreinterpretq_f64_f32(t23)));
}

// qsi8cx epilogue for one row of 4 columns (the reference's arithmetic, one rounding per op):
//   y = clamp(float(acc + neg_zp * rsum) * (s_a * s_w) + bias)
inline float32x4_t qsi8cx_out(int32x4_t acc, int32_t neg_zp, float s_a, const uint8_t* rsum,
                              const uint8_t* s_w, const uint8_t* bias, float32x4_t lo,
                              float32x4_t hi) {
  const int32x4_t r = vreinterpretq_s32_u8(vld1q_u8(rsum));
  acc = vmlaq_s32(acc, r, vdupq_n_s32(neg_zp));  // wrap-around, as the reference's uint32
  const float32x4_t s = vmulq_f32(vdupq_n_f32(s_a), vreinterpretq_f32_u8(vld1q_u8(s_w)));
  const float32x4_t y =
      vaddq_f32(vmulq_f32(vcvtq_f32_s32(acc), s), vreinterpretq_f32_u8(vld1q_u8(bias)));
  return clamp(y, lo, hi);
}

// qsi4c32 epilogue for one row of 4 columns: y = clamp(s_a * (acc + float(neg_zp) * rsum) + bias)
inline float32x4_t qsi4c32_out(float32x4_t acc, int32_t neg_zp, float s_a, const uint8_t* rsum,
                               const uint8_t* bias, float32x4_t lo, float32x4_t hi) {
  const float32x4_t z = vmulq_f32(vdupq_n_f32(static_cast<float>(neg_zp)),
                                  vreinterpretq_f32_u8(vld1q_u8(rsum)));
  const float32x4_t y = vaddq_f32(vmulq_f32(vdupq_n_f32(s_a), vaddq_f32(acc, z)),
                                  vreinterpretq_f32_u8(vld1q_u8(bias)));
  return clamp(y, lo, hi);
}

}  // namespace arm
}  // namespace
}  // namespace onnxplex::kleidi
