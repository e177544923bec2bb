// Portable IEEE binary16 <-> fp32 conversions for the reference kernels, tests and tools.
//
// The compiler's _Float16 does the work (GCC >= 12 on x86-64, where it calls libgcc's
// correctly rounded soft-float routines; Clang on aarch64, where it is one FCVT of base
// Armv8). It is used only to convert: no arithmetic is ever done in _Float16 here, so the
// results do not depend on how a compiler evaluates half-precision expressions.
//   f16_to_f32: exact (every fp16 value is an fp32 value).
//   f32_to_f16: round to nearest, ties to even; overflow gives +-inf, tiny values fp16
//               subnormals (no flush to zero); NaN stays NaN.
#pragma once

#include <cstring>

#include "ukernel.h"

namespace onnxplex::kleidi {

static_assert(sizeof(_Float16) == sizeof(f16_bits), "_Float16 must be IEEE binary16");

inline float f16_to_f32(f16_bits h) {
  _Float16 v;
  std::memcpy(&v, &h, sizeof v);
  return static_cast<float>(v);
}

inline f16_bits f32_to_f16(float f) {
  const _Float16 v = static_cast<_Float16>(f);
  f16_bits h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}

// From double in one rounding (no double rounding through fp32), for models that compute a
// value exactly in double first.
inline f16_bits f64_to_f16(double d) {
  const _Float16 v = static_cast<_Float16>(d);
  f16_bits h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}

}  // namespace onnxplex::kleidi
