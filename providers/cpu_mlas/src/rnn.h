// Float32 recurrent sequence loops for RNN (tanh), GRU and LSTM with their default
// activations: the time loop of cpu_mlas's rnn.py, one call a direction. Knows nothing about
// Python.
//
// The caller has already computed every step's input projection X W^T with the biases that
// fold into it (rnn.py's split functions) and transposed R; a reverse direction runs its steps
// from the last (or, with sequence lengths, has them gathered into processing order by the
// caller). The projections and outputs may be views with row strides (both directions' in
// one array: xw[:, :, d], y[:, d]). A loop step is then, per batch entry, H @ R^T added to
// the projection, the gate activations and the state update, in ONNX's gate order (GRU z, r,
// h; LSTM i, o, f, c). A batch entry past its sequence length keeps its state and writes
// zeros (as rnn.py's mask).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace onnxplex::mlas {

enum class RnnCell : int { kRnn = 0, kGru = 1, kLstm = 2 };

// What a direction's loop prepares from R^T (a variant's panels, packed for the batch size),
// kept across the calls of one node's direction whose R is a constant: the caller's promise
// that every call it is given to reads the same, unchanged R^T. Packing R^T was a copy of the
// whole matrix a call (256 KB a direction for an LSTM of 128, a tenth of a short sequence's
// time). Entries by (variant, batch size, which product); a cache seeing many batch sizes is
// emptied now and then rather than grown. Safe to share between threads.
class RnnPackCache {
 public:
  // The entry for (variant, rows, which), made by make() (returning an M) if missing.
  template <class M, class Make>
  std::shared_ptr<const M> get(const void* variant, size_t rows, int which, Make make) {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_tuple(variant, rows, which);
    const auto it = entries_.find(key);
    if (it != entries_.end()) return std::static_pointer_cast<const M>(it->second);
    if (entries_.size() >= kMaxEntries) entries_.clear();
    auto made = std::make_shared<const M>(make());
    entries_.emplace(key, made);
    return made;
  }
  size_t size() {
    const std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  static constexpr size_t kMaxEntries = 16;
  std::mutex mu_;
  std::map<std::tuple<const void*, size_t, int>, std::shared_ptr<const void>> entries_;
};

struct RnnSeq {
  RnnCell cell;
  const float* xw;           // [T, B, G*H], rows xw_ld_t and xw_ld_b floats apart
  const float* rt;           // [H, G*H]: R transposed
  const float* rbh;          // GRU: the h gate's recurrent bias [H], or null
  const float* peep;         // LSTM: peepholes [3H] (i, o, f), or null
  const int64_t* lens;       // [B] sequence lengths, or null (every sequence is T long)
  float* h;                  // [B, H]: the initial state in, the final state out
  float* c;                  // LSTM: [B, H] cell state in and out
  float* y;                  // [T, B, H]: every step's H, rows y_ld_t and y_ld_b floats apart
  size_t T, B, H;
  size_t xw_ld_t, xw_ld_b, y_ld_t, y_ld_b;
  float clip;                // > 0: gate pre-activations clipped to [-clip, clip]
  bool linear_before_reset;  // GRU
  bool reverse;              // steps from T - 1 down to 0 (xw and y in time order; no lens)
  RnnPackCache* cache = nullptr;  // R^T's prepared products kept across calls, or null
};

void rnn_seq_f32(const RnnSeq& s);
void rnn_seq_f32_portable(const RnnSeq& s);
void rnn_seq_f32_avx2(const RnnSeq& s);
void rnn_seq_f32_avx512(const RnnSeq& s);

}  // namespace onnxplex::mlas
