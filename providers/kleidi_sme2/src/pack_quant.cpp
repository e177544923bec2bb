// Portable packers of the quantized families: qai8dx LHS quantize-and-pack, qsi8cx RHS,
// qsi4c32 RHS, and onnxruntime MatMulNBits -> qsu4c32 conversion.
//
// Numerics must be bit-identical on every target: this file is compiled with
// -ffp-contract=off (no fused multiply-add), and every step is a single fp32 operation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "pack.h"
#include "ukernel.h"

namespace onnxplex::kleidi {
namespace {

void check_params(const char* who, size_t rows, size_t kr, size_t sr) {
  if (rows == 0 || kr == 0 || sr == 0 || kr % sr != 0) {
    throw std::invalid_argument(std::string(who) + ": need rows > 0 and kr a nonzero multiple "
                                "of sr (got rows=" + std::to_string(rows) + ", kr=" +
                                std::to_string(kr) + ", sr=" + std::to_string(sr) + ")");
  }
}

void check_k(const char* who, size_t k) {
  if (k > kQuantMaxK) {
    throw std::invalid_argument(std::string(who) + ": K=" + std::to_string(k) +
                                " exceeds the int32-exact limit of " +
                                std::to_string(kQuantMaxK));
  }
}

template <class T>
void store(void* p, T v) { std::memcpy(p, &v, sizeof(T)); }

struct RowQuant {
  float q;       // multiplier x -> quantized domain
  float scale;   // stored scale = 1 / q
  int32_t zp;    // zero point in [-128, 127]
};

RowQuant row_quant_params(const float* x, size_t k) {
  float rmin = 0.0f, rmax = 0.0f;  // the range always contains zero
  for (size_t i = 0; i < k; ++i) {
    rmin = std::min(rmin, x[i]);
    rmax = std::max(rmax, x[i]);
  }
  constexpr float qmin = -128.0f, qmax = 127.0f;
  const float q = rmin == rmax ? 1.0f : (qmax - qmin) / (rmax - rmin);
  const float scale = q == 0.0f ? 0.0f : 1.0f / q;
  const float descaled_min = rmin * q;
  const float descaled_max = rmax * q;
  const float err_min = qmin + descaled_min;
  const float err_max = qmax + descaled_max;
  float zp = (err_min + err_max) > 0.0f ? qmin - descaled_min : qmax - descaled_max;
  zp = std::max(qmin, std::min(zp, qmax));
  // nearbyint: current rounding mode, ties to even by default; never raises FE_INEXACT traps.
  return {q, scale, static_cast<int32_t>(std::nearbyint(zp))};
}

inline int8_t quantize(float x, const RowQuant& p) {
  // Clamp in fp32 before converting so that out-of-range (or NaN) products are defined.
  float v = std::round(x * p.q) + static_cast<float>(p.zp);
  v = std::fmax(-128.0f, std::fmin(v, 127.0f));
  return static_cast<int8_t>(static_cast<int32_t>(v));
}

}  // namespace

void lhs_quant_pack_qai8dx_f32(size_t m, size_t k, size_t mr, size_t kr, size_t sr,
                               const float* lhs, size_t lhs_stride_row, void* lhs_packed) {
  check_params("lhs_quant_pack_qai8dx_f32", mr, kr, sr);
  check_k("lhs_quant_pack_qai8dx_f32", k);
  if (k == 0) throw std::invalid_argument("lhs_quant_pack_qai8dx_f32: K must be positive");
  const size_t k_int = layout::q_k_int(k, kr);
  const size_t depth = kr / sr;
  auto* out = static_cast<uint8_t*>(lhs_packed);
  for (size_t mb = 0; mb < div_up(m, mr); ++mb) {
    uint8_t* block = out + mb * layout::lhs_qai8dx_block_bytes(k, mr, kr);
    auto* values = reinterpret_cast<int8_t*>(block);
    uint8_t* neg_zp = block + mr * k_int;
    uint8_t* scales = neg_zp + mr * sizeof(int32_t);
    for (size_t r = 0; r < mr; ++r) {
      const size_t row = mb * mr + r;
      if (row >= m) {
        for (size_t kk = 0; kk < k_int; ++kk) values[interleaved_index(r, kk, mr, depth)] = 0;
        store<int32_t>(neg_zp + r * sizeof(int32_t), 0);
        store<float>(scales + r * sizeof(float), 0.0f);
        continue;
      }
      const auto* x = reinterpret_cast<const float*>(
          reinterpret_cast<const char*>(lhs) + row * lhs_stride_row);
      const RowQuant p = row_quant_params(x, k);
      int8_t last = 0;
      for (size_t kk = 0; kk < k_int; ++kk) {
        if (kk < k) last = quantize(x[kk], p);
        values[interleaved_index(r, kk, mr, depth)] = last;  // padding repeats x_q[k-1]
      }
      store<int32_t>(neg_zp + r * sizeof(int32_t), -p.zp);
      store<float>(scales + r * sizeof(float), p.scale);
    }
  }
}

void rhs_pack_qsi8cx(size_t n, size_t k, size_t nr, size_t kr, size_t sr, const int8_t* rhs,
                     size_t stride_k, size_t stride_n, const float* scales, const float* bias,
                     void* rhs_packed) {
  check_params("rhs_pack_qsi8cx", nr, kr, sr);
  check_k("rhs_pack_qsi8cx", k);
  if (!scales) throw std::invalid_argument("rhs_pack_qsi8cx: scales are required");
  const size_t k_int = layout::q_k_int(k, kr);
  const size_t depth = kr / sr;
  auto* out = static_cast<uint8_t*>(rhs_packed);
  for (size_t nb = 0; nb < div_up(n, nr); ++nb) {
    uint8_t* panel = out + nb * layout::rhs_qsi8cx_panel_bytes(k, nr, kr);
    auto* values = reinterpret_cast<int8_t*>(panel);
    uint8_t* rsum = panel + nr * k_int;
    uint8_t* wscale = rsum + nr * sizeof(int32_t);
    uint8_t* wbias = wscale + nr * sizeof(float);
    for (size_t c = 0; c < nr; ++c) {
      const size_t col = nb * nr + c;
      int32_t sum = 0;
      for (size_t kk = 0; kk < k_int; ++kk) {
        const int8_t v = (col < n && kk < k) ? rhs[kk * stride_k + col * stride_n] : 0;
        values[interleaved_index(c, kk, nr, depth)] = v;
        sum += v;
      }
      store<int32_t>(rsum + c * sizeof(int32_t), sum);  // LHS zero point folded in as 1
      store<float>(wscale + c * sizeof(float), col < n ? scales[col] : 0.0f);
      store<float>(wbias + c * sizeof(float), (col < n && bias) ? bias[col] : 0.0f);
    }
  }
}

void rhs_pack_qsi4c32(size_t n, size_t k, size_t bl, size_t nr, size_t kr, size_t sr,
                      const uint8_t* rhs, size_t rhs_stride_row, const float* scales,
                      size_t scale_stride_row, const float* bias, void* rhs_packed) {
  check_params("rhs_pack_qsi4c32", nr, kr, sr);
  check_k("rhs_pack_qsi4c32", k);
  if (bl != kInt4Block) {
    throw std::invalid_argument("rhs_pack_qsi4c32: block length must be 32, got " +
                                std::to_string(bl));
  }
  if (k == 0 || k % bl != 0) {
    throw std::invalid_argument("rhs_pack_qsi4c32: K=" + std::to_string(k) +
                                " is not a positive multiple of the int4 block length " +
                                std::to_string(bl) + "; pad K (and the activations) first");
  }
  const size_t depth = kr / sr;
  if (depth % 2 != 0 || bl % depth != 0) {
    throw std::invalid_argument("rhs_pack_qsi4c32: kr/sr must be even and divide 32");
  }
  if (!scales) throw std::invalid_argument("rhs_pack_qsi4c32: scales are required");
  const size_t blocks = k / bl;
  auto* out = static_cast<uint8_t*>(rhs_packed);
  for (size_t nb = 0; nb < div_up(n, nr); ++nb) {
    uint8_t* panel = out + nb * layout::rhs_qsi4c32_panel_bytes(k, nr, bl);
    uint8_t* tail = panel + blocks * layout::rhs_qsi4c32_block_bytes(nr, bl);
    std::vector<float> rsum(nr, 0.0f);
    for (size_t b = 0; b < blocks; ++b) {
      uint8_t* vals = panel + b * layout::rhs_qsi4c32_block_bytes(nr, bl);
      uint8_t* bscale = vals + nr * bl / 2;
      std::memset(vals, 0, nr * bl / 2);
      for (size_t c = 0; c < nr; ++c) {
        const size_t col = nb * nr + c;
        int32_t block_sum = 0;
        for (size_t j = 0; j < bl; ++j) {
          int32_t v = 0;  // signed int4 in [-8, 7]
          if (col < n) {
            const size_t kk = b * bl + j;
            const uint8_t byte = rhs[col * rhs_stride_row + kk / 2];
            v = static_cast<int32_t>((kk % 2 == 0) ? (byte & 0x0F) : (byte >> 4)) - 8;
          }
          block_sum += v;
          const size_t idx = interleaved_index(c, j, nr, depth);
          const auto nib = static_cast<uint8_t>(v & 0x0F);
          vals[idx / 2] |= (idx % 2 == 0) ? nib : static_cast<uint8_t>(nib << 4);
        }
        const float s = col < n ? scales[col * scale_stride_row + b] : 0.0f;
        store<float>(bscale + c * sizeof(float), s);
        rsum[c] = rsum[c] + s * static_cast<float>(block_sum);
      }
    }
    for (size_t c = 0; c < nr; ++c) {
      const size_t col = nb * nr + c;
      store<float>(tail + c * sizeof(float), rsum[c]);
      store<float>(tail + (nr + c) * sizeof(float), (col < n && bias) ? bias[col] : 0.0f);
    }
  }
}

void matmulnbits_to_qsu4c32(size_t n, size_t k, size_t block_size, const uint8_t* b,
                            const float* scales, const uint8_t* zero_points,
                            uint8_t* out_nibbles, float* out_scales) {
  if (block_size == 0 || block_size % kInt4Block != 0) {
    throw std::invalid_argument("matmulnbits_to_qsu4c32: block_size=" +
                                std::to_string(block_size) +
                                " is not a multiple of 32; only 32/64/128/... convert");
  }
  if (k == 0 || k % kInt4Block != 0) {
    throw std::invalid_argument("matmulnbits_to_qsu4c32: K=" + std::to_string(k) +
                                " is not a positive multiple of the int4 block length 32");
  }
  const size_t n_blocks = div_up(k, block_size);
  const size_t blob = block_size / 2;
  const size_t zp_row = div_up(n_blocks, 2);
  for (size_t col = 0; col < n; ++col) {
    for (size_t nb = 0; nb < n_blocks; ++nb) {
      if (zero_points) {
        const uint8_t byte = zero_points[col * zp_row + nb / 2];
        const unsigned zp = (nb % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
        if (zp != 8) {
          throw std::invalid_argument(
              "matmulnbits_to_qsu4c32: zero point " + std::to_string(zp) + " at column " +
              std::to_string(col) + ", block " + std::to_string(nb) +
              " is not 8; only symmetric MatMulNBits weights convert to qsi4c32");
        }
      }
    }
    // The nibble order of a MatMulNBits blob (even k low) is the qsu4c32 order, and blocks
    // of one column are contiguous, so a row of K values copies over unchanged.
    std::memcpy(out_nibbles + col * (k / 2), b + col * n_blocks * blob, k / 2);
    for (size_t sb = 0; sb < k / kInt4Block; ++sb) {
      out_scales[col * (k / kInt4Block) + sb] =
          scales[col * n_blocks + (sb * kInt4Block) / block_size];
    }
  }
}

}  // namespace onnxplex::kleidi
