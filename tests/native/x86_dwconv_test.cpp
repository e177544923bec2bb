// The channel-blocked depthwise conv and max pooling (NCHW and channels-last) and the register-tile transpose of
// providers/cpu_mlas/src/dwconv_impl.h, and the row layer norm of layernorm_impl.h (with a
// repeating skip, bias, beta, statistics; and the RMS form), and the attention softmax row of
// attention_impl.h and its Softmax op rows (AVX2 and AVX-512 builds), the SiLU of sigmoid_avx2.cpp and
// sigmoid_avx512.cpp, and the grouped channels-last conv of
// gconv_impl.h (8- and 4-lane vectors, blocks cut by a row's end, pads), compiled for one ISA by the -m flags given (the
// Python module runs only the CPU's best variant; this runs any the CPU can), against plain
// loops in double precision. Exit status 0 when every element matches.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <random>
#include <vector>

#include "dwconv_impl.h"
#include "gconv_impl.h"
#include "layernorm_impl.h"
#if defined(__AVX2__) && defined(__FMA__)
#include "attention_impl.h"
#include "sigmoid_avx2.cpp"   // (the SiLU of each x86 build, its variant's own code)
#endif
#if defined(__AVX512F__)
#include "sigmoid_avx512.cpp"
#endif

using namespace onnxplex::mlas;

int main() {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto fill = [&](std::vector<float>& v) {
    for (auto& e : v) e = u(rng);
  };
  int bad = 0;
  for (size_t rows : {1, 7, 8, 16, 17, 33}) {
    for (size_t cols : {1, 8, 9, 16, 40, 257, 300}) {
      for (bool acc : {false, true}) {
        std::vector<float> s(rows * cols), d(rows * cols), before;
        fill(s);
        fill(d);
        before = d;
        detail::transpose_f32_any(s.data(), rows, cols, cols, d.data(), rows, acc, -0.5f, 0.7f);
        for (size_t i = 0; i < rows; ++i) {
          for (size_t j = 0; j < cols; ++j) {
            const float v = s[i * cols + j] + (acc ? before[j * rows + i] : 0.0f);
            if (std::fabs(std::min(std::max(v, -0.5f), 0.7f) - d[j * rows + i]) > 1e-6f) ++bad;
          }
        }
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  // Plain transposes (tiles stored straight into the destination) and clamped ones, with
  // more than 256 columns (done in chunks of columns) and tails of rows and columns.
  for (size_t rows : {16, 17, 33, 48}) {
    for (size_t cols : {16, 40, 256, 257, 300, 1000}) {
      for (bool plain : {true, false}) {
        std::vector<float> s(rows * cols), d(rows * cols);
        fill(s);
        const float lo = plain ? -inf : -0.5f, hi = plain ? inf : 0.7f;
        detail::transpose_f32_any(s.data(), rows, cols, cols, d.data(), rows, false, lo, hi);
        for (size_t i = 0; i < rows; ++i) {
          for (size_t j = 0; j < cols; ++j) {
            bad += std::min(std::max(s[i * cols + j], lo), hi) != d[j * rows + i];
          }
        }
      }
    }
  }
  // A plain copy of a few rows (no clamp, no accumulation: the interleaving path; three rows
  // take the AVX-512 build's permutes, 16 columns at a time, then a tail).
  for (size_t rows : {1, 2, 3, 4, 5})
  for (size_t cols : {1, 15, 16, 37, 48, 1000}) {
    std::vector<float> s(rows * cols), d(rows * cols);
    fill(s);
    detail::transpose_f32_any(s.data(), rows, cols, cols, d.data(), rows, false, -inf, inf);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) bad += s[i * cols + j] != d[j * rows + i];
    }
  }
  // Channel counts with and without a partial block (whole blocks run the in-place position
  // kernel, four or eight positions a group by the plane's width; a partial one the padded
  // bands), planes narrower and wider than a band, 3x3 and 5x5 kernels, dilation 2.
  for (size_t c : {3, 8, 16, 24, 40, 48, 64}) {
    for (size_t h : {5, 7, 14, 30, 61, 120}) {
      if (h == 120 && c < 48) continue;
      for (size_t s : {1, 2}) {
        for (auto [k, d] : {std::pair<size_t, size_t>{3, 1}, {5, 1}, {3, 2}}) {
          if (d * (k - 1) + 1 > h) continue;
          const size_t pad = d * (k / 2), span = d * (k - 1) + 1;
          const size_t ho = (h + 2 * pad - span) / s + 1;
          DwConvGeometry g{h, h + 3, ho, (h + 3 + 2 * pad - span) / s + 1, k, k, s, s, d, d, pad,
                           pad};
          std::vector<float> x(c * g.h * g.w), w(c * k * k), b(c), y(c * g.ho * g.wo);
          fill(x);
          fill(w);
          fill(b);
          detail::dwconv_f32_any(x.data(), w.data(), b.data(), y.data(), c, g, -1.0f, 1.0f);
          // The channels-last kernel on the same image, in four pieces (two channel ranges,
          // the second starting mid-block below 48 channels, times two row ranges): y itself,
          // transposed.
          std::vector<float> xn(x.size()), yn(y.size(), std::nanf(""));
          for (size_t ch = 0; ch < c; ++ch) {
            for (size_t p = 0; p < g.h * g.w; ++p) xn[p * c + ch] = x[ch * g.h * g.w + p];
          }
          // (with 48 or more channels the first range is one whole block: both ranges then
          // have whole blocks only)
          const size_t cmid = c >= 48 ? detail::kDwLanes : c / 2 + 1, ymid = g.ho / 2;
          for (auto [c0, c1] : {std::pair<size_t, size_t>{0, cmid}, {cmid, c}}) {
            for (auto [y0, y1] : {std::pair<size_t, size_t>{0, ymid}, {ymid, g.ho}}) {
              detail::dwconv_nhwc_f32_any(xn.data(), w.data(), b.data(), yn.data(), c, c0, c1,
                                          y0, y1, g, -1.0f, 1.0f);
            }
          }
          for (size_t ch = 0; ch < c; ++ch) {
            for (size_t p = 0; p < g.ho * g.wo; ++p) {
              bad += !(std::fabs(yn[p * c + ch] - y[ch * g.ho * g.wo + p]) <= 1e-6f);
            }
          }
          // Max pooling, channels-last (two row ranges) against the NCHW kernel; then again
          // with a few NaNs in the image (the windows holding one come out NaN in both).
          std::vector<float> xm = x, xnm = xn;
          for (int with_nan = 0; with_nan < 2; ++with_nan) {
            if (with_nan) {
              for (size_t q : {size_t{5}, x.size() / 3, x.size() - 2}) {
                xm[q] = std::nanf("");
                xnm[(q % (g.h * g.w)) * c + q / (g.h * g.w)] = xm[q];
              }
            }
            std::vector<float> mp(y.size()), mpn(y.size(), 7.0f);
            detail::maxpool_f32_flat(xm.data(), mp.data(), c, g);
            detail::maxpool_nhwc_f32_any(xnm.data(), mpn.data(), c, 0, ymid, g);
            detail::maxpool_nhwc_f32_any(xnm.data(), mpn.data(), c, ymid, g.ho, g);
            for (size_t ch = 0; ch < c; ++ch) {
              for (size_t p = 0; p < g.ho * g.wo; ++p) {
                const float a = mpn[p * c + ch], e = mp[ch * g.ho * g.wo + p];
                bad += !(a == e || (std::isnan(a) && std::isnan(e)));
              }
            }
          }
          for (size_t ch = 0; ch < c; ++ch) {
            for (size_t oy = 0; oy < g.ho; ++oy) {
              for (size_t ox = 0; ox < g.wo; ++ox) {
                double a = b[ch];
                for (size_t i = 0; i < k; ++i) {
                  for (size_t j = 0; j < k; ++j) {
                    const long iy = long(oy * s + i * d) - long(pad), ix = long(ox * s + j * d) - long(pad);
                    if (iy >= 0 && iy < long(g.h) && ix >= 0 && ix < long(g.w)) {
                      a += double(w[(ch * k + i) * k + j]) * x[(ch * g.h + iy) * g.w + ix];
                    }
                  }
                }
                a = std::min(std::max(a, -1.0), 1.0);
                if (std::fabs(a - y[(ch * g.ho + oy) * g.wo + ox]) > 1e-5) ++bad;
              }
            }
          }
        }
      }
    }
  }
  // Layer norm: rows of d values (partial 16-lane blocks included), skip repeating every
  // 2 rows, against double precision.
  for (size_t d : {1, 7, 16, 50, 771}) {
    for (bool rms : {false, true}) {
      const size_t rows = 6;
      std::vector<float> x(rows * d), skip(2 * d), bias(d), gamma(d), beta(d), y(rows * d),
          sum(rows * d), mean(rows), inv(rows);
      fill(x);
      fill(skip);
      fill(bias);
      fill(gamma);
      fill(beta);
      for (auto& v : x) v += 3.0f;  // a mean far from 0: the variance's two passes matter
      LayerNormArgs a{x.data(), skip.data(), 2, bias.data(), gamma.data(),
                      rms ? nullptr : beta.data(), y.data(), sum.data(), mean.data(),
                      inv.data(), rows, d, 1e-5f, rms};
      detail::layer_norm_rows_any(a, 0, rows);
      for (size_t r = 0; r < rows; ++r) {
        std::vector<double> s(d);
        double m = 0, q = 0;
        for (size_t i = 0; i < d; ++i) {
          s[i] = double(float(float(x[r * d + i] + skip[(r % 2) * d + i]) + bias[i]));
          if (s[i] != sum[r * d + i]) ++bad;
          m += s[i];
          q += s[i] * s[i];
        }
        m /= double(d);
        double var = 0;
        for (size_t i = 0; i < d; ++i) var += (s[i] - m) * (s[i] - m);
        var /= double(d);
        const double iv = 1.0 / std::sqrt((rms ? q / double(d) : var) + 1e-5);
        if (std::fabs(iv - inv[r]) > 1e-6 * iv) ++bad;
        if (!rms && std::fabs(m - mean[r]) > 1e-6) ++bad;
        for (size_t i = 0; i < d; ++i) {
          const double want = rms ? s[i] * iv * gamma[i] : (s[i] - m) * iv * gamma[i] + beta[i];
          if (std::fabs(want - y[r * d + i]) > 1e-5 * (1.0 + std::fabs(want))) ++bad;
        }
      }
    }
  }
#if defined(__AVX2__) && defined(__FMA__)
  // Attention softmax rows (full vectors and a tail; with and without a bias), against double;
  // a row holding a NaN and a row all -inf come out NaN, as numpy's softmax.
  for (size_t n : {1, 7, 8, 16, 17, 33, 64, 70}) {
    for (bool with_bias : {false, true}) {
      std::vector<float> x(n), b(n);
      fill(x);
      fill(b);
      for (auto& v : x) v *= 8.0f;
      const std::vector<float> orig = x;
      detail::softmax_row_any(x.data(), n, 0.5f, with_bias ? b.data() : nullptr);
      std::vector<double> z(n);
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (size_t j = 0; j < n; ++j) {
        z[j] = double(orig[j]) * 0.5 + (with_bias ? double(b[j]) : 0.0);
        m = std::max(m, z[j]);
      }
      for (size_t j = 0; j < n; ++j) sum += std::exp(z[j] - m);
      for (size_t j = 0; j < n; ++j) {
        const double want = std::exp(z[j] - m) / sum;
        if (!(std::fabs(want - x[j]) <= 1e-6 + 1e-5 * want)) ++bad;
      }
    }
  }
  for (bool all_masked : {false, true}) {
    const size_t n = 21;
    std::vector<float> x(n), b(n, all_masked ? -std::numeric_limits<float>::infinity() : 0.0f);
    fill(x);
    if (!all_masked) x[3] = std::numeric_limits<float>::quiet_NaN();  // in a full vector
    detail::softmax_row_any(x.data(), n, 1.0f, b.data());
    for (float v : x) {
      if (!std::isnan(v)) ++bad;
    }
  }
  // The Softmax / LogSoftmax op's rows (softmax_rows_any): rows shorter than a vector, whole
  // vectors and tails, against double; rows holding a NaN or +inf, or all -inf, come out NaN.
  for (size_t cols : {1, 3, 10, 16, 17, 40, 1000}) {
    for (bool lg : {false, true}) {
      const size_t rows = 3;
      std::vector<float> x(rows * cols), y(rows * cols, 5.0f);
      fill(x);
      for (auto& v : x) v *= 6.0f;
      detail::softmax_rows_any(x.data(), y.data(), rows, cols, lg);
      for (size_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * cols;
        double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (size_t j = 0; j < cols; ++j) m = std::max(m, double(xr[j]));
        for (size_t j = 0; j < cols; ++j) sum += std::exp(double(xr[j]) - m);
        for (size_t j = 0; j < cols; ++j) {
          const double want = lg ? (double(xr[j]) - m) - std::log(sum)
                                 : std::exp(double(xr[j]) - m) / sum;
          if (!(std::fabs(want - y[r * cols + j]) <= 1e-6 + 1e-5 * std::fabs(want))) ++bad;
        }
      }
    }
  }
  for (int kind = 0; kind < 3; ++kind) {
    for (size_t cols : {5, 21}) {
      const float inf = std::numeric_limits<float>::infinity();
      std::vector<float> x(cols), y(cols);
      fill(x);
      if (kind == 0) x[cols - 2] = std::numeric_limits<float>::quiet_NaN();
      if (kind == 1) x[1] = inf;
      if (kind == 2) std::fill(x.begin(), x.end(), -inf);
      for (bool lg : {false, true}) {
        detail::softmax_rows_any(x.data(), y.data(), 1, cols, lg);
        for (float v : y) bad += !std::isnan(v);
      }
    }
  }
#endif
  // Grouped channels-last conv: x [h, w, c], weight [m, cgi, k, k] laid out by
  // gconv_pack_weight's rule, bias, z, clamp; against a double loop.
  for (const auto& [cgi, cgo, groups, stride, pad] :
       {std::array<size_t, 5>{8, 8, 3, 1, 1}, {4, 12, 2, 2, 1}, {6, 4, 2, 1, 2},
        {2, 24, 1, 1, 0}}) {
    const size_t k = 3, h = 7, w = 11;
    GConvShape sh{cgi * groups, cgo * groups, groups, cgi, cgo};
    const size_t ho = (h + 2 * pad - k) / stride + 1, wo = (w + 2 * pad - k) / stride + 1;
    DwConvGeometry g{h, w, ho, wo, k, k, stride, stride, 1, 1, pad, pad};
    std::vector<float> x(h * w * sh.c), wt(sh.m * cgi * k * k), wr(wt.size()), b(sh.m),
        z(ho * wo * sh.m), y(ho * wo * sh.m);
    fill(x), fill(wt), fill(b), fill(z);
    for (size_t gi = 0; gi < groups; ++gi) {   // gconv_pack_weight's layout
      for (size_t o = 0; o < cgo; ++o)
        for (size_t i = 0; i < cgi; ++i)
          for (size_t t = 0; t < k * k; ++t)
            wr[((gi * k * k + t) * cgi + i) * cgo + o] = wt[((gi * cgo + o) * cgi + i) * k * k + t];
    }
    detail::gconv_nhwc_any(x.data(), wr.data(), b.data(), z.data(), y.data(), sh, g, 0, ho,
                           -0.8f, 0.9f);
    for (size_t oy = 0; oy < ho; ++oy) {
      for (size_t ox = 0; ox < wo; ++ox) {
        for (size_t co = 0; co < sh.m; ++co) {
          const size_t gi = co / cgo;
          double acc = b[co] + z[(oy * wo + ox) * sh.m + co];
          for (size_t th = 0; th < k; ++th) {
            for (size_t tw = 0; tw < k; ++tw) {
              const long iy = long(oy * stride + th) - long(pad);
              const long ix = long(ox * stride + tw) - long(pad);
              if (iy < 0 || ix < 0 || iy >= long(h) || ix >= long(w)) continue;
              for (size_t i = 0; i < cgi; ++i) {
                acc += double(x[(iy * w + ix) * sh.c + gi * cgi + i]) *
                       wt[((co * cgi) + i) * k * k + th * k + tw];
              }
            }
          }
          const double want = std::min(std::max(acc, -0.8), 0.9);
          if (std::fabs(want - y[(oy * wo + ox) * sh.m + co]) > 1e-5) ++bad;
        }
      }
    }
  }
  // SiLU (sigmoid.h's PostAct::kSwish) of each vector build: x / (1 + e^-x) within 4e-7
  // relative of the double-precision value (|y| > 1e-30), odd lengths (masked or plain tails),
  // and the special values: NaN stays NaN, +inf stays +inf, -inf gives NaN (-inf times a
  // sigmoid of 0), far negative values -0.
  {
    std::vector<float> xs;
    for (int i = -200000; i <= 200000; ++i) xs.push_back(static_cast<float>(i) * 5e-4f);
    for (float v : {-1e-30f, 1e-30f, -87.5f, -86.9f, 88.0f, -100.0f, 100.0f, 3e38f, -3e38f})
      xs.push_back(v);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> special = {nan, inf, -inf, 0.0f, -0.0f};
    std::vector<void (*)(const float*, float*, size_t)> variants;
#if defined(__AVX2__) && defined(__FMA__)
    variants.push_back(swish_f32_avx2);
#endif
#if defined(__AVX512F__)
    variants.push_back(swish_f32_avx512);
#endif
    for (auto fn : variants) {
      std::vector<float> y(xs.size());
      fn(xs.data(), y.data(), xs.size());
      for (size_t i = 0; i < xs.size(); ++i) {
        const double x = xs[i], want = x / (1.0 + std::exp(-x));
        if (std::fabs(want) > 1e-30 ? std::fabs(y[i] - want) > 4e-7 * std::fabs(want)
                                    : std::fabs(y[i]) > 1e-30) ++bad;
      }
      std::vector<float> ys(special.size());
      fn(special.data(), ys.data(), special.size());
      if (!std::isnan(ys[0]) || ys[1] != inf || !std::isnan(ys[2]) || ys[3] != 0.0f ||
          ys[4] != 0.0f)
        ++bad;
    }
  }
  std::printf("%d mismatches\n", bad);
  return bad != 0;
}
