// Table of contents of the _kleidi extension: each family registers itself from its own file.
#include <pybind11/pybind11.h>

#include "bind_util.h"

PYBIND11_MODULE(_kleidi, m) {
  m.doc() = "onnxplex Kleidi-style micro-kernels (native part of the kleidi_sme2 provider)";
  using namespace onnxplex::kleidi::bind;
  register_common(m);         // cpu_features, variants, ukernel_info, PackedRhs, clamp_f32
  register_gemm_f32(m);       // (1) pack_gemm_f32, gemm_f32
  register_conv_f32(m);       // (2) pack_conv2d_f32, conv2d_f32
  register_qgemm_qsi8cx(m);   // (3) quantize_qai8dx, pack_qsi8cx, qgemm_qsi8cx
  register_qgemm_qsi4c32(m);  // (4) matmulnbits_to_qsu4c32, pack_qsi4c32, qgemm_qsi4c32
  register_gemm_f16(m);       // (5) pack_gemm_f16, gemm_f16
}
