// The micro-kernel contract of the Kleidi provider: one struct of function pointers per kernel
// family, filled in once per ISA variant (reference, NEON, dotprod, i8mm, SME2).
//
// The shape follows KleidiAI's published interface (see shared/reference/kleidiai-kernels.md
// section 1): a kernel computes any rectangle of the output whose top-left corner is a multiple
// of (m_step, n_step); tiling and threading are the caller's; weights (RHS) are packed once,
// activations (LHS) are packed per call. Getters are functions, not constants, because SME2
// variants derive mr/nr from the streaming vector length at run time.
//
// Packed layouts are ours. They are parameterised by the variant's (mr, nr, kr, sr) and shared by
// every variant of a family, so one portable packer (pack.h) serves all variants; the layout
// helpers below are the single definition of every offset and size.
//
// Run-time pointers: `lhs_packed` points at the packed block that holds row m_idx (i.e. base +
// get_lhs_packed_offset(m_idx, ...)), `rhs_packed` at the panel holding column n_idx, `dst` at
// element (m_idx, n_idx). Strides are in bytes. clamp_min <= clamp_max is the caller's duty.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onnxplex::kleidi {

// Variants in increasing order of preference; dispatch picks the highest one the CPU supports.
enum class Variant : int { reference = 0, neon = 1, dotprod = 2, i8mm = 3, sme2 = 4 };
constexpr int kVariantCount = 5;

enum class Family : int {
  gemm_f32 = 0,
  igemm_f32 = 1,
  qgemm_qsi8cx = 2,
  qgemm_qsi4c32 = 3,
  gemm_f16 = 4,
};
constexpr int kFamilyCount = 5;

// IEEE binary16 values cross every interface as their bit patterns (uint16_t): no half-precision
// arithmetic type is needed outside the kernels that compute with one, and copying never
// touches a value (a signalling NaN stays as it is).
using f16_bits = uint16_t;

// ---------------------------------------------------------------------------------------------
// Layout arithmetic (shared by packers, kernels and callers).

constexpr size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
constexpr size_t round_up(size_t a, size_t b) { return div_up(a, b) * b; }

// Inside a packed block of `rows` rows (mr for LHS, nr for RHS) the K axis is cut into runs of
// `depth = kr / sr` elements; run j of every row is stored before run j + 1 of any row:
//   element (r, kk) -> ((kk / depth) * rows + r) * depth + kk % depth
constexpr size_t interleaved_index(size_t r, size_t kk, size_t rows, size_t depth) {
  return ((kk / depth) * rows + r) * depth + kk % depth;
}

// The quantized families pad K to a multiple of this (and of kr); padding is zero in the RHS.
constexpr size_t kQuantKAlign = 32;
// Block length of the int4 family (one fp32 scale per 32 weights along K).
constexpr size_t kInt4Block = 32;

namespace layout {

// Plain (unquantized) operands whose elements are `elem` bytes (fp32: 4, fp16: 2).
// LHS: [ceil(m/mr)] blocks of mr x k_pad elements (k_pad = round_up(k, kr)); pad rows are 0.
constexpr size_t plain_k_pad(size_t k, size_t kr) { return round_up(k, kr); }
constexpr size_t lhs_plain_block_bytes(size_t k, size_t mr, size_t kr, size_t elem) {
  return mr * plain_k_pad(k, kr) * elem;
}
constexpr size_t lhs_plain_offset(size_t m_idx, size_t k, size_t mr, size_t kr, size_t elem) {
  return (m_idx / mr) * lhs_plain_block_bytes(k, mr, kr, elem);
}
constexpr size_t lhs_plain_size(size_t m, size_t k, size_t mr, size_t kr, size_t elem) {
  return div_up(m, mr) * lhs_plain_block_bytes(k, mr, kr, elem);
}
// RHS panel of nr columns: nr bias elements, then nr x k_pad weights (interleaved), all of the
// operand's element type. Columns past n are zero (weights and bias).
constexpr size_t rhs_plain_panel_bytes(size_t k, size_t nr, size_t kr, size_t elem) {
  return nr * (1 + plain_k_pad(k, kr)) * elem;
}
constexpr size_t rhs_plain_offset(size_t n_idx, size_t k, size_t nr, size_t kr, size_t elem) {
  return (n_idx / nr) * rhs_plain_panel_bytes(k, nr, kr, elem);
}
constexpr size_t rhs_plain_size(size_t n, size_t k, size_t nr, size_t kr, size_t elem) {
  return div_up(n, nr) * rhs_plain_panel_bytes(k, nr, kr, elem);
}

// fp32 instances of the plain layouts.
constexpr size_t f32_k_pad(size_t k, size_t kr) { return plain_k_pad(k, kr); }
constexpr size_t lhs_f32_block_bytes(size_t k, size_t mr, size_t kr) {
  return lhs_plain_block_bytes(k, mr, kr, sizeof(float));
}
constexpr size_t lhs_f32_offset(size_t m_idx, size_t k, size_t mr, size_t kr) {
  return lhs_plain_offset(m_idx, k, mr, kr, sizeof(float));
}
constexpr size_t lhs_f32_size(size_t m, size_t k, size_t mr, size_t kr) {
  return lhs_plain_size(m, k, mr, kr, sizeof(float));
}
constexpr size_t rhs_f32_panel_bytes(size_t k, size_t nr, size_t kr) {
  return rhs_plain_panel_bytes(k, nr, kr, sizeof(float));
}
constexpr size_t rhs_f32_offset(size_t n_idx, size_t k, size_t nr, size_t kr) {
  return rhs_plain_offset(n_idx, k, nr, kr, sizeof(float));
}
constexpr size_t rhs_f32_size(size_t n, size_t k, size_t nr, size_t kr) {
  return rhs_plain_size(n, k, nr, kr, sizeof(float));
}

// Indirect matmul: K = k_chunk_count chunks of k_chunk_length; each chunk is padded to kr on
// its own, so the packed operands are the fp32 ones with k = kcc * round_up(kcl, kr).
constexpr size_t imatmul_k(size_t kcc, size_t kcl, size_t kr) { return kcc * round_up(kcl, kr); }

// qai8dx LHS block of mr rows: mr x k_int int8 (interleaved), mr int32 (-zero_point),
// mr fp32 scale. k_int = round_up(k, max(32, kr)).
constexpr size_t q_k_int(size_t k, size_t kr) {
  return round_up(k, kr > kQuantKAlign ? kr : kQuantKAlign);
}
constexpr size_t lhs_qai8dx_block_bytes(size_t k, size_t mr, size_t kr) {
  return mr * q_k_int(k, kr) + mr * sizeof(int32_t) + mr * sizeof(float);
}
constexpr size_t lhs_qai8dx_offset(size_t m_idx, size_t k, size_t mr, size_t kr) {
  return (m_idx / mr) * lhs_qai8dx_block_bytes(k, mr, kr);
}
constexpr size_t lhs_qai8dx_size(size_t m, size_t k, size_t mr, size_t kr) {
  return div_up(m, mr) * lhs_qai8dx_block_bytes(k, mr, kr);
}

// qsi8cx RHS panel of nr columns: nr x k_int int8 (interleaved, K padding 0), nr int32
// rsum = sum_k w[n,k], nr fp32 scale, nr fp32 bias. Columns past n are all zero.
constexpr size_t rhs_qsi8cx_panel_bytes(size_t k, size_t nr, size_t kr) {
  return nr * q_k_int(k, kr) + nr * (sizeof(int32_t) + 2 * sizeof(float));
}
constexpr size_t rhs_qsi8cx_offset(size_t n_idx, size_t k, size_t nr, size_t kr) {
  return (n_idx / nr) * rhs_qsi8cx_panel_bytes(k, nr, kr);
}
constexpr size_t rhs_qsi8cx_size(size_t n, size_t k, size_t nr, size_t kr) {
  return div_up(n, nr) * rhs_qsi8cx_panel_bytes(k, nr, kr);
}

// qsi4c32 RHS panel of nr columns, K a multiple of bl: per block, nr x bl signed int4 (two per
// byte, even index in the low nibble, interleaved as above with depth kr/sr, which must be even)
// then nr fp32 block scales; after the last block nr fp32 rsum = sum_b scale[n,b] *
// sum_{k in b} w[n,k] and nr fp32 bias. Columns past n are all zero.
constexpr size_t rhs_qsi4c32_block_bytes(size_t nr, size_t bl) {
  return nr * bl / 2 + nr * sizeof(float);
}
constexpr size_t rhs_qsi4c32_panel_bytes(size_t k, size_t nr, size_t bl) {
  return (k / bl) * rhs_qsi4c32_block_bytes(nr, bl) + nr * 2 * sizeof(float);
}
constexpr size_t rhs_qsi4c32_offset(size_t n_idx, size_t k, size_t nr, size_t bl) {
  return (n_idx / nr) * rhs_qsi4c32_panel_bytes(k, nr, bl);
}
constexpr size_t rhs_qsi4c32_size(size_t n, size_t k, size_t nr, size_t bl) {
  return div_up(n, nr) * rhs_qsi4c32_panel_bytes(k, nr, bl);
}

constexpr size_t dst_offset(size_t m_idx, size_t n_idx, size_t dst_stride_row,
                            size_t elem = sizeof(float)) {
  return m_idx * dst_stride_row + n_idx * elem;
}

}  // namespace layout

// ---------------------------------------------------------------------------------------------
// Plain GEMM with bias and clamp, over elements of type T: families (1) (T = float) and (5)
// (T = f16_bits). LHS packed as layout::lhs_plain, RHS as layout::rhs_plain, elem = sizeof(T).
template <class T>
struct PlainGemmUkernel {
  const char* name;
  Variant variant;
  size_t (*get_m_step)();
  size_t (*get_n_step)();
  size_t (*get_mr)();
  size_t (*get_nr)();
  size_t (*get_kr)();
  size_t (*get_sr)();
  size_t (*get_lhs_packed_offset)(size_t m_idx, size_t k);
  size_t (*get_rhs_packed_offset)(size_t n_idx, size_t k);
  size_t (*get_dst_offset)(size_t m_idx, size_t n_idx, size_t dst_stride_row);
  size_t (*get_dst_size)(size_t m, size_t n);
  void (*run_matmul)(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                     T* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                     float clamp_max);
};

// Family (1): fp32 GEMM with bias and clamp.
//   dst[m,n] = clamp(sum_k lhs[m,k] * rhs[k,n] + bias[n], clamp_min, clamp_max)
// LHS packed as layout::lhs_f32, RHS as layout::rhs_f32.
using GemmF32Ukernel = PlainGemmUkernel<float>;

// Family (5): fp16 GEMM with bias and clamp (XNNPACK's "pf16" GEMM, KleidiAI's f16_f16p_f16p).
// LHS, RHS, bias and dst are IEEE binary16; the clamp bounds are fp32, as in KleidiAI:
//   dst[m,n] = f16(clamp(sum_k lhs[m,k] * rhs[k,n] + bias[n], clamp_min, clamp_max))
// Packed layouts: layout::lhs_plain / rhs_plain with elem = 2 (the panel's bias is fp16).
// Rounding to fp16 is monotonic, so clamping before it or clamping the fp16 value to
// [f16(clamp_min), f16(clamp_max)] gives the same result; variants may do either.
//
// The variants share this math but not its rounding (M = sum_k |lhs[m,k] * rhs[k,n]| +
// |bias[n]|, y = the exact sum, u = 2^-11 the fp16 unit roundoff):
//  * reference: fp32 accumulation over k = 0..K-1 from 0 (every product of two fp16 values is
//    exact in fp32, every addition rounds once), + bias in fp32, clamp in fp32, one final
//    rounding to fp16 (nearest even). numpy reproduces it bit for bit: a float32 running sum
//    of float32(a) * float32(b), + bias, clip, astype(float16).
//  * SME2 (widening FMOPA into fp32 ZA tiles, K in pairs): fp32 accumulation as well, then the
//    reference's bias/clamp/rounding steps. Both fp32 sums are within ((1 + 2^-24)^(K+1) - 1) M
//    of y, so the fp16 results differ by at most that twice, plus one fp16 rounding of each
//    (in practice: equal, or one fp16 ulp apart).
//  * NEON (FMLA on 8 fp16 lanes, as KleidiAI's and XNNPACK's NEON f16 kernels): accumulates
//    *in fp16*: one fp16 rounding per k (fused multiply-add), then + bias in fp16 and a clamp
//    to the fp16 bounds. Its error is fp16's, growing with K:
//      |neon - reference| <= ((1 + u)^(K+1) - 1) M + ((1 + 2^-24)^(K+1) - 1) M
//                            + (fp16 rounding of the reference, <= u |y| + 2^-25)
//                            + (K + 1) 2^-25 (1 + u)^(K+1)              (fp16 subnormal steps)
//    a worst-case bound (about (K+1) u M for K u << 1: 3 % of M at K = 64); with random signs
//    the error grows like sqrt(K) u M. Valid while every partial sum stays inside the fp16
//    range (|partial| < 65520, e.g. M <= 65504); beyond it NEON gives +-inf where the
//    reference may be finite. Use the SME2 or reference variant when that matters.
using GemmF16Ukernel = PlainGemmUkernel<f16_bits>;

// Family (2): fp32 indirect matmul (2-D convolution). K is k_chunk_count chunks (kernel taps)
// of k_chunk_length contiguous values (input channels); the LHS is packed from a table of
// pointers (pack.h: lhs_imatmul_pack_f32), the RHS by rhs_imatmul_pack_f32.
struct IGemmF32Ukernel {
  const char* name;
  Variant variant;
  size_t (*get_m_step)();
  size_t (*get_n_step)();
  size_t (*get_mr)();
  size_t (*get_nr)();
  size_t (*get_kr)();
  size_t (*get_sr)();
  size_t (*get_lhs_packed_offset)(size_t m_idx, size_t k_chunk_count, size_t k_chunk_length);
  size_t (*get_rhs_packed_offset)(size_t n_idx, size_t k_chunk_count, size_t k_chunk_length);
  size_t (*get_dst_offset)(size_t m_idx, size_t n_idx, size_t dst_stride_row);
  size_t (*get_dst_size)(size_t m, size_t n);
  void (*run_imatmul)(size_t m, size_t n, size_t k_chunk_count, size_t k_chunk_length,
                      const void* lhs_packed, const void* rhs_packed, float* dst,
                      size_t dst_stride_row, float clamp_min, float clamp_max);
};

// Family (3): dynamic int8 activations (qai8dx: per-row asymmetric) x per-channel symmetric
// int8 weights (qsi8cx), fp32 out:
//   acc = sum_k a_q[m,k] * w_q[n,k] + (-zp[m]) * rsum[n]           (int32)
//   dst = clamp(float(acc) * (s_a[m] * s_w[n]) + bias[n], clamp_min, clamp_max)
// K <= kQuantMaxK keeps the int32 accumulator exact.
constexpr size_t kQuantMaxK = 65536;
struct QGemmQsi8cxUkernel {
  const char* name;
  Variant variant;
  size_t (*get_m_step)();
  size_t (*get_n_step)();
  size_t (*get_mr)();
  size_t (*get_nr)();
  size_t (*get_kr)();
  size_t (*get_sr)();
  size_t (*get_lhs_packed_offset)(size_t m_idx, size_t k);
  size_t (*get_rhs_packed_offset)(size_t n_idx, size_t k);
  size_t (*get_dst_offset)(size_t m_idx, size_t n_idx, size_t dst_stride_row);
  size_t (*get_dst_size)(size_t m, size_t n);
  void (*run_matmul)(size_t m, size_t n, size_t k, const void* lhs_packed, const void* rhs_packed,
                     float* dst, size_t dst_stride_row, size_t dst_stride_col, float clamp_min,
                     float clamp_max);
};

// Family (4): qai8dx activations x blockwise signed int4 weights (qsi4c32, block bl = 32 along
// K, fp32 scale per block), fp32 out; K must be a multiple of bl:
//   isum_b = sum_{k in b} a_q[m,k] * w_q[n,k]                        (int32, per block)
//   acc    = sum_b float(isum_b) * scale[n,b]                         (fp32, blocks in order)
//   dst    = clamp(s_a[m] * (acc + float(-zp[m]) * rsum[n]) + bias[n], clamp_min, clamp_max)
struct QGemmQsi4c32Ukernel {
  const char* name;
  Variant variant;
  size_t (*get_m_step)();
  size_t (*get_n_step)();
  size_t (*get_mr)();
  size_t (*get_nr)();
  size_t (*get_kr)();
  size_t (*get_sr)();
  size_t (*get_lhs_packed_offset)(size_t m_idx, size_t k);
  size_t (*get_rhs_packed_offset)(size_t n_idx, size_t k, size_t bl);
  size_t (*get_dst_offset)(size_t m_idx, size_t n_idx, size_t dst_stride_row);
  size_t (*get_dst_size)(size_t m, size_t n);
  void (*run_matmul)(size_t m, size_t n, size_t k, size_t bl, const void* lhs_packed,
                     const void* rhs_packed, float* dst, size_t dst_stride_row,
                     size_t dst_stride_col, float clamp_min, float clamp_max);
};

// ---------------------------------------------------------------------------------------------
// Filling the slots. A variant supplies a traits struct P with static m_step(), n_step(), mr(),
// nr(), kr(), sr() and run(...); the offset/size slots come from the shared layouts, so a new
// variant is: traits + run function + one line in dispatch.cpp. (SME2 traits read RDSVL.)

template <class T, class P>
constexpr PlainGemmUkernel<T> make_plain_gemm(const char* name, Variant v) {
  return {name, v, &P::m_step, &P::n_step, &P::mr, &P::nr, &P::kr, &P::sr,
          [](size_t m_idx, size_t k) {
            return layout::lhs_plain_offset(m_idx, k, P::mr(), P::kr(), sizeof(T));
          },
          [](size_t n_idx, size_t k) {
            return layout::rhs_plain_offset(n_idx, k, P::nr(), P::kr(), sizeof(T));
          },
          [](size_t m_idx, size_t n_idx, size_t s) {
            return layout::dst_offset(m_idx, n_idx, s, sizeof(T));
          },
          [](size_t m, size_t n) { return m * n * sizeof(T); }, &P::run};
}

template <class P>
constexpr GemmF32Ukernel make_gemm_f32(const char* name, Variant v) {
  return make_plain_gemm<float, P>(name, v);
}

template <class P>
constexpr GemmF16Ukernel make_gemm_f16(const char* name, Variant v) {
  return make_plain_gemm<f16_bits, P>(name, v);
}

template <class P>
constexpr IGemmF32Ukernel make_igemm_f32(const char* name, Variant v) {
  return {name, v, &P::m_step, &P::n_step, &P::mr, &P::nr, &P::kr, &P::sr,
          [](size_t m_idx, size_t kcc, size_t kcl) {
            return layout::lhs_f32_offset(m_idx, layout::imatmul_k(kcc, kcl, P::kr()), P::mr(),
                                          P::kr());
          },
          [](size_t n_idx, size_t kcc, size_t kcl) {
            return layout::rhs_f32_offset(n_idx, layout::imatmul_k(kcc, kcl, P::kr()), P::nr(),
                                          P::kr());
          },
          [](size_t m_idx, size_t n_idx, size_t s) { return layout::dst_offset(m_idx, n_idx, s); },
          [](size_t m, size_t n) { return m * n * sizeof(float); }, &P::run};
}

template <class P>
constexpr QGemmQsi8cxUkernel make_qgemm_qsi8cx(const char* name, Variant v) {
  return {name, v, &P::m_step, &P::n_step, &P::mr, &P::nr, &P::kr, &P::sr,
          [](size_t m_idx, size_t k) {
            return layout::lhs_qai8dx_offset(m_idx, k, P::mr(), P::kr());
          },
          [](size_t n_idx, size_t k) {
            return layout::rhs_qsi8cx_offset(n_idx, k, P::nr(), P::kr());
          },
          [](size_t m_idx, size_t n_idx, size_t s) { return layout::dst_offset(m_idx, n_idx, s); },
          [](size_t m, size_t n) { return m * n * sizeof(float); }, &P::run};
}

template <class P>
constexpr QGemmQsi4c32Ukernel make_qgemm_qsi4c32(const char* name, Variant v) {
  return {name, v, &P::m_step, &P::n_step, &P::mr, &P::nr, &P::kr, &P::sr,
          [](size_t m_idx, size_t k) {
            return layout::lhs_qai8dx_offset(m_idx, k, P::mr(), P::kr());
          },
          [](size_t n_idx, size_t k, size_t bl) {
            return layout::rhs_qsi4c32_offset(n_idx, k, P::nr(), bl);
          },
          [](size_t m_idx, size_t n_idx, size_t s) { return layout::dst_offset(m_idx, n_idx, s); },
          [](size_t m, size_t n) { return m * n * sizeof(float); }, &P::run};
}

}  // namespace onnxplex::kleidi
