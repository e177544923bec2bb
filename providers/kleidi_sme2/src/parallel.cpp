#include "parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ukernel.h"

namespace onnxplex::kleidi {

void parallel_for(size_t count, size_t threads, const std::function<void(size_t, size_t)>& fn) {
  if (count == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, count);
  if (threads == 1) {
    fn(0, count);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](size_t begin, size_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const size_t base = count / threads, extra = count % threads;
  size_t begin = 0;
  for (size_t t = 0; t < threads; ++t) {
    const size_t end = begin + base + (t < extra ? 1 : 0);
    if (t + 1 == threads) {
      guarded(begin, end);  // the caller's share
    } else {
      workers.emplace_back(guarded, begin, end);
    }
    begin = end;
  }
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);
}

void run_tiles(size_t m, size_t n, size_t m_step, size_t n_step, size_t threads,
               const std::function<void(size_t, size_t, size_t, size_t)>& fn) {
  if (m == 0 || n == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t tiles_m = div_up(m, m_step), tiles_n = div_up(n, n_step);
  // Split M first (each part then packs/reads its own LHS rows), then N with what is left.
  const size_t parts_m = std::min(threads, tiles_m);
  const size_t parts_n = std::min(std::max<size_t>(1, threads / parts_m), tiles_n);
  const size_t per_m = div_up(tiles_m, parts_m) * m_step;
  const size_t per_n = div_up(tiles_n, parts_n) * n_step;
  const size_t rects_m = div_up(m, per_m), rects_n = div_up(n, per_n);
  parallel_for(rects_m * rects_n, threads, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const size_t m0 = (t / rects_n) * per_m, n0 = (t % rects_n) * per_n;
      fn(m0, std::min(per_m, m - m0), n0, std::min(per_n, n - n0));
    }
  });
}

}  // namespace onnxplex::kleidi
