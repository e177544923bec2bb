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

// Stores rows x cols of a row-major tile (row length ld floats) to dst with byte strides.
inline void store_tile(const float* tile, size_t ld, size_t rows, size_t cols, float* dst,
                       size_t stride_row, size_t stride_col) {
  auto* out = reinterpret_cast<char*>(dst);
  for (size_t i = 0; i < rows; ++i) {
    if (stride_col == sizeof(float)) {
      std::memcpy(out + i * stride_row, tile + i * ld, cols * sizeof(float));
    } else {
      for (size_t j = 0; j < cols; ++j) {
        std::memcpy(out + i * stride_row + j * stride_col, tile + i * ld + j, sizeof(float));
      }
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
