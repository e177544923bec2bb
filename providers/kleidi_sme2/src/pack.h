// Portable packing routines for every family (layouts in ukernel.h). Pure C++17; each routine is
// parameterised by the consuming variant's (mr|nr, kr, sr), so one packer serves all variants.
// Errors (bad parameters) throw std::invalid_argument with a message naming the routine.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ukernel.h"

namespace onnxplex::kleidi {

// fp32 LHS: rows [0, m) of `lhs` (row stride in bytes, unit column stride) into
// layout::lhs_f32. `lhs_packed` points at the block of row 0 (any multiple of mr).
void lhs_pack_f32(size_t m, size_t k, size_t mr, size_t kr, size_t sr, const float* lhs,
                  size_t lhs_stride_row, void* lhs_packed);

// fp32 RHS with bias: element (k, n) is rhs[k * stride_k + n * stride_n] (element strides, so
// kxn and nxk inputs both work); bias may be null (zeros). Writes layout::rhs_f32.
void rhs_pack_f32(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const float* rhs,
                  size_t stride_k, size_t stride_n, const float* bias, void* rhs_packed);

// fp16 (IEEE binary16 bit patterns) LHS and RHS with bias: as the fp32 routines above, into
// layout::lhs_plain / rhs_plain with 2-byte elements (fp16 bias at the head of each panel).
void lhs_pack_f16(size_t m, size_t k, size_t mr, size_t kr, size_t sr, const f16_bits* lhs,
                  size_t lhs_stride_row, void* lhs_packed);
void rhs_pack_f16(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const f16_bits* rhs,
                  size_t stride_k, size_t stride_n, const f16_bits* bias, void* rhs_packed);

// Indirect-matmul LHS. `indirection` holds ceil(m / m_step) * k_chunk_count blocks of m_step
// pointers: entry [(mb * k_chunk_count + c) * m_step + r] points at the k_chunk_length floats of
// row mb * m_step + r, chunk c. `ptr_offset` (bytes) is added to every entry that is not
// `pad_ptr`, so the table may hold offsets from a base. m_step must be a multiple of mr.
void lhs_imatmul_pack_f32(size_t m, size_t k_chunk_count, size_t k_chunk_length, size_t m_step,
                          size_t mr, size_t kr, size_t sr, const void* const* indirection,
                          size_t ptr_offset, const void* pad_ptr, void* lhs_packed);

// Indirect-matmul RHS: element (chunk c, index j, column n) is
// rhs[c * stride_chunk + j * stride_k + n * stride_n]; bias may be null.
void rhs_imatmul_pack_f32(size_t n, size_t k_chunk_count, size_t k_chunk_length, size_t nr,
                          size_t kr, size_t sr, const float* rhs, size_t stride_chunk,
                          size_t stride_k, size_t stride_n, const float* bias, void* rhs_packed);

// Dynamic per-row asymmetric int8 quantization (qai8dx) of rows [0, m) of `lhs` into
// layout::lhs_qai8dx. Numerics (per row, all fp32): rmin = min(0, min x), rmax = max(0, max x);
// q = 255 / (rmax - rmin) (1 if rmin == rmax); scale = 1 / q (0 if q == 0);
// zp = (-128 + rmin*q) + (127 + rmax*q) > 0 ? -128 - rmin*q : 127 - rmax*q, clamped to
// [-128, 127], rounded to nearest even; x_q = clamp(roundf(x*q) + zp, -128, 127) (roundf = half
// away from zero). Padded K entries repeat x_q[k-1]; padded rows are zero.
void lhs_quant_pack_qai8dx_f32(size_t m, size_t k, size_t mr, size_t kr, size_t sr,
                               const float* lhs, size_t lhs_stride_row, void* lhs_packed);

// Per-channel symmetric int8 weights: element (k, n) is rhs[k * stride_k + n * stride_n];
// scales[n] fp32; bias may be null. Writes layout::rhs_qsi8cx (rsum with LHS zero point 1).
void rhs_pack_qsi8cx(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const int8_t* rhs,
                     size_t stride_k, size_t stride_n, const float* scales, const float* bias,
                     void* rhs_packed);

// Blockwise int4 weights. Input "qsu4c32": row n of `rhs` (stride rhs_stride_row bytes) holds k
// unsigned nibbles, two per byte, even k in the low nibble, value = nibble - 8; scales[n *
// scale_stride_row + b] fp32 per block of bl = 32. k must be a multiple of bl (else throws);
// (kr / sr) must be even. bias may be null. Writes layout::rhs_qsi4c32.
void rhs_pack_qsi4c32(size_t n, size_t k, size_t bl, size_t nr, size_t kr, size_t sr,
                      const uint8_t* rhs, size_t rhs_stride_row, const float* scales,
                      size_t scale_stride_row, const float* bias, void* rhs_packed);

// onnxruntime MatMulNBits (bits = 4, com.microsoft) -> qsu4c32 as taken by rhs_pack_qsi4c32.
// B: uint8 [n][ceil(k / block_size)][block_size / 2]; scales: fp32 [n * ceil(k/block_size)];
// zero_points: null (= 8) or uint8 [n][ceil(ceil(k/block_size) / 2)] packed nibbles, low first,
// which must all be 8 (symmetric). block_size must be a multiple of 32 (a 64/128 block becomes
// 2/4 blocks of 32 with the same scale); k must be a multiple of 32. Writes out_nibbles
// [n][k/2] and out_scales [n][k/32]. Throws std::invalid_argument otherwise.
void matmulnbits_to_qsu4c32(size_t n, size_t k, size_t block_size, const uint8_t* b,
                            const float* scales, const uint8_t* zero_points,
                            uint8_t* out_nibbles, float* out_scales);

// Conv2d indirection table for lhs_imatmul_pack_f32, over an NHWC image (one batch item) of
// h x w pixels with c channels: output pixel p = oy * out_w + ox, chunk (ky, kx) points at
// input pixel (oy*stride_h - pad_top + ky*dil_h, ox*stride_w - pad_left + kx*dil_w), or at
// `pad_ptr` outside the image and for rows past m = out_h * out_w. Entries are byte offsets
// from the image base (use ptr_offset = image address). `table` has
// ceil(m / m_step) * kh * kw * m_step entries.
void conv2d_indirection(size_t h, size_t w, size_t c, size_t kh, size_t kw, size_t stride_h,
                        size_t stride_w, size_t pad_top, size_t pad_left, size_t dil_h,
                        size_t dil_w, size_t out_h, size_t out_w, size_t m_step,
                        const void* pad_ptr, const void** table);

}  // namespace onnxplex::kleidi
