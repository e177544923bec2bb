// Float32 GELU (with an optional bias added first) for Gelu, BiasGelu and FastGelu. Knows
// nothing about Python.
//
// y = x * sigmoid(2 u(x)), which is x * (0.5 + 0.5 tanh(u)): the tanh form's
// u = x * (a + b x^2), or, for the exact (erf) form, the fit erf(x / sqrt(2)) = tanh(u) with
// u = x * Q(min(x^2, clamp)), Q a polynomial in x^2 (its coefficients come from the caller, as
// the numpy path fits them). NaN propagates; large |x| saturate to x or -0.
#pragma once

#include <cstddef>

namespace onnxplex::mlas {

struct GeluForm {
  const float* coeffs;  // Q's coefficients, highest power first
  size_t count;
  float clamp;          // x^2 is clamped to this before Q (the fit's range)
};

// y[i] = gelu(x[i] + bias[i % bias_count]) for i in [0, n) (bias may be null). x and y may be
// the same array. threads 0 = all.
void gelu_f32(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
              const GeluForm& form, size_t threads);

void gelu_f32_portable(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
                       const GeluForm& form);
void gelu_f32_avx2(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
                   const GeluForm& form);
void gelu_f32_avx512(const float* x, const float* bias, size_t bias_count, float* y, size_t n,
                     const GeluForm& form);

}  // namespace onnxplex::mlas
