// Portable packers of the fp16 GEMM family: the plain layouts with 2-byte elements. Values are
// moved as bit patterns, never converted.
#include "pack.h"
#include "pack_plain.h"

namespace onnxplex::kleidi {

void lhs_pack_f16(size_t m, size_t k, size_t mr, size_t kr, size_t sr, const f16_bits* lhs,
                  size_t lhs_stride_row, void* lhs_packed) {
  plain::lhs_pack("lhs_pack_f16", m, k, mr, kr, sr, lhs, lhs_stride_row, lhs_packed);
}

void rhs_pack_f16(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const f16_bits* rhs,
                  size_t stride_k, size_t stride_n, const f16_bits* bias, void* rhs_packed) {
  plain::rhs_pack("rhs_pack_f16", n, k, nr, kr, sr, rhs, stride_k, stride_n, bias, rhs_packed);
}

}  // namespace onnxplex::kleidi
