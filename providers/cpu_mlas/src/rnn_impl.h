// The recurrent loop of rnn.h, written once over a policy A: static A::sigmoid(float*, n) and
// A::tanh(float*, n) in place, A::prepare(m, ld, k, n, rows) -> A::Matrix (m's k x n block,
// repacked or not) and A::gemm(v, ldv, rows, matrix, out, ldo) (gemm_acc's contract); each ISA's
// translation unit instantiates it with its own vector functions (and its flags vectorize the
// remaining loops).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "rnn.h"

// (internal linkage: each ISA's translation unit gets its own copy, compiled with its flags,
// which the linker must not merge)
namespace onnxplex::mlas {
namespace {
namespace rnn_detail {

// out[b][j] += sum_k v[b][k] * m[k * ld + j] for b < rows, j < n: column panels of kCols,
// whose accumulators stay in registers over k and whose K x kCols slice of m stays in L1 for
// the next row (m is read from memory once, not once per row).
constexpr size_t kCols = 32;

inline void gemm_acc(const float* v, size_t ldv, size_t rows, size_t k_count, const float* m,
                     size_t ld, float* out, size_t ldo, size_t n) {
  for (size_t j0 = 0; j0 < n; j0 += kCols) {
    const size_t jn = std::min(kCols, n - j0);
    for (size_t b = 0; b < rows; ++b) {
      const float* vb = v + b * ldv;
      float acc[kCols] = {};
      if (jn == kCols) {
        for (size_t k = 0; k < k_count; ++k) {
          const float a = vb[k];
          const float* row = m + k * ld + j0;
          for (size_t j = 0; j < kCols; ++j) acc[j] += a * row[j];
        }
      } else {
        for (size_t k = 0; k < k_count; ++k) {
          const float a = vb[k];
          const float* row = m + k * ld + j0;
          for (size_t j = 0; j < jn; ++j) acc[j] += a * row[j];
        }
      }
      float* o = out + b * ldo + j0;
      for (size_t j = 0; j < jn; ++j) o[j] += acc[j];
    }
  }
}

inline void clip(float* x, size_t n, float c) {
  if (c > 0)
    for (size_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -c), c);
}

// A's preparation of R^T's k x n block at m (which: 0 the gates' product, 1 a GRU's h gate),
// from the call's cache when it has one.
template <class A>
std::shared_ptr<const typename A::Matrix> prepared(const RnnSeq& s, int which, const float* m,
                                                   size_t ld, size_t k, size_t n) {
  using M = typename A::Matrix;
  auto make = [&] { return A::prepare(m, ld, k, n, s.B); };
  if (s.cache == nullptr) return std::make_shared<const M>(make());
  static const char variant = 0;   // (one per policy and translation unit: each ISA's own)
  return s.cache->get<M>(&variant, s.B, which, make);
}

template <class A>
void rnn_seq(const RnnSeq& s) {
  const size_t H = s.H, B = s.B;
  const size_t G = s.cell == RnnCell::kLstm ? 4 : s.cell == RnnCell::kGru ? 3 : 1;
  const size_t GH = G * H, H2 = 2 * H;
  // g: every batch entry's gate pre-activations; a, hh: per-entry scratch rows
  std::vector<float> g(B * GH), a(B * H), hh(B * H);
  const bool gru = s.cell == RnnCell::kGru;
  // R^T's columns the products read: all gates (GRU: z and r; its h gate apart)
  const auto r_gates_kept = prepared<A>(s, 0, s.rt, GH, H, gru ? H2 : GH);
  const auto r_h_kept = prepared<A>(s, 1, gru ? s.rt + H2 : s.rt, GH, H, gru ? H : 0);
  const auto& r_gates = *r_gates_kept;
  const auto& r_h = *r_h_kept;
  for (size_t step = 0; step < s.T; ++step) {
    const size_t t = s.reverse ? s.T - 1 - step : step;
    const float* x = s.xw + t * s.xw_ld_t;
    float* y = s.y + t * s.y_ld_t;
    // the recurrent products of all entries at once (R^T read once a step)
    for (size_t b = 0; b < B; ++b)
      std::memcpy(g.data() + b * GH, x + b * s.xw_ld_b, GH * sizeof(float));
    A::gemm(s.h, H, B, r_gates, g.data(), GH);
    if (s.cell == RnnCell::kGru) {
      for (size_t b = 0; b < B; ++b) {
        float* gb = g.data() + b * GH;
        clip(gb, H2, s.clip);
        A::sigmoid(gb, H2);
      }
      std::fill(hh.begin(), hh.end(), 0.0f);
      if (s.linear_before_reset) {
        A::gemm(s.h, H, B, r_h, hh.data(), H);
      } else {
        for (size_t b = 0; b < B; ++b)
          for (size_t j = 0; j < H; ++j) a[b * H + j] = g[b * GH + H + j] * s.h[b * H + j];
        A::gemm(a.data(), H, B, r_h, hh.data(), H);
      }
    }
    for (size_t b = 0; b < B; ++b) {
      float* h = s.h + b * H;
      float* yb = y + b * s.y_ld_b;
      if (s.lens != nullptr && static_cast<int64_t>(t) >= s.lens[b]) {
        std::memset(yb, 0, H * sizeof(float));   // (the state is kept)
        continue;
      }
      float* gb = g.data() + b * GH;
      if (s.cell == RnnCell::kRnn) {
        clip(gb, H, s.clip);
        A::tanh(gb, H);
        std::memcpy(h, gb, H * sizeof(float));
      } else if (s.cell == RnnCell::kLstm) {
        float* c = s.c + b * H;
        float *gi = gb, *go = gb + H, *gf = gb + 2 * H, *gc = gb + 3 * H;
        if (s.peep != nullptr) {  // peepholes go in before the clip, as in onnxruntime
          const float *pi = s.peep, *pf = s.peep + 2 * H;
          for (size_t j = 0; j < H; ++j) {
            gi[j] += pi[j] * c[j];
            gf[j] += pf[j] * c[j];
          }
          clip(gi, H, s.clip);
          clip(gf, H, s.clip);
          clip(gc, H, s.clip);
        } else {
          clip(gb, GH, s.clip);
        }
        A::sigmoid(gi, H);
        A::sigmoid(gf, H);
        A::tanh(gc, H);
        for (size_t j = 0; j < H; ++j) c[j] = gf[j] * c[j] + gi[j] * gc[j];
        if (s.peep != nullptr) {
          const float* po = s.peep + H;
          for (size_t j = 0; j < H; ++j) go[j] += po[j] * c[j];
          clip(go, H, s.clip);
        }
        A::sigmoid(go, H);
        float* ab = a.data() + b * H;
        std::memcpy(ab, c, H * sizeof(float));
        A::tanh(ab, H);
        for (size_t j = 0; j < H; ++j) h[j] = go[j] * ab[j];
      } else {  // GRU: z, r activated above; the h gate's product is in hh
        const float *z = gb, *r = gb + H, *xh = x + b * s.xw_ld_b + H2;
        float* hb = hh.data() + b * H;
        for (size_t j = 0; j < H; ++j) {
          const float rb = s.rbh != nullptr ? s.rbh[j] : 0.0f;
          // linear_before_reset: r * (H R_h^T + Rb_h); else (r * H) R_h^T + Rb_h
          hb[j] = (s.linear_before_reset ? (hb[j] + rb) * r[j] : hb[j] + rb) + xh[j];
        }
        clip(hb, H, s.clip);
        A::tanh(hb, H);
        for (size_t j = 0; j < H; ++j) h[j] = hb[j] + z[j] * (h[j] - hb[j]);
      }
      std::memcpy(yb, h, H * sizeof(float));
    }
  }
}

}  // namespace rnn_detail
}  // namespace
}  // namespace onnxplex::mlas
