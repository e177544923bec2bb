#include "drivers.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dispatch.h"
#include "pack.h"
#include "parallel.h"

namespace onnxplex::kleidi {
namespace {

void check_family(const PackedRhs& rhs, Family f) {
  if (rhs.family != f) {
    throw std::invalid_argument(std::string("kleidi: weights were packed for ") +
                                family_name(rhs.family) + ", not " + family_name(f));
  }
}

void check_clamp(float lo, float hi) {
  if (!(lo <= hi)) throw std::invalid_argument("kleidi: clamp_min must be <= clamp_max");
}

// Packs LHS rows in parallel, in groups of whole mr-blocks; pack(m0, rows) packs rows
// [m0, m0 + rows) where m0 is a multiple of `unit`.
template <class PackFn>
void pack_rows(size_t m, size_t unit, size_t threads, PackFn pack) {
  parallel_for(div_up(m, unit), threads, [&](size_t b0, size_t b1) {
    const size_t m0 = b0 * unit;
    pack(m0, std::min(m, b1 * unit) - m0);
  });
}

}  // namespace

// ---- (1) fp32 GEMM and (5) fp16 GEMM: one driver over the element type ---------------------

namespace {

template <class T>
struct Plain;
template <>
struct Plain<float> {
  static constexpr Family family = Family::gemm_f32;
  static const GemmF32Ukernel& ukernel(Variant v) { return gemm_f32_ukernel(v); }
  static constexpr auto lhs_pack = &lhs_pack_f32;
  static constexpr auto rhs_pack = &rhs_pack_f32;
};
template <>
struct Plain<f16_bits> {
  static constexpr Family family = Family::gemm_f16;
  static const GemmF16Ukernel& ukernel(Variant v) { return gemm_f16_ukernel(v); }
  static constexpr auto lhs_pack = &lhs_pack_f16;
  static constexpr auto rhs_pack = &rhs_pack_f16;
};

template <class T>
PackedRhs pack_plain_gemm(Variant v, size_t n, size_t k, const T* rhs, size_t stride_k,
                          size_t stride_n, const T* bias) {
  const PlainGemmUkernel<T>& uk = Plain<T>::ukernel(v);
  PackedRhs p{Plain<T>::family, v, n, k, 0, 0, 0, {}};
  p.data.resize(layout::rhs_plain_size(n, k, uk.get_nr(), uk.get_kr(), sizeof(T)));
  Plain<T>::rhs_pack(n, k, uk.get_nr(), uk.get_kr(), uk.get_sr(), rhs, stride_k, stride_n, bias,
                     p.data.data());
  return p;
}

template <class T>
void plain_gemm(const PackedRhs& rhs, size_t m, const T* lhs, size_t lhs_stride_row, T* dst,
                size_t dst_stride_row, float clamp_min, float clamp_max, size_t threads) {
  check_family(rhs, Plain<T>::family);
  check_clamp(clamp_min, clamp_max);
  if (m == 0 || rhs.n == 0) return;
  const PlainGemmUkernel<T>& uk = Plain<T>::ukernel(rhs.variant);
  const size_t k = rhs.k, mr = uk.get_mr(), kr = uk.get_kr(), sr = uk.get_sr();
  std::vector<uint8_t> lhs_packed(layout::lhs_plain_size(m, k, mr, kr, sizeof(T)));
  pack_rows(m, mr, threads, [&](size_t m0, size_t rows) {
    Plain<T>::lhs_pack(rows, k, mr, kr, sr,
                       reinterpret_cast<const T*>(reinterpret_cast<const char*>(lhs) +
                                                  m0 * lhs_stride_row),
                       lhs_stride_row, lhs_packed.data() + uk.get_lhs_packed_offset(m0, k));
  });
  run_tiles(m, rhs.n, uk.get_m_step(), uk.get_n_step(), threads,
            [&](size_t m0, size_t ml, size_t n0, size_t nl) {
              uk.run_matmul(ml, nl, k, lhs_packed.data() + uk.get_lhs_packed_offset(m0, k),
                            rhs.data.data() + uk.get_rhs_packed_offset(n0, k),
                            reinterpret_cast<T*>(reinterpret_cast<char*>(dst) +
                                                 uk.get_dst_offset(m0, n0, dst_stride_row)),
                            dst_stride_row, sizeof(T), clamp_min, clamp_max);
            });
}

}  // namespace

PackedRhs pack_gemm_f32(Variant v, size_t n, size_t k, const float* rhs, size_t stride_k,
                        size_t stride_n, const float* bias) {
  return pack_plain_gemm(v, n, k, rhs, stride_k, stride_n, bias);
}

void gemm_f32(const PackedRhs& rhs, size_t m, const float* lhs, size_t lhs_stride_row,
              float* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
              size_t threads) {
  plain_gemm(rhs, m, lhs, lhs_stride_row, dst, dst_stride_row, clamp_min, clamp_max, threads);
}

PackedRhs pack_gemm_f16(Variant v, size_t n, size_t k, const f16_bits* rhs, size_t stride_k,
                        size_t stride_n, const f16_bits* bias) {
  return pack_plain_gemm(v, n, k, rhs, stride_k, stride_n, bias);
}

void gemm_f16(const PackedRhs& rhs, size_t m, const f16_bits* lhs, size_t lhs_stride_row,
              f16_bits* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
              size_t threads) {
  plain_gemm(rhs, m, lhs, lhs_stride_row, dst, dst_stride_row, clamp_min, clamp_max, threads);
}

// ---- (2) conv2d by indirect matmul ----------------------------------------------------------

PackedRhs pack_conv2d_f32(Variant v, size_t c_out, size_t c_in, size_t kh, size_t kw,
                          const float* weights_oihw, const float* bias) {
  const IGemmF32Ukernel& uk = igemm_f32_ukernel(v);
  const size_t kcc = kh * kw, kcl = c_in;
  PackedRhs p{Family::igemm_f32, v, c_out, kcc * kcl, c_in, kh, kw, {}};
  p.data.resize(layout::rhs_f32_size(c_out, layout::imatmul_k(kcc, kcl, uk.get_kr()),
                                     uk.get_nr(), uk.get_kr()));
  // W[o, c, ky, kx] at o*(c_in*kcc) + c*kcc + (ky*kw + kx): chunk stride 1, k stride kcc.
  rhs_imatmul_pack_f32(c_out, kcc, kcl, uk.get_nr(), uk.get_kr(), uk.get_sr(), weights_oihw,
                       /*stride_chunk=*/1, /*stride_k=*/kcc, /*stride_n=*/c_in * kcc, bias,
                       p.data.data());
  return p;
}

void conv2d_output_size(size_t h, size_t w, size_t kh, size_t kw, const Conv2dGeometry& g,
                        size_t* out_h, size_t* out_w) {
  if (g.stride_h == 0 || g.stride_w == 0 || g.dil_h == 0 || g.dil_w == 0) {
    throw std::invalid_argument("conv2d: strides and dilations must be positive");
  }
  const size_t eff_h = (kh - 1) * g.dil_h + 1, eff_w = (kw - 1) * g.dil_w + 1;
  const size_t ph = h + g.pad_top + g.pad_bottom, pw = w + g.pad_left + g.pad_right;
  if (kh == 0 || kw == 0 || eff_h > ph || eff_w > pw) {
    throw std::invalid_argument("conv2d: the dilated kernel (" + std::to_string(eff_h) + "x" +
                                std::to_string(eff_w) + ") does not fit the padded input (" +
                                std::to_string(ph) + "x" + std::to_string(pw) + ")");
  }
  *out_h = (ph - eff_h) / g.stride_h + 1;
  *out_w = (pw - eff_w) / g.stride_w + 1;
}

void conv2d_f32(const PackedRhs& rhs, size_t batch, size_t h, size_t w, const float* x,
                const Conv2dGeometry& g, float* y, float clamp_min, float clamp_max,
                size_t threads) {
  check_family(rhs, Family::igemm_f32);
  check_clamp(clamp_min, clamp_max);
  const IGemmF32Ukernel& uk = igemm_f32_ukernel(rhs.variant);
  size_t out_h = 0, out_w = 0;
  conv2d_output_size(h, w, rhs.kh, rhs.kw, g, &out_h, &out_w);
  const size_t c = rhs.c_in, c_out = rhs.n, kcc = rhs.kh * rhs.kw, m = out_h * out_w;
  const size_t m_step = uk.get_m_step(), mr = uk.get_mr(), kr = uk.get_kr(), sr = uk.get_sr();
  if (m == 0 || c_out == 0 || batch == 0) return;

  std::vector<float> nhwc(h * w * c), out_nhwc(m * c_out), pad(c == 0 ? 1 : c, 0.0f);
  std::vector<const void*> table(div_up(m, m_step) * kcc * m_step);
  conv2d_indirection(h, w, c, rhs.kh, rhs.kw, g.stride_h, g.stride_w, g.pad_top, g.pad_left,
                     g.dil_h, g.dil_w, out_h, out_w, m_step, pad.data(), table.data());
  std::vector<uint8_t> lhs_packed(
      layout::lhs_f32_size(m, layout::imatmul_k(kcc, c, kr), mr, kr));

  for (size_t b = 0; b < batch; ++b) {
    const float* xb = x + b * c * h * w;
    parallel_for(h * w, threads, [&](size_t p0, size_t p1) {  // NCHW -> NHWC
      for (size_t p = p0; p < p1; ++p)
        for (size_t ch = 0; ch < c; ++ch) nhwc[p * c + ch] = xb[ch * h * w + p];
    });
    pack_rows(m, m_step, threads, [&](size_t m0, size_t rows) {
      lhs_imatmul_pack_f32(rows, kcc, c, m_step, mr, kr, sr, table.data() + (m0 / m_step) * kcc * m_step,
                           reinterpret_cast<uintptr_t>(nhwc.data()), pad.data(),
                           lhs_packed.data() + uk.get_lhs_packed_offset(m0, kcc, c));
    });
    run_tiles(m, c_out, m_step, uk.get_n_step(), threads,
              [&](size_t m0, size_t ml, size_t n0, size_t nl) {
                uk.run_imatmul(ml, nl, kcc, c,
                               lhs_packed.data() + uk.get_lhs_packed_offset(m0, kcc, c),
                               rhs.data.data() + uk.get_rhs_packed_offset(n0, kcc, c),
                               out_nhwc.data() + m0 * c_out + n0, c_out * sizeof(float),
                               clamp_min, clamp_max);
              });
    float* yb = y + b * c_out * m;
    parallel_for(c_out, threads, [&](size_t o0, size_t o1) {  // NHWC -> NCHW
      for (size_t o = o0; o < o1; ++o)
        for (size_t p = 0; p < m; ++p) yb[o * m + p] = out_nhwc[p * c_out + o];
    });
  }
}

// ---- (3) dynamic int8 x per-channel int8 ----------------------------------------------------

PackedRhs pack_qsi8cx(Variant v, size_t n, size_t k, const int8_t* rhs, size_t stride_k,
                      size_t stride_n, const float* scales, const float* bias) {
  const QGemmQsi8cxUkernel& uk = qgemm_qsi8cx_ukernel(v);
  if (k == 0) throw std::invalid_argument("qgemm_qsi8cx: K must be positive");
  PackedRhs p{Family::qgemm_qsi8cx, v, n, k, 0, 0, 0, {}};
  p.data.resize(layout::rhs_qsi8cx_size(n, k, uk.get_nr(), uk.get_kr()));
  rhs_pack_qsi8cx(n, k, uk.get_nr(), uk.get_kr(), uk.get_sr(), rhs, stride_k, stride_n, scales,
                  bias, p.data.data());
  return p;
}

void qgemm_qsi8cx(const PackedRhs& rhs, size_t m, const float* lhs, size_t lhs_stride_row,
                  float* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
                  size_t threads) {
  check_family(rhs, Family::qgemm_qsi8cx);
  check_clamp(clamp_min, clamp_max);
  if (m == 0 || rhs.n == 0) return;
  const QGemmQsi8cxUkernel& uk = qgemm_qsi8cx_ukernel(rhs.variant);
  const size_t k = rhs.k, mr = uk.get_mr(), kr = uk.get_kr(), sr = uk.get_sr();
  std::vector<uint8_t> lhs_packed(layout::lhs_qai8dx_size(m, k, mr, kr));
  pack_rows(m, mr, threads, [&](size_t m0, size_t rows) {
    lhs_quant_pack_qai8dx_f32(rows, k, mr, kr, sr,
                              reinterpret_cast<const float*>(
                                  reinterpret_cast<const char*>(lhs) + m0 * lhs_stride_row),
                              lhs_stride_row, lhs_packed.data() + uk.get_lhs_packed_offset(m0, k));
  });
  run_tiles(m, rhs.n, uk.get_m_step(), uk.get_n_step(), threads,
            [&](size_t m0, size_t ml, size_t n0, size_t nl) {
              uk.run_matmul(ml, nl, k, lhs_packed.data() + uk.get_lhs_packed_offset(m0, k),
                            rhs.data.data() + uk.get_rhs_packed_offset(n0, k),
                            reinterpret_cast<float*>(reinterpret_cast<char*>(dst) +
                                                     uk.get_dst_offset(m0, n0, dst_stride_row)),
                            dst_stride_row, sizeof(float), clamp_min, clamp_max);
            });
}

// ---- (4) dynamic int8 x blockwise int4 ------------------------------------------------------

PackedRhs pack_qsi4c32(Variant v, size_t n, size_t k, const uint8_t* nibbles,
                       size_t nibble_stride_row, const float* scales, size_t scale_stride_row,
                       const float* bias) {
  const QGemmQsi4c32Ukernel& uk = qgemm_qsi4c32_ukernel(v);
  if (k == 0 || k % kInt4Block != 0) {
    throw std::invalid_argument("qgemm_qsi4c32: K=" + std::to_string(k) +
                                " is not a positive multiple of the int4 block length 32");
  }
  PackedRhs p{Family::qgemm_qsi4c32, v, n, k, 0, 0, 0, {}};
  p.data.resize(layout::rhs_qsi4c32_size(n, k, uk.get_nr(), kInt4Block));
  rhs_pack_qsi4c32(n, k, kInt4Block, uk.get_nr(), uk.get_kr(), uk.get_sr(), nibbles,
                   nibble_stride_row, scales, scale_stride_row, bias, p.data.data());
  return p;
}

void qgemm_qsi4c32(const PackedRhs& rhs, size_t m, const float* lhs, size_t lhs_stride_row,
                   float* dst, size_t dst_stride_row, float clamp_min, float clamp_max,
                   size_t threads) {
  check_family(rhs, Family::qgemm_qsi4c32);
  check_clamp(clamp_min, clamp_max);
  if (m == 0 || rhs.n == 0) return;
  const QGemmQsi4c32Ukernel& uk = qgemm_qsi4c32_ukernel(rhs.variant);
  const size_t k = rhs.k, mr = uk.get_mr(), kr = uk.get_kr(), sr = uk.get_sr();
  std::vector<uint8_t> lhs_packed(layout::lhs_qai8dx_size(m, k, mr, kr));
  pack_rows(m, mr, threads, [&](size_t m0, size_t rows) {
    lhs_quant_pack_qai8dx_f32(rows, k, mr, kr, sr,
                              reinterpret_cast<const float*>(
                                  reinterpret_cast<const char*>(lhs) + m0 * lhs_stride_row),
                              lhs_stride_row, lhs_packed.data() + uk.get_lhs_packed_offset(m0, k));
  });
  run_tiles(m, rhs.n, uk.get_m_step(), uk.get_n_step(), threads,
            [&](size_t m0, size_t ml, size_t n0, size_t nl) {
              uk.run_matmul(ml, nl, k, kInt4Block,
                            lhs_packed.data() + uk.get_lhs_packed_offset(m0, k),
                            rhs.data.data() + uk.get_rhs_packed_offset(n0, k, kInt4Block),
                            reinterpret_cast<float*>(reinterpret_cast<char*>(dst) +
                                                     uk.get_dst_offset(m0, n0, dst_stride_row)),
                            dst_stride_row, sizeof(float), clamp_min, clamp_max);
            });
}

void quantize_qai8dx(size_t m, size_t k, const float* lhs, size_t lhs_stride_row, int8_t* q,
                     int32_t* neg_zp, float* scale) {
  // Pack with mr = kr = sr = 1: each block is one row, k_int int8 then -zp then scale.
  const size_t k_int = layout::q_k_int(k, 1);
  const size_t block = layout::lhs_qai8dx_block_bytes(k, 1, 1);
  std::vector<uint8_t> packed(layout::lhs_qai8dx_size(m, k, 1, 1));
  lhs_quant_pack_qai8dx_f32(m, k, 1, 1, 1, lhs, lhs_stride_row, packed.data());
  for (size_t i = 0; i < m; ++i) {
    const uint8_t* b = packed.data() + i * block;
    std::memcpy(q + i * k, b, k);
    std::memcpy(neg_zp + i, b + k_int, sizeof(int32_t));
    std::memcpy(scale + i, b + k_int + sizeof(int32_t), sizeof(float));
  }
}

}  // namespace onnxplex::kleidi
