// Conversions between float32 and the 16-bit floats (IEEE binary16 "float16" and bfloat16),
// for Cast and for half-precision models' edges. Exact as numpy (float16) and ml_dtypes
// (bfloat16) convert: round to nearest even, subnormals kept, overflow to infinity, a NaN
// stays a NaN with its sign (a signalling NaN's payload may come out quiet where F16C quiets
// it). Knows nothing about Python.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onnxplex::mlas {

// y[i] = x[i] converted, i in [0, n); `bf16` chooses bfloat16 over float16 for the 16-bit
// side. The best variant for this CPU (F16C for float16 where AVX2 is; the rest portable).
void f32_to_half(const float* x, uint16_t* y, size_t n, bool bf16);
void half_to_f32(const uint16_t* x, float* y, size_t n, bool bf16);

// Per variant (call the two above).
void f32_to_f16_portable(const float* x, uint16_t* y, size_t n);
void f16_to_f32_portable(const uint16_t* x, float* y, size_t n);
void f32_to_bf16_portable(const float* x, uint16_t* y, size_t n);
void bf16_to_f32_portable(const uint16_t* x, float* y, size_t n);
void f32_to_f16_avx2(const float* x, uint16_t* y, size_t n);
void f16_to_f32_avx2(const uint16_t* x, float* y, size_t n);
void f32_to_bf16_avx2(const float* x, uint16_t* y, size_t n);

}  // namespace onnxplex::mlas
