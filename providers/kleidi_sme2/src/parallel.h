// Splitting work over std::thread for the drivers. Exceptions thrown by a worker are rethrown
// in the caller (the first one wins).
#pragma once

#include <cstddef>
#include <functional>

namespace onnxplex::kleidi {

// Calls fn(begin, end) over contiguous sub-ranges of [0, count) on up to `threads` threads
// (0 = std::thread::hardware_concurrency()); the calling thread does one share.
void parallel_for(size_t count, size_t threads, const std::function<void(size_t, size_t)>& fn);

// Cuts the m x n output into rectangles whose corners are multiples of (m_step, n_step),
// about one per thread, and calls fn(m0, m_len, n0, n_len) for each.
void run_tiles(size_t m, size_t n, size_t m_step, size_t n_step, size_t threads,
               const std::function<void(size_t, size_t, size_t, size_t)>& fn);

}  // namespace onnxplex::kleidi
