// NonMaxSuppression's greedy selection, as cpu_mlas's numpy kernel (vision.py) computes it, in
// double. Knows nothing about Python.
//
// Per (batch, class): the boxes scoring above the threshold (all, without one), in descending
// score order with ties to the lower box index and NaN scores last; each box not suppressed
// is selected (up to max_out), and suppresses every later box whose IoU with it exceeds
// iou_threshold. IoU is 0 when either area or the union is not positive, and NaN
// coordinates give NaN intersections, which suppress nothing (numpy's max and min propagate
// NaN; std::max would not).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace onnxplex::mlas {

namespace nms_detail {

inline double nan_max(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                        : (a > b ? a : b);
}
inline double nan_min(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                        : (a < b ? a : b);
}

}  // namespace nms_detail

// corners: [nb, n, 4] as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2 (the caller orders them);
// scores: [nb, nc, n]. Appends (batch, class, box) triples to out.
inline void nms(const double* corners, const double* scores, size_t nb, size_t nc, size_t n,
                int64_t max_out, double iou_threshold, bool has_score_threshold,
                double score_threshold, std::vector<int64_t>& out) {
  using nms_detail::nan_max;
  using nms_detail::nan_min;
  std::vector<size_t> order;
  std::vector<char> alive;
  std::vector<double> area(n);
  for (size_t b = 0; b < nb; ++b) {
    const double* bx = corners + b * n * 4;
    for (size_t i = 0; i < n; ++i)
      area[i] = (bx[4 * i + 2] - bx[4 * i]) * (bx[4 * i + 3] - bx[4 * i + 1]);
    for (size_t cl = 0; cl < nc; ++cl) {
      const double* s = scores + (b * nc + cl) * n;
      order.clear();
      for (size_t i = 0; i < n; ++i)
        if (!has_score_threshold || s[i] > score_threshold) order.push_back(i);
      // NaN scores last (argsort of -s puts them there), the rest by descending score
      const auto nan_begin = std::stable_partition(order.begin(), order.end(),
                                                   [&](size_t i) { return !std::isnan(s[i]); });
      std::stable_sort(order.begin(), nan_begin, [&](size_t a, size_t c) { return s[a] > s[c]; });
      alive.assign(order.size(), 1);
      int64_t selected = 0;
      for (size_t k = 0; k < order.size(); ++k) {
        if (!alive[k]) continue;
        const size_t i = order[k];
        out.push_back(static_cast<int64_t>(b));
        out.push_back(static_cast<int64_t>(cl));
        out.push_back(static_cast<int64_t>(i));
        if (++selected >= max_out) break;
        const double* p = bx + 4 * i;
        const double ai = area[i];
        for (size_t m = k + 1; m < order.size(); ++m) {
          if (!alive[m]) continue;
          const size_t j = order[m];
          const double* q = bx + 4 * j;
          const double ih = nan_max(0.0, nan_min(p[2], q[2]) - nan_max(p[0], q[0]));
          const double iw = nan_max(0.0, nan_min(p[3], q[3]) - nan_max(p[1], q[1]));
          const double inter = ih * iw;
          const double uni = ai + area[j] - inter;
          const double iou = (ai > 0 && area[j] > 0 && uni > 0) ? inter / uni : 0.0;
          if (iou > iou_threshold) alive[m] = 0;
        }
      }
    }
  }
}

}  // namespace onnxplex::mlas
