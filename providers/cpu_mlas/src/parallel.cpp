#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace onnxplex::mlas {

namespace {

// Workers sleep on a condition variable between jobs, after a short spin: a BERT-sized model
// runs ~100 GEMMs per inference, and waking sleeping threads each time costs more than the
// spin. The pool lives until the process exits (workers are detached-joined at exit).
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  bool try_run(size_t count, size_t threads, const std::function<void(size_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    ensure_workers(threads - 1);
    fn_ = &fn;
    count_ = count;
    next_.store(0);
    error_ = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      active_ = threads - 1;
      open_.store(true);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    work();
    // Close the job, then wait only for helpers inside it (finishing a chunk). A helper that
    // is still asleep or descheduled is not waited for: it finds the job closed when it runs
    // (on a shared machine, waiting for it would stall every call).
    open_.store(false);
    while (inside_.load() != 0) std::this_thread::yield();
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void ensure_workers(size_t n) {
    while (workers_.size() < n) {
      const size_t index = workers_.size();
      // The generation before this job's: the worker must not mistake the job for a past one.
      const size_t seen = generation_.load();
      workers_.emplace_back([this, index, seen] { loop(index, seen); });
    }
  }

  void work() {
    for (;;) {
      const size_t i = next_.fetch_add(1);
      if (i >= count_) return;
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        next_.store(count_);
      }
    }
  }

  void loop(size_t index, size_t seen) {
    for (;;) {
      // Spin for a short while, then sleep.
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (generation_.load() == seen && std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        seen = generation_.load();
        if (stop_) return;
        if (index >= active_) continue;  // not needed for this job
      }
      // Enter the job only while it is open and still the one this wake-up was for (the
      // caller waits for `inside_` to drain after closing it, so fn_ stays valid in here).
      inside_.fetch_add(1);
      if (open_.load() && generation_.load() == seen) work();
      inside_.fetch_sub(1);
    }
  }

  std::mutex busy_;   // one job at a time
  std::mutex mutex_;  // guards the job hand-over
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
  std::atomic<size_t> generation_{0};
  std::atomic<size_t> next_{0};
  std::atomic<bool> open_{false};    // the current job still takes helpers
  std::atomic<size_t> inside_{0};    // helpers inside the current job
  size_t active_ = 0;
  size_t count_ = 0;
  bool stop_ = false;
  const std::function<void(size_t)>* fn_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace

void parallel_for(size_t count, size_t threads, const std::function<void(size_t)>& fn) {
  if (count == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, count);
  if (threads > 1 && Pool::instance().try_run(count, threads, fn)) return;
  for (size_t i = 0; i < count; ++i) fn(i);
}

}  // namespace onnxplex::mlas
