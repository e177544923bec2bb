// Family (1): fp32 GEMM with bias and clamp.
#include "bind_plain_gemm.h"

namespace onnxplex::kleidi::bind {
namespace {

struct GemmF32Api {
  using Elem = float;
  static constexpr Family family = Family::gemm_f32;
  static py::dtype dtype() { return py::dtype::of<float>(); }
  static constexpr auto pack = &pack_gemm_f32;
  static constexpr auto run = &gemm_f32;
  static constexpr const char* pack_name = "pack_gemm_f32";
  static constexpr const char* run_name = "gemm_f32";
  static constexpr const char* pack_doc =
      "Pack float32 weights b [K, N] ([N, K] if transpose_b) and bias [N] for gemm_f32.";
  static constexpr const char* run_doc =
      "clamp(a @ B + bias): a float32 [M, K] C-contiguous, returns float32 [M, N].";
};

}  // namespace

void register_gemm_f32(py::module_& m) { register_plain_gemm<GemmF32Api>(m); }

}  // namespace onnxplex::kleidi::bind
