// Native test of the Kleidi kernel library (kleidi_core): every compiled variant of every family
// against the portable reference, and the reference against naive loops written here from the
// contract in ukernel.h / pack.h. Exits nonzero on any mismatch.
//
//   kleidi_test [--expect-variant NAME] [--seed N] [--rounds N]
//
// --expect-variant NAME: each family must have selected its best planned variant at or below
// NAME (e.g. sme2 on an SME2 CPU; fp32 families have no i8mm variant, so "i8mm" expects neon
// there). Fails if dispatch chose anything else, including because a variant is not built.
// The fp16 GEMM's NEON variant also needs FEAT_FP16: at NAME = neon it is expected only if the
// CPU reports FEAT_FP16 (Cortex-A72, Armv8.0, does not: gemm_f16 must select its reference
// there); above neon (dotprod, i8mm, sme2: every CPU the suite emulates there has FEAT_FP16,
// and SME implies it) FEAT_FP16 must be reported and the variant selected.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_features.h"
#include "dispatch.h"
#include "drivers.h"
#include "fp16.h"
#include "pack.h"
#include "ukernel.h"

using namespace onnxplex::kleidi;

namespace {

int g_failures = 0;
int g_checks = 0;
std::mt19937_64 g_rng(12345);

#define CHECK(cond, ...)                                       \
  do {                                                         \
    ++g_checks;                                                \
    if (!(cond)) {                                             \
      ++g_failures;                                            \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                       \
      std::fprintf(stderr, "\n");                              \
    }                                                          \
  } while (0)

size_t pick(size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(g_rng); }
float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g_rng); }

// Test data with the awkward cases mixed in: zero rows, one-signed rows, outliers, big values.
std::vector<float> activations(size_t m, size_t k) {
  std::vector<float> a(m * k);
  for (size_t i = 0; i < m; ++i) {
    const size_t kind = pick(0, 7);
    const float big = kind == 4 ? 1e30f : (kind == 5 ? 1e-30f : 1.0f);
    for (size_t j = 0; j < k; ++j) {
      float v = uniform(-2.0f, 2.0f) * big;
      if (kind == 1) v = 0.0f;                 // all zero
      if (kind == 2) v = std::fabs(v) + 0.5f;  // all positive: rmin = 0
      if (kind == 3) v = -std::fabs(v);        // all non-positive
      if (kind == 6 && j == k / 2) v = 1e4f;   // one outlier
      a[i * k + j] = v;
    }
  }
  return a;
}

std::vector<float> randn(size_t count, float scale = 1.0f) {
  std::vector<float> v(count);
  for (auto& x : v) x = uniform(-1.0f, 1.0f) * scale;
  return v;
}

struct Clamp {
  float lo, hi;
};
Clamp random_clamp() {
  const float inf = std::numeric_limits<float>::infinity();
  switch (pick(0, 3)) {
    case 0: return {-inf, inf};
    case 1: return {0.0f, inf};  // ReLU
    case 2: return {-0.5f, 0.5f};
    default: return {-std::numeric_limits<float>::max(), std::numeric_limits<float>::max()};
  }
}
float clampf(float v, Clamp c) { return std::min(std::max(v, c.lo), c.hi); }

// Random M, N, K: 1 often, else sizes that are multiples of no tile.
size_t dim(size_t max) {
  const size_t r = pick(0, 9);
  if (r == 0) return 1;
  if (r == 1) return pick(2, 3);
  return pick(2, max) | 1;  // odd
}

bool close(float got, float want, float bound, float rel) {
  if (got == want) return true;   // (also +-inf)
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  return std::fabs(got - want) <= rel * bound + 1e-30f;
}

std::vector<Variant> variants_under_test(Family f) {
  std::vector<Variant> out;
  for (Variant v : compiled_variants(f)) {
    if (v != Variant::reference && cpu_supports(f, v)) out.push_back(v);
  }
  return out;
}

// ---- naive models (independent of the packed layouts) ---------------------------------------

struct Quant {
  std::vector<int8_t> q;
  std::vector<int32_t> zp;
  std::vector<float> scale;
};

Quant naive_quantize(size_t m, size_t k, const float* a) {
  Quant out{std::vector<int8_t>(m * k), std::vector<int32_t>(m), std::vector<float>(m)};
  for (size_t i = 0; i < m; ++i) {
    float lo = 0.0f, hi = 0.0f;
    for (size_t j = 0; j < k; ++j) {
      lo = std::min(lo, a[i * k + j]);
      hi = std::max(hi, a[i * k + j]);
    }
    volatile float range = hi - lo;  // volatile: keep each fp32 rounding step
    const float q = lo == hi ? 1.0f : 255.0f / range;
    out.scale[i] = q == 0.0f ? 0.0f : 1.0f / q;
    volatile float dmin = lo * q, dmax = hi * q;
    volatile float e1 = -128.0f + dmin, e2 = 127.0f + dmax;
    float zp = (e1 + e2 > 0.0f) ? -128.0f - dmin : 127.0f - dmax;
    zp = std::min(127.0f, std::max(-128.0f, zp));
    out.zp[i] = static_cast<int32_t>(std::nearbyint(zp));
    for (size_t j = 0; j < k; ++j) {
      volatile float prod = a[i * k + j] * q;
      float v = std::round(prod) + static_cast<float>(out.zp[i]);
      v = std::min(127.0f, std::max(-128.0f, v));
      out.q[i * k + j] = static_cast<int8_t>(v);
    }
  }
  return out;
}

// ---- family tests ---------------------------------------------------------------------------

// One NaN or +-inf in some rows of a (at most one special value a row, so that the result
// does not depend on the order of the sum: a row's only infinite product makes its outputs
// +-inf, or NaN where a weight is 0 ... never both signs of infinity in one sum).
void add_specials(std::vector<float>& a, size_t m, size_t k) {
  if (pick(0, 2) != 0) return;
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < m; ++i)
    if (pick(0, 3) == 0) a[i * k + pick(0, k - 1)] = specials[pick(0, 2)];
}

// The SME2 tile (2 VL x 2 VL) when this CPU runs SME2, else the NEON one's rows: sizes that
// are exact multiples of it (no edge predicates: the full-tile paths alone).
size_t sme2_tile_or(size_t other) {
  return cpu_supports(Family::gemm_f32, Variant::sme2) ? gemm_f32_ukernel(Variant::sme2).get_m_step()
                                                       : other;
}

void test_gemm_f32(size_t threads) {
  const bool whole_tiles = pick(0, 4) == 0;
  const size_t tile = sme2_tile_or(8);
  const size_t m = whole_tiles ? tile * pick(1, 3) : dim(67);
  const size_t n = whole_tiles ? tile * pick(1, 2) : dim(70);
  const size_t k = pick(0, 5) == 0 ? 1 : dim(150);
  auto a = activations(m, k);
  add_specials(a, m, k);
  const auto b = randn(k * n), bias = randn(n);
  const bool with_bias = pick(0, 1);
  const Clamp c = random_clamp();
  const auto ref_w = pack_gemm_f32(Variant::reference, n, k, b.data(), n, 1,
                                   with_bias ? bias.data() : nullptr);
  std::vector<float> ref(m * n), naive(m * n), bound(m * n);
  gemm_f32(ref_w, m, a.data(), k * 4, ref.data(), n * 4, c.lo, c.hi, threads);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      volatile float acc = 0.0f;
      float mag = 0.0f;
      for (size_t kk = 0; kk < k; ++kk) {
        volatile float prod = a[i * k + kk] * b[kk * n + j];
        acc = acc + prod;
        mag += std::fabs(prod);
      }
      const float bb = with_bias ? bias[j] : 0.0f;
      naive[i * n + j] = clampf(acc + bb, c);
      bound[i * n + j] = mag + std::fabs(bb);
    }
  for (size_t i = 0; i < m * n; ++i) {
    CHECK(ref[i] == naive[i] || (std::isnan(ref[i]) && std::isnan(naive[i])),
          "gemm_f32 reference vs naive m=%zu n=%zu k=%zu at %zu: %g vs %g", m, n, k, i,
          ref[i], naive[i]);
  }
  for (Variant v : variants_under_test(Family::gemm_f32)) {
    const auto w = pack_gemm_f32(v, n, k, b.data(), n, 1, with_bias ? bias.data() : nullptr);
    std::vector<float> got(m * n);
    gemm_f32(w, m, a.data(), k * 4, got.data(), n * 4, c.lo, c.hi, threads);
    for (size_t i = 0; i < m * n; ++i)
      CHECK(close(got[i], ref[i], bound[i], 1e-5f), "gemm_f32 %s m=%zu n=%zu k=%zu at %zu: %g vs %g",
            variant_name(v), m, n, k, i, got[i], ref[i]);
  }
}

void test_conv_f32(size_t threads) {
  // now and then many output pixels and channels: several tiles of every SVL's 2VL x 2VL
  const bool big = pick(0, 3) == 0;
  const size_t c_in = pick(1, 9), c_out = big ? pick(100, 300) : pick(1, 19), kh = pick(1, 4),
               kw = pick(1, 4);
  Conv2dGeometry g;
  g.stride_h = pick(1, 3); g.stride_w = pick(1, 3);
  g.dil_h = pick(1, 2); g.dil_w = pick(1, 2);
  g.pad_top = pick(0, 2); g.pad_left = pick(0, 2); g.pad_bottom = pick(0, 2); g.pad_right = pick(0, 2);
  const size_t h = pick((kh - 1) * g.dil_h + 1, big ? 40 : 13),
               w = pick((kw - 1) * g.dil_w + 1, big ? 40 : 13);
  const size_t batch = pick(1, 2);
  size_t oh = 0, ow = 0;
  conv2d_output_size(h, w, kh, kw, g, &oh, &ow);
  auto x = randn(batch * c_in * h * w, 3.0f);
  const auto wt = randn(c_out * c_in * kh * kw), bias = randn(c_out);
  // One NaN or +-inf in some images: an output window covers a pixel at most once, so each
  // output sums at most one special product and the result does not depend on the order.
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (size_t b = 0; b < batch; ++b)
    if (pick(0, 2) == 0) x[b * c_in * h * w + pick(0, c_in * h * w - 1)] = specials[pick(0, 2)];
  const Clamp c = random_clamp();
  const auto ref_w = pack_conv2d_f32(Variant::reference, c_out, c_in, kh, kw, wt.data(), bias.data());
  std::vector<float> ref(batch * c_out * oh * ow), bound(ref.size());
  conv2d_f32(ref_w, batch, h, w, x.data(), g, ref.data(), c.lo, c.hi, threads);
  for (size_t b = 0; b < batch; ++b)
    for (size_t o = 0; o < c_out; ++o)
      for (size_t oy = 0; oy < oh; ++oy)
        for (size_t ox = 0; ox < ow; ++ox) {
          volatile float acc = 0.0f;
          float mag = 0.0f;
          for (size_t ky = 0; ky < kh; ++ky)
            for (size_t kx = 0; kx < kw; ++kx)
              for (size_t ci = 0; ci < c_in; ++ci) {
                const long iy = long(oy * g.stride_h + ky * g.dil_h) - long(g.pad_top);
                const long ix = long(ox * g.stride_w + kx * g.dil_w) - long(g.pad_left);
                if (iy < 0 || ix < 0 || iy >= long(h) || ix >= long(w)) continue;
                volatile float prod = x[((b * c_in + ci) * h + iy) * w + ix] *
                                      wt[((o * c_in + ci) * kh + ky) * kw + kx];
                acc = acc + prod;
                mag += std::fabs(prod);
              }
          const size_t idx = ((b * c_out + o) * oh + oy) * ow + ox;
          const float want = clampf(acc + bias[o], c);
          bound[idx] = mag + std::fabs(bias[o]);
          CHECK(ref[idx] == want || (std::isnan(ref[idx]) && std::isnan(want)),
                "conv reference vs naive (c_in=%zu c_out=%zu k=%zux%zu) at %zu: %g vs %g",
                c_in, c_out, kh, kw, idx, ref[idx], want);
        }
  for (Variant v : variants_under_test(Family::igemm_f32)) {
    const auto pw = pack_conv2d_f32(v, c_out, c_in, kh, kw, wt.data(), bias.data());
    std::vector<float> got(ref.size());
    conv2d_f32(pw, batch, h, w, x.data(), g, got.data(), c.lo, c.hi, threads);
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(close(got[i], ref[i], bound[i], 1e-5f), "conv %s at %zu: %g vs %g", variant_name(v), i,
            got[i], ref[i]);
  }
}

// The quantized activations exactly as every kernel sees them (the shared packer's code,
// unpacked): the models below are built on these. The naive quantizer above checks them where
// it is defined (rows without NaN or infinity).
Quant packer_quantize(size_t m, size_t k, const std::vector<float>& a) {
  Quant out{std::vector<int8_t>(m * k), std::vector<int32_t>(m), std::vector<float>(m)};
  quantize_qai8dx(m, k, a.data(), k * 4, out.q.data(), out.zp.data(), out.scale.data());
  for (auto& z : out.zp) z = -z;  // (neg_zp -> zp)
  return out;
}

bool finite_row(const std::vector<float>& a, size_t i, size_t k) {
  for (size_t j = 0; j < k; ++j)
    if (!std::isfinite(a[i * k + j])) return false;
  return true;
}

void check_quantizer(const char* family, size_t m, size_t k, const std::vector<float>& a,
                     const Quant& qp) {
  const Quant qa = naive_quantize(m, k, a.data());
  for (size_t i = 0; i < m; ++i) {
    if (!finite_row(a, i, k)) continue;
    bool same = qa.zp[i] == qp.zp[i] && std::memcmp(&qa.scale[i], &qp.scale[i], 4) == 0;
    for (size_t j = 0; j < k && same; ++j) same = qa.q[i * k + j] == qp.q[i * k + j];
    CHECK(same, "%s: the packer's quantization of row %zu differs from the naive one", family, i);
  }
}

// M and N for the integer families: one to a few tiles of the best variant this CPU runs
// (exact multiples: the full-tile paths alone), sizes spanning several tiles at every SVL (up
// to ~300), or small odd sizes.
void int_dims(size_t m_step, size_t n_step, size_t* m, size_t* n) {
  switch (pick(0, 5)) {
    case 0:
      *m = m_step * pick(1, 3);
      *n = n_step * pick(1, 2);
      return;
    case 1:
      *m = pick(100, 300);
      *n = pick(100, 300);
      return;
    default:
      *m = dim(40);
      *n = dim(40);
  }
}

// The best variant of family f this CPU runs (the reference when none other).
Variant best_variant(Family f) {
  Variant best = Variant::reference;
  for (Variant v : variants_under_test(f)) best = v;  // (listed in dispatch order)
  return best;
}

// An integer GEMM ukernel with a strided destination (dst_stride_col = 3 elements) writes the
// same values as with a contiguous one, and nothing in between. RUN(dst, stride_row, stride_col).
template <class Run>
void check_int_strided_dst(const char* family, Variant v, size_t m, size_t n, Run run) {
  const float fill = -12345.0f;  // outside the clamp every test here uses
  std::vector<float> dense(m * n), strided(m * n * 3, fill);
  run(dense.data(), n * 4, size_t{4});
  run(strided.data(), n * 12, size_t{12});
  for (size_t i = 0; i < m * n; ++i) {
    CHECK((std::memcmp(&strided[i * 3], &dense[i], 4) == 0 ||
           (std::isnan(strided[i * 3]) && std::isnan(dense[i]))) &&
              strided[i * 3 + 1] == fill && strided[i * 3 + 2] == fill,
          "%s %s strided dst m=%zu n=%zu at %zu", family, variant_name(v), m, n, i);
  }
}

// The activations quantized and packed for ukernel uk (mr, kr, sr), as the drivers do.
template <class Ukernel>
std::vector<uint8_t> pack_lhs_for(const Ukernel& uk, size_t m, size_t k, const std::vector<float>& a) {
  std::vector<uint8_t> lp(layout::lhs_qai8dx_size(m, k, uk.get_mr(), uk.get_kr()));
  lhs_quant_pack_qai8dx_f32(m, k, uk.get_mr(), uk.get_kr(), uk.get_sr(), a.data(), k * 4,
                            lp.data());
  return lp;
}

void test_qgemm_qsi8cx(size_t threads) {
  const auto& best = qgemm_qsi8cx_ukernel(best_variant(Family::qgemm_qsi8cx));
  size_t m, n;
  int_dims(best.get_m_step(), best.get_n_step(), &m, &n);
  const size_t k = pick(0, 5) == 0 ? 1 : (m * n > 10000 ? dim(70) : dim(300));
  auto a = activations(m, k);
  add_specials(a, m, k);
  std::vector<int8_t> wq(k * n);
  for (auto& v : wq) v = static_cast<int8_t>(pick(0, 255) - 128);  // includes -128
  auto scales = randn(n, 0.02f);
  for (auto& s : scales) s = std::fabs(s) + 1e-4f;
  const auto bias = randn(n);
  const Clamp c = random_clamp();
  const auto ref_w = pack_qsi8cx(Variant::reference, n, k, wq.data(), n, 1, scales.data(), bias.data());
  std::vector<float> ref(m * n);
  qgemm_qsi8cx(ref_w, m, a.data(), k * 4, ref.data(), n * 4, c.lo, c.hi, threads);
  const Quant qa = packer_quantize(m, k, a);
  check_quantizer("qsi8cx", m, k, a, qa);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      long long acc = 0;
      for (size_t kk = 0; kk < k; ++kk)
        acc += (long long)(qa.q[i * k + kk] - qa.zp[i]) * wq[kk * n + j];
      volatile float s = qa.scale[i] * scales[j];
      volatile float y = static_cast<float>(acc) * s;
      const float want = clampf(y + bias[j], c);
      CHECK(std::memcmp(&ref[i * n + j], &want, 4) == 0 ||
                (std::isnan(ref[i * n + j]) && std::isnan(want)),
            "qsi8cx reference vs naive m=%zu n=%zu k=%zu at (%zu,%zu): %g vs %g",
            m, n, k, i, j, ref[i * n + j], want);
    }
  for (Variant v : variants_under_test(Family::qgemm_qsi8cx)) {
    const auto w = pack_qsi8cx(v, n, k, wq.data(), n, 1, scales.data(), bias.data());
    std::vector<float> got(m * n);
    qgemm_qsi8cx(w, m, a.data(), k * 4, got.data(), n * 4, c.lo, c.hi, threads);
    // Every variant does the reference's operations in its order (integer sums exact, then
    // one rounding per float op: sme2_qgemm.cpp, i8mm_qgemm.cpp, dotprod_qgemm.cpp): bit for
    // bit, signed zeros included (SME2 on both its four-row and its row-by-row output paths)
    for (size_t i = 0; i < m * n; ++i)
      CHECK(std::memcmp(&got[i], &ref[i], sizeof(float)) == 0 ||
                (std::isnan(got[i]) && std::isnan(ref[i])),
            "qsi8cx %s m=%zu n=%zu k=%zu at %zu: %g vs %g", variant_name(v), m, n, k, i, got[i],
            ref[i]);
    if (pick(0, 2) == 0) {
      const auto& uk = qgemm_qsi8cx_ukernel(v);
      const auto lp = pack_lhs_for(uk, m, k, a);
      check_int_strided_dst("qsi8cx", v, m, n, [&](float* dst, size_t sr, size_t sc) {
        uk.run_matmul(m, n, k, lp.data(), w.data.data(), dst, sr, sc, -3.0f, 3.0f);
      });
    }
  }
}

void test_qgemm_qsi4c32(size_t threads) {
  const auto& best =
      qgemm_qsi4c32_ukernel(best_variant(Family::qgemm_qsi4c32));
  size_t m, n;
  int_dims(best.get_m_step(), best.get_n_step(), &m, &n);
  const size_t k = 32 * (m * n > 10000 ? pick(1, 3) : pick(1, 8));
  const size_t blocks = k / 32;
  auto a = activations(m, k);
  add_specials(a, m, k);
  std::vector<uint8_t> nib(n * k / 2);
  for (auto& v : nib) v = static_cast<uint8_t>(pick(0, 255));
  auto scales = randn(n * blocks, 0.05f);
  const auto bias = randn(n);
  const bool with_bias = pick(0, 1);
  const Clamp c = random_clamp();
  const auto ref_w = pack_qsi4c32(Variant::reference, n, k, nib.data(), k / 2, scales.data(),
                                  blocks, with_bias ? bias.data() : nullptr);
  std::vector<float> ref(m * n), fused(m * n);
  qgemm_qsi4c32(ref_w, m, a.data(), k * 4, ref.data(), n * 4, c.lo, c.hi, threads);
  const Quant qa = packer_quantize(m, k, a);
  check_quantizer("qsi4c32", m, k, a, qa);
  auto w_at = [&](size_t col, size_t kk) {
    const uint8_t byte = nib[col * (k / 2) + kk / 2];
    return int((kk % 2 == 0) ? (byte & 15) : (byte >> 4)) - 8;
  };
  auto same = [](float x, float y) {
    return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
  };
  for (size_t j = 0; j < n; ++j) {
    volatile float rsum = 0.0f;
    for (size_t b = 0; b < blocks; ++b) {
      int s = 0;
      for (size_t kk = b * 32; kk < b * 32 + 32; ++kk) s += w_at(j, kk);
      volatile float t = scales[j * blocks + b] * float(s);
      rsum = rsum + t;
    }
    for (size_t i = 0; i < m; ++i) {
      // acc: the blocks' products rounded, then added (the reference's rule); acc_fused: each
      // block as one fused multiply-add (the SME2 kernel's rule: FMLA into ZA)
      volatile float acc = 0.0f, acc_fused = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        int isum = 0;
        for (size_t kk = b * 32; kk < b * 32 + 32; ++kk) isum += qa.q[i * k + kk] * w_at(j, kk);
        volatile float t = float(isum) * scales[j * blocks + b];
        acc = acc + t;
        acc_fused = std::fma(float(isum), scales[j * blocks + b], static_cast<float>(acc_fused));
      }
      const float bb = with_bias ? bias[j] : 0.0f;
      auto out = [&](float acc_v) {
        volatile float zterm = float(-qa.zp[i]) * rsum;
        volatile float inner = acc_v + zterm;
        volatile float y = qa.scale[i] * inner;
        return clampf(y + bb, c);
      };
      const float want = out(acc);
      fused[i * n + j] = out(acc_fused);
      CHECK(same(ref[i * n + j], want),
            "qsi4c32 reference vs naive m=%zu n=%zu k=%zu at (%zu,%zu): %g vs %g", m, n, k, i, j,
            ref[i * n + j], want);
    }
  }
  for (Variant v : variants_under_test(Family::qgemm_qsi4c32)) {
    const auto w = pack_qsi4c32(v, n, k, nib.data(), k / 2, scales.data(), blocks,
                                with_bias ? bias.data() : nullptr);
    std::vector<float> got(m * n);
    qgemm_qsi4c32(w, m, a.data(), k * 4, got.data(), n * 4, c.lo, c.hi, threads);
    // The SME2 kernel accumulates the blocks fused (sme2_qgemm.cpp): the fused model, bit for
    // bit. The others round each block's product as the reference does: the reference, bit for
    // bit. (A relative bound would not hold a fused kernel: the raw sums' partial totals can
    // dwarf what the zero-point term leaves of them - zero point 127, partial sums 155, result
    // -2e-5 differed by 1.6e-5.)
    const std::vector<float>& model = v == Variant::sme2 ? fused : ref;
    for (size_t i = 0; i < m * n; ++i)
      CHECK(same(got[i], model[i]), "qsi4c32 %s m=%zu n=%zu k=%zu at (%zu,%zu): %.9g vs %.9g%s",
            variant_name(v), m, n, k, i / n, i % n, got[i], model[i],
            v == Variant::sme2 ? " (the fused model)" : "");
    if (pick(0, 2) == 0) {
      const auto& uk = qgemm_qsi4c32_ukernel(v);
      const auto lp = pack_lhs_for(uk, m, k, a);
      check_int_strided_dst("qsi4c32", v, m, n, [&](float* dst, size_t sr, size_t sc) {
        uk.run_matmul(m, n, k, kInt4Block, lp.data(), w.data.data(), dst, sr, sc, -3.0f, 3.0f);
      });
    }
  }
}

// ---- (5) fp16 GEMM ----------------------------------------------------------------------------

std::vector<f16_bits> to_f16(const std::vector<float>& v) {
  std::vector<f16_bits> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_f16(v[i]);
  return out;
}

// fp16 activations with the awkward rows: zero, one-signed, tiny (products and sums in the fp16
// subnormal range), large, one outlier. Magnitudes keep sum_k |a * b| far below 65504 for
// K <= 1200 and |b| <= 1, where the NEON variant's fp16 accumulation cannot overflow.
std::vector<f16_bits> activations_f16(size_t m, size_t k) {
  std::vector<float> a(m * k);
  for (size_t i = 0; i < m; ++i) {
    const size_t kind = pick(0, 6);
    for (size_t j = 0; j < k; ++j) {
      float v = uniform(-2.0f, 2.0f);
      if (kind == 1) v = 0.0f;
      if (kind == 2) v = std::fabs(v) + 0.5f;
      if (kind == 3) v = -std::fabs(v);
      if (kind == 4) v *= 1e-3f;
      if (kind == 5) v *= 8.0f;
      if (kind == 6 && j == k / 2) v = 1000.0f;
      a[i * k + j] = v;
    }
  }
  return to_f16(a);
}

Clamp random_clamp_f16() {
  // Also bounds that fp16 cannot represent (rounded by the kernels that clamp in fp16).
  return pick(0, 4) == 4 ? Clamp{-0.3f, 0.7f} : random_clamp();
}

bool same_f16(f16_bits got, f16_bits want) {
  const float g = f16_to_f32(got), w = f16_to_f32(want);
  if (std::isnan(g) || std::isnan(w)) return std::isnan(g) && std::isnan(w);
  return g == w;
}

// (1 + u)^n - 1: the relative bound of n roundings of unit roundoff u (any n).
double gamma_n(size_t n, double u) { return std::expm1(static_cast<double>(n) * std::log1p(u)); }

// The NEON variant's arithmetic, element by element (neon_gemm_f16.cpp): s = fp16(s + a * b)
// fused, k in order from +0; y = fp16(s + bias); clamp to the fp16 bounds. In double, a * b
// (22 significant bits) is exact and so is s + a * b unless the two are more than 53 - 22 bits
// apart, and then the smaller one cannot change the fp16 rounding: with |a * b| < 2^16 (true
// of this data) one rounding of the double to fp16 is the fused result.
f16_bits neon_f16_model(const f16_bits* a, const f16_bits* b_col, size_t b_stride, size_t k,
                        f16_bits bias, Clamp c) {
  f16_bits s = 0;
  for (size_t kk = 0; kk < k; ++kk) {
    s = f64_to_f16(static_cast<double>(f16_to_f32(s)) +
                   static_cast<double>(f16_to_f32(a[kk])) *
                       static_cast<double>(f16_to_f32(b_col[kk * b_stride])));
  }
  const float y = f16_to_f32(f64_to_f16(static_cast<double>(f16_to_f32(s)) +
                                        static_cast<double>(f16_to_f32(bias))));
  const float lo = f16_to_f32(f32_to_f16(c.lo)), hi = f16_to_f32(f32_to_f16(c.hi));
  return f32_to_f16(std::min(std::max(y, lo), hi));
}

// Per variant, reported at the end: elements compared, elements equal to the reference, the
// largest |got - reference| / M (M = sum_k |a b| + |bias|, the scale of the bound) and the
// largest share of the allowed deviation used (1 = at the bound).
struct F16Stats {
  size_t total = 0, equal = 0;
  double max_rel = 0, worst = 0;
};
F16Stats g_f16_stats[kVariantCount];

void test_gemm_f16(size_t threads) {
  const size_t r = pick(0, 9);
  const bool whole_tiles = pick(0, 4) == 0;   // (as test_gemm_f32)
  const size_t tile = sme2_tile_or(8);
  const size_t m = whole_tiles ? tile * pick(1, 3) : dim(67);
  const size_t n = whole_tiles ? tile * pick(1, 2) : dim(70);
  const size_t k = r == 0 ? 1 : (r == 1 ? pick(600, 1200) : dim(150));  // K = 1, big K, odd K
  const auto a = activations_f16(m, k), b = to_f16(randn(k * n)), bias = to_f16(randn(n));
  const bool with_bias = pick(0, 1);
  const Clamp c = random_clamp_f16();
  const f16_bits* bias_p = with_bias ? bias.data() : nullptr;
  const auto ref_w = pack_gemm_f16(Variant::reference, n, k, b.data(), n, 1, bias_p);
  std::vector<f16_bits> ref(m * n);
  gemm_f16(ref_w, m, a.data(), k * 2, ref.data(), n * 2, c.lo, c.hi, threads);
  // Naive model of the reference (fp32 sum of exact fp32 products, + bias, clamp, one rounding)
  // and, per element, the unclamped fp32 sum x32 and M = sum_k |a * b| + |bias|.
  std::vector<float> x32(m * n), mag(m * n);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      volatile float acc = 0.0f;
      double sum_abs = 0.0;
      for (size_t kk = 0; kk < k; ++kk) {
        volatile float prod = f16_to_f32(a[i * k + kk]) * f16_to_f32(b[kk * n + j]);
        acc = acc + prod;
        sum_abs += std::fabs(prod);
      }
      const float bb = with_bias ? f16_to_f32(bias[j]) : 0.0f;
      x32[i * n + j] = acc + bb;
      mag[i * n + j] = static_cast<float>(sum_abs + std::fabs(bb));
      const f16_bits want = f32_to_f16(clampf(x32[i * n + j], c));
      CHECK(ref[i * n + j] == want,
            "gemm_f16 reference vs naive m=%zu n=%zu k=%zu at (%zu,%zu): %g vs %g", m, n, k, i, j,
            f16_to_f32(ref[i * n + j]), f16_to_f32(want));
    }
  for (Variant v : variants_under_test(Family::gemm_f16)) {
    const auto w = pack_gemm_f16(v, n, k, b.data(), n, 1, bias_p);
    std::vector<f16_bits> got(m * n);
    gemm_f16(w, m, a.data(), k * 2, got.data(), n * 2, c.lo, c.hi, threads);
    // The bound of ukernel.h (GemmF16Ukernel) as an interval: got lies within e of x32 before
    // its clamp and (SME2) final rounding, so in [f16(clamp(x32 - e)), f16(clamp(x32 + e))].
    const double e32 = gamma_n(k + 1, 0x1p-24);
    for (size_t i = 0; i < m * n; ++i) {
      double e = 2 * e32 * mag[i] + (k + 2) * 0x1p-125;  // SME2: two fp32 sums
      if (v == Variant::neon) {
        e = gamma_n(k + 1, 0x1p-11) * mag[i] + (k + 1) * 0x1p-25 * (1 + gamma_n(k + 1, 0x1p-11)) +
            e32 * mag[i];
      }
      auto f16_at = [&](double x) {
        return f16_to_f32(f64_to_f16(std::min(std::max(x, double(c.lo)), double(c.hi))));
      };
      const float lo = f16_at(double(x32[i]) - e), hi = f16_at(double(x32[i]) + e);
      const float g = f16_to_f32(got[i]), want = f16_to_f32(ref[i]);
      const bool ok = (std::isnan(g) && std::isnan(want)) || (lo <= g && g <= hi);
      CHECK(ok, "gemm_f16 %s m=%zu n=%zu k=%zu at %zu: %g vs reference %g (allowed [%g, %g])",
            variant_name(v), m, n, k, i, g, want, lo, hi);
      F16Stats& st = g_f16_stats[static_cast<int>(v)];
      ++st.total;
      if (g == want || (std::isnan(g) && std::isnan(want))) {
        ++st.equal;
      } else if (ok) {
        const double room = std::max(double(hi) - want, double(want) - lo);
        st.worst = std::max(st.worst, std::fabs(double(g) - want) / room);
        st.max_rel = std::max(st.max_rel, std::fabs(double(g) - want) / mag[i]);
      }
    }
    if (v == Variant::neon) {  // and bit for bit against the kernel's own arithmetic
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
          const f16_bits want = neon_f16_model(a.data() + i * k, b.data() + j, n, k,
                                               with_bias ? bias[j] : f16_bits{0}, c);
          CHECK(same_f16(got[i * n + j], want),
                "gemm_f16 neon vs its fp16 model m=%zu n=%zu k=%zu at (%zu,%zu): %g vs %g", m, n,
                k, i, j, f16_to_f32(got[i * n + j]), f16_to_f32(want));
        }
    }
  }
}

// A GEMM ukernel's run function with a strided destination (dst_stride_col = 3 elements)
// writes the same values as with a contiguous one, and nothing in between (`fill`, a value the
// clamp [lo, hi] never gives). T: the element type; A, B, bias as the family's packers take them.
template <class T, class Ukernel, class LhsPack, class RhsPack>
void check_strided_dst(const char* family, Variant v, const Ukernel& uk, size_t m, size_t n,
                       size_t k, const T* a, const T* b, const T* bias, LhsPack lhs_pack,
                       RhsPack rhs_pack, T fill, float lo, float hi) {
  const size_t mr = uk.get_mr(), nr = uk.get_nr(), kr = uk.get_kr(), sr = uk.get_sr();
  std::vector<uint8_t> lp(layout::lhs_plain_size(m, k, mr, kr, sizeof(T)));
  std::vector<uint8_t> rp(layout::rhs_plain_size(n, k, nr, kr, sizeof(T)));
  lhs_pack(m, k, mr, kr, sr, a, k * sizeof(T), lp.data());
  rhs_pack(n, k, nr, kr, sr, b, n, 1, bias, rp.data());
  std::vector<T> dense(m * n), strided(m * n * 3, fill);
  uk.run_matmul(m, n, k, lp.data(), rp.data(), dense.data(), n * sizeof(T), sizeof(T), lo, hi);
  uk.run_matmul(m, n, k, lp.data(), rp.data(), strided.data(), n * 3 * sizeof(T), 3 * sizeof(T),
                lo, hi);
  for (size_t i = 0; i < m * n; ++i) {
    CHECK(strided[i * 3] == dense[i] && strided[i * 3 + 1] == fill && strided[i * 3 + 2] == fill,
          "%s %s strided dst m=%zu n=%zu k=%zu at %zu", family, variant_name(v), m, n, k, i);
  }
}

// Every fp32 GEMM variant, strided (for SME2: the row-by-row store through row_buf checked
// against the four-row one); M up to ~300 spans several tiles at every SVL, K past 32 runs the
// sixteen-step loop.
void test_gemm_f32_strided_dst() {
  const size_t m = pick(0, 1) ? pick(1, 40) : pick(100, 300), n = pick(1, 70);
  const size_t k = pick(0, 1) ? pick(1, 20) : pick(33, 90);
  const auto a = activations(m, k), b = randn(k * n), bias = randn(n);
  for (Variant v : compiled_variants(Family::gemm_f32)) {
    if (!cpu_supports(Family::gemm_f32, v)) continue;
    check_strided_dst<float>("gemm_f32", v, gemm_f32_ukernel(v), m, n, k, a.data(), b.data(),
                             bias.data(), lhs_pack_f32, rhs_pack_f32, -12345.0f, -3.0f, 3.0f);
  }
}

// Every fp16 variant, strided (K past 32: the SME2 kernel's sixteen-step K loop as well as its
// single steps).
void test_gemm_f16_strided_dst() {
  const size_t m = pick(1, 40), n = pick(1, 40), k = pick(0, 1) ? pick(1, 20) : pick(33, 90);
  const auto a = activations_f16(m, k), b = to_f16(randn(k * n)), bias = to_f16(randn(n));
  for (Variant v : compiled_variants(Family::gemm_f16)) {
    if (!cpu_supports(Family::gemm_f16, v)) continue;
    check_strided_dst<f16_bits>("gemm_f16", v, gemm_f16_ukernel(v), m, n, k, a.data(),
                                b.data(), bias.data(), lhs_pack_f16, rhs_pack_f16,
                                f16_bits{0x7e01} /* a NaN no kernel produces */, -1.0f, 1.0f);
  }
}

void test_errors() {
  // K not a multiple of the int4 block: a clear error, for every compiled variant.
  std::vector<uint8_t> nib(4 * 40 / 2, 0x88);
  std::vector<float> scales(8, 1.0f);
  for (Variant v : compiled_variants(Family::qgemm_qsi4c32)) {
    if (!cpu_supports(v)) continue;
    std::string msg;
    try {
      pack_qsi4c32(v, 4, 40, nib.data(), 20, scales.data(), 2, nullptr);
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    CHECK(msg.find("not a positive multiple of the int4 block length 32") != std::string::npos,
          "K=40 int4 (%s) did not raise the block-length error (got '%s')", variant_name(v),
          msg.c_str());
  }
  // MatMulNBits with an asymmetric zero point is refused; block 64 expands to 2 x 32.
  std::vector<uint8_t> b(2 * 64 / 2, 0x21), out(2 * 64 / 2);
  std::vector<float> s = {0.5f, 0.25f}, out_s(4);
  std::vector<uint8_t> zp = {0x07, 0x08};
  bool threw = false;
  try {
    matmulnbits_to_qsu4c32(2, 64, 64, b.data(), s.data(), zp.data(), out.data(), out_s.data());
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw, "MatMulNBits zero point 7 was accepted");
  matmulnbits_to_qsu4c32(2, 64, 64, b.data(), s.data(), nullptr, out.data(), out_s.data());
  CHECK(out_s[0] == 0.5f && out_s[1] == 0.5f && out_s[2] == 0.25f && out_s[3] == 0.25f,
        "MatMulNBits block 64 scales not expanded to 32");
  CHECK(out == b, "MatMulNBits nibbles not carried over");
  // Clamp bounds reversed.
  const std::vector<float> one(1, 1.0f);
  const auto w = pack_gemm_f32(Variant::reference, 1, 1, one.data(), 1, 1, nullptr);
  float y = 0;
  threw = false;
  try {
    gemm_f32(w, 1, one.data(), 4, &y, 4, 1.0f, -1.0f, 1);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw, "clamp_min > clamp_max was accepted");
  // Without FEAT_FP16 (Armv8.0) the NEON fp16 kernel is refused by name, and a NEON ceiling
  // gives the fp16 family its reference.
  if (compiled_in(Variant::neon) && cpu_supports(Variant::neon) && !cpu_features().fp16) {
    std::string msg;
    try {
      gemm_f16_ukernel(Variant::neon);
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    CHECK(msg.find("FEAT_FP16") != std::string::npos,
          "gemm_f16 neon without FEAT_FP16 was not refused (got '%s')", msg.c_str());
    CHECK(select_variant(Family::gemm_f16, Variant::neon) == Variant::reference,
          "gemm_f16 under a neon ceiling without FEAT_FP16 did not select the reference");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string expect;
  int rounds = 40;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--expect-variant" && i + 1 < argc) {
      expect = argv[++i];
    } else if (arg == "--seed" && i + 1 < argc) {
      g_rng.seed(std::strtoull(argv[++i], nullptr, 10));
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--expect-variant NAME] [--seed N] [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  try {
    const CpuFeatures& cpu = cpu_features();
    std::printf("cpu: %s", cpu.arch.c_str());
    for (const auto& f : cpu.names()) std::printf(" %s", f.c_str());
    std::printf("\n");
    const Family families[] = {Family::gemm_f32, Family::igemm_f32, Family::qgemm_qsi8cx,
                               Family::qgemm_qsi4c32, Family::gemm_f16};
    // Architecture: FEAT_SME requires FEAT_FP16.
    CHECK(!cpu.sme || cpu.fp16, "the CPU reports SME but not FEAT_FP16");
    std::optional<Variant> expected_level;
    if (!expect.empty()) {
      expected_level = parse_variant(expect);
      if (!expected_level) {
        std::fprintf(stderr, "FAIL: --expect-variant '%s' is not a variant name\n", expect.c_str());
        return 2;
      }
    }
    for (Family f : families) {
      const Variant sel = select_variant(f);
      const UkernelInfo info = ukernel_info(f, sel);
      std::printf("selected %-14s %-10s %s (m_step %zu n_step %zu mr %zu nr %zu kr %zu sr %zu)\n",
                  family_name(f), variant_name(sel), info.name.c_str(), info.m_step, info.n_step,
                  info.mr, info.nr, info.kr, info.sr);
      if (expected_level) {
        Variant want = Variant::reference;
        for (Variant v : planned_variants(f)) {
          if (static_cast<int>(v) > static_cast<int>(*expected_level)) continue;
          if (f == Family::gemm_f16 && v == Variant::neon) {
            if (*expected_level != Variant::neon) {
              CHECK(cpu.fp16, "--expect-variant %s: the CPU should report FEAT_FP16",
                    expect.c_str());
            } else if (!cpu.fp16) {
              std::printf("expect   gemm_f16       reference: no FEAT_FP16 for its neon variant\n");
              continue;
            }
          }
          want = v;
          break;
        }
        CHECK(sel == want, "%s selected %s but --expect-variant %s requires %s", family_name(f),
              variant_name(sel), expect.c_str(), variant_name(want));
      }
    }
    test_errors();
    for (int r = 0; r < rounds; ++r) {
      const size_t threads = (r % 3 == 2) ? 3 : 1;
      test_gemm_f32(threads);
      test_conv_f32(threads);
      test_qgemm_qsi8cx(threads);
      test_qgemm_qsi4c32(threads);
      test_gemm_f16(threads);
      test_gemm_f16_strided_dst();
      test_gemm_f32_strided_dst();
    }
    for (Variant v : variants_under_test(Family::gemm_f16)) {
      const F16Stats& st = g_f16_stats[static_cast<int>(v)];
      std::printf("gemm_f16 %s vs reference: %zu of %zu equal; max |diff| / M = %.3g; at most "
                  "%.3g of the allowed deviation used\n",
                  variant_name(v), st.equal, st.total, st.max_rel, st.worst);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: uncaught exception: %s\n", e.what());
    return 1;
  }
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  if (g_failures) {
    std::fprintf(stderr, "kleidi_test FAILED\n");
    return 1;
  }
  std::printf("kleidi_test OK\n");
  return 0;
}
