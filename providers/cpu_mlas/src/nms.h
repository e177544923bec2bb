// NonMaxSuppression's greedy selection, as cpu_mlas's numpy kernel (vision.py) computes it, in
// double. Knows nothing about Python.
//
// Per (batch, class): the boxes scoring above the threshold (all, without one), in descending
// score order with ties to the lower box index and NaN scores last; each box not suppressed
// is selected (up to max_out), and suppresses every later box whose IoU with it exceeds
// iou_threshold. IoU is 0 when either area or the union is not positive (a NaN coordinate
// makes the area NaN, so its IoUs are 0 too).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace onnxplex::mlas {

// The boxes selected so far that can suppress another: positive area, no NaN coordinate (a
// NaN coordinate makes the box's area NaN, and its IoUs 0), as a structure of arrays so that a
// candidate is compared with a block of them in one branch-free pass.
struct NmsSelected {
  std::vector<double> y1, x1, y2, x2, area;
  size_t size() const { return area.size(); }
  void clear() { y1.clear(); x1.clear(); y2.clear(); x2.clear(); area.clear(); }
  void add(const double* p, double a) {
    y1.push_back(p[0]); x1.push_back(p[1]); y2.push_back(p[2]); x2.push_back(p[3]);
    area.push_back(a);
  }
  // Whether selected box j overlaps a box (corners p, area a > 0, no NaN) by more than thr.
  bool overlaps(size_t j, const double* p, double a, double thr) const {
    // (no NaN on either side: plain min/max)
    const double ih = std::max(0.0, std::min(p[2], y2[j]) - std::max(p[0], y1[j]));
    const double iw = std::max(0.0, std::min(p[3], x2[j]) - std::max(p[1], x1[j]));
    const double inter = ih * iw;
    const double uni = a + area[j] - inter;
    return (uni > 0) & (inter / uni > thr);
  }
  // Whether any selected box overlaps the box by more than thr.
  bool suppresses(const double* p, double a, double thr) const {
    constexpr size_t kBlock = 16;
    const size_t n = size();
    for (size_t b0 = 0; b0 < n; b0 += kBlock) {
      const size_t b1 = std::min(n, b0 + kBlock);
      int hit = 0;
      for (size_t j = b0; j < b1; ++j) hit |= overlaps(j, p, a, thr);
      if (hit) return true;
    }
    return false;
  }
};

// The selected boxes binned in a grid of square cells, so that a candidate is compared only
// with those sharing a cell with it. For a threshold of 0 or more only a positive intersection
// can suppress, and a positive intersection holds a point inside both boxes, in a cell both
// are binned in: no box that could suppress is skipped. A box over more than kMaxCells cells
// (or too far out for cell numbers) is compared with every candidate.
class NmsGrid {
 public:
  void reset(double cell) {
    inv_ = 1.0 / cell;
    cells_.clear();
    wide_.clear();
    seen_.clear();
    epoch_ = 0;
  }
  void add(uint32_t index, const double* p) {
    int64_t y0, y1, x0, x1;
    seen_.push_back(0);
    if (!span(p, y0, y1, x0, x1)) {
      wide_.push_back(index);
      return;
    }
    for (int64_t y = y0; y <= y1; ++y)
      for (int64_t x = x0; x <= x1; ++x) cells_[key(y, x)].push_back(index);
  }
  bool suppresses(const NmsSelected& kept, const double* p, double a, double thr) {
    for (const uint32_t j : wide_)
      if (kept.overlaps(j, p, a, thr)) return true;
    int64_t y0, y1, x0, x1;
    if (!span(p, y0, y1, x0, x1)) return kept.suppresses(p, a, thr);
    if (++epoch_ == 0) {  // (the stamps wrapped around: forget them)
      std::fill(seen_.begin(), seen_.end(), 0);
      epoch_ = 1;
    }
    for (int64_t y = y0; y <= y1; ++y) {
      for (int64_t x = x0; x <= x1; ++x) {
        const auto found = cells_.find(key(y, x));
        if (found == cells_.end()) continue;
        for (const uint32_t j : found->second) {
          if (seen_[j] == epoch_) continue;
          seen_[j] = epoch_;
          if (kept.overlaps(j, p, a, thr)) return true;
        }
      }
    }
    return false;
  }

 private:
  static constexpr int64_t kMaxCells = 16;
  static constexpr double kMaxCell = 1e9;  // cell numbers beyond: compared with every box
  static uint64_t key(int64_t y, int64_t x) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(y)) << 32) |
           static_cast<uint32_t>(x);
  }
  bool span(const double* p, int64_t& y0, int64_t& y1, int64_t& x0, int64_t& x1) const {
    const double c[4] = {std::floor(p[0] * inv_), std::floor(p[2] * inv_),
                         std::floor(p[1] * inv_), std::floor(p[3] * inv_)};
    for (const double v : c)
      if (!(std::fabs(v) < kMaxCell)) return false;
    y0 = static_cast<int64_t>(c[0]); y1 = static_cast<int64_t>(c[1]);
    x0 = static_cast<int64_t>(c[2]); x1 = static_cast<int64_t>(c[3]);
    return (y1 - y0 + 1) * (x1 - x0 + 1) <= kMaxCells;
  }
  double inv_ = 1.0;
  std::unordered_map<uint64_t, std::vector<uint32_t>> cells_;
  std::vector<uint32_t> wide_;
  std::vector<uint32_t> seen_;
  uint32_t epoch_ = 0;
};

// The grid's cell side for these candidates: their median extent (height or width, whichever
// is larger), 0 when there is none to go by.
inline double nms_cell_size(const double* bx, const std::vector<size_t>& order,
                            const std::vector<char>& inert, std::vector<double>& scratch) {
  scratch.clear();
  for (const size_t i : order) {
    if (inert[i]) continue;
    const double* p = bx + 4 * i;
    scratch.push_back(std::max(p[2] - p[0], p[3] - p[1]));
  }
  if (scratch.empty()) return 0.0;
  auto mid = scratch.begin() + scratch.size() / 2;
  std::nth_element(scratch.begin(), mid, scratch.end());
  return std::isfinite(*mid) ? *mid : 0.0;
}

// Candidates from which the grid pays for itself (fewer: each compared with every selected box)
constexpr size_t kNmsGridMin = 256;

// corners: [nb, n, 4] as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2 (the caller orders them);
// scores: [nb, nc, n]. Appends (batch, class, box) triples to out.
//
// Greedy selection in score order: a box is selected unless a box selected before it
// overlaps it by more than iou_threshold, each candidate compared with the selected boxes
// only (the same selection as suppressing forward from each selected box, without scanning
// the remaining boxes once per selection: a detector's class-offset batch of 13,000 boxes,
// thousands of them kept, went from ~300 to a few ms).
inline void nms(const double* corners, const double* scores, size_t nb, size_t nc, size_t n,
                int64_t max_out, double iou_threshold, bool has_score_threshold,
                double score_threshold, std::vector<int64_t>& out) {
  std::vector<size_t> order;
  std::vector<double> area(n), scratch;
  std::vector<char> inert(n);   // boxes no IoU can involve: NaN coordinates or no area
  NmsSelected kept;
  NmsGrid grid;
  for (size_t b = 0; b < nb; ++b) {
    const double* bx = corners + b * n * 4;
    for (size_t i = 0; i < n; ++i) {
      area[i] = (bx[4 * i + 2] - bx[4 * i]) * (bx[4 * i + 3] - bx[4 * i + 1]);
      inert[i] = std::isnan(area[i]) || !(area[i] > 0);
    }
    for (size_t cl = 0; cl < nc; ++cl) {
      const double* s = scores + (b * nc + cl) * n;
      order.clear();
      for (size_t i = 0; i < n; ++i)
        if (!has_score_threshold || s[i] > score_threshold) order.push_back(i);
      // NaN scores last (argsort of -s puts them there), the rest by descending score, ties
      // in index order (what a stable sort of the ascending indices gives; written without
      // std::stable_* and their temporary buffers, deprecated in C++17 inside libstdc++ 12)
      const auto nan_begin = std::partition(order.begin(), order.end(),
                                            [&](size_t i) { return !std::isnan(s[i]); });
      std::sort(nan_begin, order.end());
      std::sort(order.begin(), nan_begin,
                [&](size_t a, size_t c) { return s[a] > s[c] || (s[a] == s[c] && a < c); });
      kept.clear();
      double cell = 0.0;
      if (order.size() >= kNmsGridMin && iou_threshold >= 0) {
        cell = nms_cell_size(bx, order, inert, scratch);
        if (cell > 0) grid.reset(cell);
      }
      int64_t selected = 0;
      for (const size_t i : order) {
        // (below 0, every IoU, 0 included, exceeds the threshold: the first box suppresses
        // all the others)
        if (selected >= max_out || (selected > 0 && iou_threshold < 0)) break;
        const double* p = bx + 4 * i;
        if (!inert[i]) {
          if (cell > 0 ? grid.suppresses(kept, p, area[i], iou_threshold)
                       : kept.suppresses(p, area[i], iou_threshold)) {
            continue;
          }
          if (cell > 0) grid.add(static_cast<uint32_t>(kept.size()), p);
          kept.add(p, area[i]);
        }
        out.push_back(static_cast<int64_t>(b));
        out.push_back(static_cast<int64_t>(cl));
        out.push_back(static_cast<int64_t>(i));
        ++selected;
      }
    }
  }
}

}  // namespace onnxplex::mlas
