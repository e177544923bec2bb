// Family (5): fp16 GEMM with bias and clamp (numpy float16 in and out; fp32 clamp bounds).
#include "bind_plain_gemm.h"

namespace onnxplex::kleidi::bind {
namespace {

struct GemmF16Api {
  using Elem = f16_bits;
  static constexpr Family family = Family::gemm_f16;
  static py::dtype dtype() { return float16_dtype(); }
  static constexpr auto pack = &pack_gemm_f16;
  static constexpr auto run = &gemm_f16;
  static constexpr const char* pack_name = "pack_gemm_f16";
  static constexpr const char* run_name = "gemm_f16";
  static constexpr const char* pack_doc =
      "Pack float16 weights b [K, N] ([N, K] if transpose_b) and float16 bias [N] for gemm_f16.";
  static constexpr const char* run_doc =
      "float16(clamp(a @ B + bias)): a float16 [M, K] C-contiguous, returns float16 [M, N]. "
      "The reference accumulates in fp32 and rounds once to fp16; the NEON variant accumulates "
      "in fp16 (see the kernel contract for its error bound).";
};

}  // namespace

void register_gemm_f16(py::module_& m) { register_plain_gemm<GemmF16Api>(m); }

}  // namespace onnxplex::kleidi::bind
