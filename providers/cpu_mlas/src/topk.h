// Row-wise TopK: the k best values of each row of a [rows, n] array, best first, ties to the
// lower index (onnxruntime's order, and the Python path's). Knows nothing about Python.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "parallel.h"

namespace onnxplex::mlas {

namespace topk_detail {

// One row. `better(a, b)`: a comes before b by value alone (strict).
template <typename T, typename Better>
void row(const T* x, size_t n, size_t k, Better better, T* values, int64_t* indices,
         std::vector<int64_t>& scratch) {
  if (k == 0) return;
  if (k * 8 <= n) {
    // A small k against a long row: keep the best k found so far, in order, in the outputs;
    // most elements are refused by one comparison with the current k-th.
    size_t have = 0;
    for (size_t i = 0; i < n; ++i) {
      const T v = x[i];
      if (have == k && !better(v, values[k - 1])) continue;
      size_t p = have < k ? have++ : k - 1;   // the slot it takes before shifting
      // strictly better only: an equal value found later keeps its place behind
      while (p > 0 && better(v, values[p - 1])) {
        values[p] = values[p - 1];
        indices[p] = indices[p - 1];
        --p;
      }
      values[p] = v;
      indices[p] = static_cast<int64_t>(i);
    }
    return;
  }
  scratch.resize(n);
  std::iota(scratch.begin(), scratch.end(), int64_t{0});
  auto first = [&](int64_t a, int64_t b) {
    const T va = x[a], vb = x[b];
    return better(va, vb) || (!better(vb, va) && a < b);
  };
  std::partial_sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k),
                    scratch.end(), first);
  for (size_t j = 0; j < k; ++j) {
    indices[j] = scratch[j];
    values[j] = x[scratch[j]];
  }
}

}  // namespace topk_detail

// values and indices are [rows, k]; x must hold no NaN (the caller's path takes those).
// Rows are shared among up to `threads` threads when there is enough work.
template <typename T>
void topk_rows(const T* x, size_t rows, size_t n, size_t k, bool largest, T* values,
               int64_t* indices, size_t threads) {
  constexpr size_t kRowsPerTask = 64;
  constexpr size_t kMinParallelElements = size_t{1} << 16;
  const size_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  auto run = [&](size_t t) {
    std::vector<int64_t> scratch;
    const size_t end = std::min(rows, (t + 1) * kRowsPerTask);
    for (size_t r = t * kRowsPerTask; r < end; ++r) {
      if (largest) {
        topk_detail::row(x + r * n, n, k, [](T a, T b) { return a > b; }, values + r * k,
                         indices + r * k, scratch);
      } else {
        topk_detail::row(x + r * n, n, k, [](T a, T b) { return a < b; }, values + r * k,
                         indices + r * k, scratch);
      }
    }
  };
  if (threads == 1 || tasks < 2 || rows * n < kMinParallelElements) {
    for (size_t t = 0; t < tasks; ++t) run(t);
  } else {
    parallel_for(tasks, threads, run);
  }
}

}  // namespace onnxplex::mlas
