// Pairwise squared Euclidean distances between the rows of two matrices, each element as the
// unfused graph computes it: differences, squares, summed in feature order. Knows nothing
// about Python.
#pragma once

#include <cmath>
#include <cstddef>

#include "parallel.h"

namespace onnxplex::mlas {

// out [m, n]: out[i, j] = sum_t (a[i, t] - b[j, t])^2, its square root when `root`.
template <typename T>
void sqdist_rows(const T* a, size_t m, const T* b, size_t n, size_t k, bool root, T* out,
                 size_t threads) {
  constexpr size_t kRowsPerTask = 16;
  constexpr size_t kMinParallelWork = size_t{1} << 16;
  const size_t tasks = (m + kRowsPerTask - 1) / kRowsPerTask;
  auto run = [&](size_t task) {
    const size_t end = m < (task + 1) * kRowsPerTask ? m : (task + 1) * kRowsPerTask;
    for (size_t i = task * kRowsPerTask; i < end; ++i) {
      const T* ai = a + i * k;
      T* oi = out + i * n;
      for (size_t j = 0; j < n; ++j) {
        const T* bj = b + j * k;
        T s = 0;
        for (size_t t = 0; t < k; ++t) {
          const T d = ai[t] - bj[t];
          s += d * d;
        }
        oi[j] = root ? std::sqrt(s) : s;
      }
    }
  };
  if (threads == 1 || tasks < 2 || m * n * k < kMinParallelWork) {
    for (size_t t = 0; t < tasks; ++t) run(t);
  } else {
    parallel_for(tasks, threads, run);
  }
}

}  // namespace onnxplex::mlas
