// A small persistent thread pool for the cpu_mlas native kernels. Knows nothing about Python.
#pragma once

#include <cstddef>
#include <functional>

namespace onnxplex::mlas {

// Runs fn(i) for every i in [0, count), on up to `threads` threads (the caller is one of them;
// 0 = the hardware's thread count). Tasks are handed out dynamically. Blocks until all tasks
// have finished; rethrows the first exception a task threw. Concurrent callers do not queue:
// when the pool is busy, a caller runs its tasks on its own thread.
void parallel_for(size_t count, size_t threads, const std::function<void(size_t)>& fn);

}  // namespace onnxplex::mlas
