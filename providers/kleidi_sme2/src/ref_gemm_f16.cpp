// Portable reference of family (5), fp16 GEMM with bias and clamp: fp16 storage, fp32
// arithmetic (ref::plain_tile: fp32 sum from 0 in k order, each product exact, one rounding per
// addition, + bias, clamp, then the one rounding to fp16), written against the packed layouts
// with its own (mr, nr, kr, sr) = (4, 8, 2, 1), as the fp32 reference (ref::PlainGemmRef).
#include "ref_common.h"
#include "variants.h"

namespace onnxplex::kleidi {

const GemmF16Ukernel gemm_f16_reference =
    make_gemm_f16<ref::PlainGemmRef<f16_bits>>("gemm_f16_reference_8x16", Variant::reference);

}  // namespace onnxplex::kleidi
