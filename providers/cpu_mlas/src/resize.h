// Resize of the last two axes as separable taps, as cpu_mlas's Resize (spatial.py) works them
// out: each output row oy reads input rows iy[oy][0..ty) weighted by wy[oy][..], each output
// column ox input columns ix[ox][0..tx) weighted by wx[ox][..] (2 taps for linear, 4 for
// cubic, a window for antialias, 1 with weight 1 for nearest). Knows nothing about Python.
//
// Per plane, each input row that some output row reads is resampled along its columns once
// (hrow = sum_t wx[ox][t] * row[ix[ox][t]], taps in order), then each output row is the
// weighted sum of its input rows' hrows (vectors along the row, taps in order). A single tap of
// weight 1 is a copy, so nearest is exact. Planes, and output rows within them, split over
// the threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"

namespace onnxplex::mlas {

struct ResizeTaps {
  const int64_t* index;  // [out][taps], each in [0, in)
  const float* weight;   // [out][taps]
  size_t out, taps;
};

// Output rows [oy0, oy1) of one plane x [h, w] into y [oh, ow]. hrows: h * ow floats of
// scratch, done: h flags (all false on entry).
inline void resize2d_rows(const float* x, size_t w, float* y, const ResizeTaps& ry,
                          const ResizeTaps& rx, size_t oy0, size_t oy1, float* hrows,
                          std::vector<char>& done) {
  const size_t ow = rx.out;
  auto hrow = [&](size_t iy) -> const float* {
    float* dst = hrows + iy * ow;
    if (done[iy]) return dst;
    done[iy] = 1;
    const float* row = x + iy * w;
    if (rx.taps == 1) {
      for (size_t ox = 0; ox < ow; ++ox) dst[ox] = rx.weight[ox] * row[rx.index[ox]];
    } else if (rx.taps == 2) {
      for (size_t ox = 0; ox < ow; ++ox) {
        const int64_t* i = rx.index + 2 * ox;
        const float* wt = rx.weight + 2 * ox;
        dst[ox] = wt[0] * row[i[0]] + wt[1] * row[i[1]];
      }
    } else {
      for (size_t ox = 0; ox < ow; ++ox) {
        const int64_t* i = rx.index + rx.taps * ox;
        const float* wt = rx.weight + rx.taps * ox;
        float s = wt[0] * row[i[0]];
        for (size_t t = 1; t < rx.taps; ++t) s += wt[t] * row[i[t]];
        dst[ox] = s;
      }
    }
    return dst;
  };
  for (size_t oy = oy0; oy < oy1; ++oy) {
    const int64_t* i = ry.index + ry.taps * oy;
    const float* wt = ry.weight + ry.taps * oy;
    float* dst = y + oy * ow;
    const float* r0 = hrow(static_cast<size_t>(i[0]));
    const float w0 = wt[0];
    if (ry.taps == 1) {
      for (size_t ox = 0; ox < ow; ++ox) dst[ox] = w0 * r0[ox];
      continue;
    }
    const float* r1 = hrow(static_cast<size_t>(i[1]));
    const float w1 = wt[1];
    for (size_t ox = 0; ox < ow; ++ox) dst[ox] = w0 * r0[ox] + w1 * r1[ox];
    for (size_t t = 2; t < ry.taps; ++t) {
      const float* rt = hrow(static_cast<size_t>(i[t]));
      const float wtt = wt[t];
      for (size_t ox = 0; ox < ow; ++ox) dst[ox] += wtt * rt[ox];
    }
  }
}

// planes x [planes, h, w] -> y [planes, ry.out, rx.out].
inline void resize2d_f32(const float* x, size_t planes, size_t h, size_t w, float* y,
                         const ResizeTaps& ry, const ResizeTaps& rx, size_t threads) {
  const size_t oh = ry.out, ow = rx.out;
  if (planes == 0 || oh == 0 || ow == 0) return;
  // Few planes: each also split into bands of output rows (a band resamples the input rows
  // it reads itself; neighbouring bands share a few).
  const size_t want = threads > 1 ? 4 * threads : 1;
  const size_t bands = std::min(oh, std::max<size_t>(1, (want + planes - 1) / planes));
  // less than ~64 KB of output a task: one thread (the hand-over costs more)
  const size_t use = planes * oh * ow < (size_t{16} << 10) ? 1 : threads;
  parallel_for(planes * bands, use, [&](size_t task) {
    static thread_local std::vector<float> scratch;
    static thread_local std::vector<char> done;
    const size_t p = task / bands, b = task % bands;
    if (scratch.size() < h * ow) scratch.resize(h * ow);
    done.assign(h, 0);
    resize2d_rows(x + p * h * w, w, y + p * oh * ow, ry, rx, oh * b / bands,
                  oh * (b + 1) / bands, scratch.data(), done);
  });
}

}  // namespace onnxplex::mlas
