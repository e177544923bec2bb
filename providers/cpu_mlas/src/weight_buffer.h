// Buffers for packed constant weights: they live as long as a session and are written once,
// whole, at kernel-build time, so they start uninitialized (a std::vector's zero fill was a
// second pass over BERT-base int8's 85 MB of packed weights: ~25 ms of its session creation).
// 64-byte aligned. (Advising them for transparent huge pages made that creation twice as slow
// on a machine whose huge pages come from synchronous compaction: not done.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace onnxplex::mlas {

template <typename T>
class WeightBuffer {
 public:
  WeightBuffer() = default;
  explicit WeightBuffer(size_t count) : size_(count) {
    const size_t bytes = (std::max<size_t>(count * sizeof(T), 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(static_cast<T*>(p));
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace onnxplex::mlas
