// The tree-ensemble evaluator: layout, the lockstep walk, onnxruntime's aggregation and post
// transforms, the split over threads.
#include "tree_ensemble.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "parallel.h"

namespace onnxplex::mlas {

namespace {

// A laid-out interior node. A child index >= 0 is an interior node, < 0 the leaf ~index.
template <typename T>
struct Node {
  T value;          // threshold
  int32_t feature;  // the column compared
  int32_t next[2];  // the true child, the false child
};

// Per laid-out node, for the walk that reads them (mixed comparisons, or NaN directions).
constexpr uint8_t kCmpMask = 3;
constexpr uint8_t kNanTrue = 4;
constexpr int kModeMixed = 3;

// Walkers stepping in turn: independent chains of loads to overlap (measured on Zen 3: 16
// spill their state out of registers, 4 overlap less; 8 is best on RandomForest and LightGBM).
constexpr int kWalkers = 8;
// Rows whose scores one pass over the trees accumulates (each tree's nodes are read once per
// block; the block's scores stay in L1).
constexpr size_t kBlockRows = 128;
// Below this many node steps (rows times the trees' summed depth) one thread does it all: the
// hand-over to the pool costs about what a few microseconds of walking do (measured on two
// threads: 8 rows of a 100-tree depth-10 forest, 8000 steps, 28 -> 20 us).
constexpr size_t kMinParallelSteps = 5000;

constexpr double kPi = 3.14159265358979323846;
constexpr double kSqrt2 = 1.41421356237309504880;

// onnxruntime's ml_common.h, in float as there.
inline float ort_logistic(float v) {
  const float e = 1 / (1 + std::exp(-std::abs(v)));
  return v < 0 ? 1 - e : e;
}

inline float ort_erfinv(float x) {
  const float sgn = x < 0 ? -1.0f : 1.0f;
  x = (1 - x) * (1 + x);
  const float lg = std::log(x);
  const float v = 2 / (static_cast<float>(kPi) * 0.147f) + 0.5f * lg;
  const float v2 = 1 / (0.147f) * lg;
  const float v3 = -v + std::sqrt(v * v - v2);
  return sgn * std::sqrt(v3);
}

inline float ort_probit(float v) { return static_cast<float>(kSqrt2) * ort_erfinv(2 * v - 1); }

// A score as onnxruntime reads it: 0 for a class or target no tree wrote (has_score unset).
template <typename T>
inline T scored(T s, uint8_t h) {
  return h ? s : T(0);
}

template <int kMode, bool kNan, typename T>
inline int32_t step(const Node<T>* nodes, const uint8_t* flags, const T* x, int32_t i) {
  const Node<T>& n = nodes[i];
  const T v = x[n.feature];
  bool c;
  if constexpr (kMode == static_cast<int>(TreeCmp::kLeq)) {
    c = v <= n.value;
  } else if constexpr (kMode == static_cast<int>(TreeCmp::kLt)) {
    c = v < n.value;
  } else if constexpr (kMode == static_cast<int>(TreeCmp::kEq)) {
    c = v == n.value;
  } else {
    const uint8_t f = flags[i] & kCmpMask;
    c = ((f == 0) & (v <= n.value)) | ((f == 1) & (v < n.value)) | ((f == 2) & (v == n.value));
  }
  if constexpr (kNan) c = c | (((flags[i] & kNanTrue) != 0) & std::isnan(v));
  // An indexed load, not `c ? t : e`: compilers turn that into a branch, mispredicted half
  // the time.
  return n.next[!c];
}

// f(std::integral_constant<int, k>) for k = 0 .. N-1, unrolled: a walker's state indexed by a
// constant stays in registers.
template <int N, typename F>
inline void unroll(F&& f) {
  if constexpr (N > 0) {
    unroll<N - 1>(f);
    f(std::integral_constant<int, N - 1>{});
  }
}

// Walks jobs [0, n_jobs): job(j, start, x) gives job j's start (a node, or ~leaf) and row;
// out[j] receives the leaf it ends on. kWalkers walkers step in turn without branching on the
// comparison; one that reaches a leaf takes the next job at once (walks of different depths
// do not wait for each other). A walker out of jobs parks on `sink`, a node that is its own
// child both ways, reading column 0 of `sink_x`.
template <int kMode, bool kNan, int K = kWalkers, typename T, typename Job>
inline void walk(const Node<T>* nodes, const uint8_t* flags, int32_t sink, const T* sink_x,
                 size_t n_jobs, const Job& job, int32_t* out) {
  int32_t w[K];
  const T* xr[K];
  size_t slot[K];
  size_t next = 0;
  int live = 0;
  auto fill = [&](int k) {
    while (next < n_jobs) {
      const size_t j = next++;
      int32_t start;
      const T* xp;
      job(j, start, xp);
      if (start < 0) {
        out[j] = ~start;
        continue;
      }
      w[k] = start;
      xr[k] = xp;
      slot[k] = j;
      return true;
    }
    w[k] = sink;
    xr[k] = sink_x;
    return false;
  };
  for (int k = 0; k < K; ++k) live += fill(k);
  while (live > 0) {
    unroll<K>([&](auto kc) {
      constexpr int k = decltype(kc)::value;
      const int32_t nx = step<kMode, kNan>(nodes, flags, xr[k], w[k]);
      if (nx >= 0) {
        w[k] = nx;
      } else {
        out[slot[k]] = ~nx;
        if (!fill(k)) --live;
      }
    });
  }
}

template <int kMode, bool kNan, int K, typename T>
inline void walk_fixed(const Node<T>* nodes, const uint8_t* flags, const T* const* xs,
                       int32_t* idx, int count, int depth) {
  if (count == K) {
    int32_t w[K];
    for (int k = 0; k < K; ++k) w[k] = idx[k];
    for (int s = 0; s < depth; ++s) {
      for (int k = 0; k < K; ++k) w[k] = step<kMode, kNan>(nodes, flags, xs[k], w[k]);
    }
    for (int k = 0; k < K; ++k) idx[k] = w[k];
    return;
  }
  for (int s = 0; s < depth; ++s) {
    for (int k = 0; k < count; ++k) idx[k] = step<kMode, kNan>(nodes, flags, xs[k], idx[k]);
  }
}

template <typename T, typename O>
class Ensemble final : public TreeEnsemble {
 public:
  explicit Ensemble(const TreeEnsembleDesc& d);
  void run(const void* x, size_t rows, size_t cols, void* scores, int64_t* labels,
           size_t threads) const override;

 private:
  bool has_nan(const T* x, size_t cols, size_t r0, size_t r1) const;
  // Rows [r0, r1): scored block by block, finalized into z / labels.
  void rows_range(const T* x, size_t cols, size_t r0, size_t r1, O* z, int64_t* labels) const;
  // Scores of rows [r0, r1) into s / h (n_targets_ a row), trees in order.
  template <int kMode, bool kNan>
  void block(const T* x, size_t cols, size_t r0, size_t r1, T* s, uint8_t* h) const;
  // One row's leaves in trees [t0, t1), into leaves[t - t0].
  template <int kMode, bool kNan>
  void row_leaves(const T* xr, size_t t0, size_t t1, int32_t* leaves) const;
  // The leaves of rows [r0, r1) (at most kBlockRows) in tree t, into leaves[r - r0].
  template <int kMode, bool kNan>
  void tree_leaves(size_t t, const T* x, size_t cols, size_t r0, size_t r1,
                   int32_t* leaves) const;
  template <int kMode, bool kNan>
  void leaves_block(const T* x, size_t cols, size_t r0, size_t r1, size_t t0, size_t t1,
                    int32_t* leaves) const;
  void leaves_range(const T* x, size_t cols, size_t rows, size_t t0, size_t t1,
                    int32_t* leaves) const;
  void add_leaf(int32_t leaf, T* s, uint8_t* h) const;
  void finalize(T* s, uint8_t* h, O* z, int64_t* label) const;
  void write_scores(T* s, uint8_t* h, size_t n, O* z) const;
  void write_binary1(T s0, uint8_t h0, int add, O* z) const;

  std::vector<Node<T>> nodes_;  // interior nodes, each tree's in preorder; then the sink
  std::vector<uint8_t> flags_;  // per node: comparison | kNanTrue
  int32_t sink_ = 0;
  std::vector<int32_t> roots_;  // per tree: its root (a node, or ~leaf)
  std::vector<int32_t> uniform_;  // per tree: the depth of all its leaves, or -1
  int32_t all_uniform_ = -1;      // the depth of every leaf of every tree, or -1
  std::vector<T> leaf_value_;   // per leaf: its single-target value
  std::vector<int32_t> leaf_start_, wtarget_;  // per leaf: its weights (several targets)
  std::vector<T> wvalue_;
  std::vector<T> base_;
  std::vector<int64_t> labels_;
  int mode_ = 0;            // the comparison of every interior node, or kModeMixed
  bool nan_flags_ = false;  // some node sends NaN to its true child
  bool single_ = false;     // one target of a regressor: the leaf's value is all it adds
  size_t sum_depth_ = 0;    // the trees' depths summed (a row's work, in steps)
  TreeAggregate agg_ = TreeAggregate::kSum;
  TreePost post_ = TreePost::kNone;
  bool binary_case_ = false, all_positive_ = true;
};

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

template <typename T, typename O>
Ensemble<T, O>::Ensemble(const TreeEnsembleDesc& d) {
  const size_t n = d.n_nodes;
  if (n >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) bad("too many tree nodes");
  if (d.n_targets == 0) bad("n_targets must be positive");
  if (d.classifier && d.class_labels == nullptr) bad("a classifier needs its class labels");
  if (static_cast<unsigned>(d.aggregate) > 3) bad("unknown aggregate_function");
  if (static_cast<unsigned>(d.post) > 4) bad("unknown post_transform");
  if (d.n_features > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    bad("feature ids out of range");
  }
  n_targets_ = d.n_targets;
  n_features_ = d.n_features;
  n_trees_ = d.n_roots;
  in_double_ = sizeof(T) == sizeof(double);
  out_double_ = sizeof(O) == sizeof(double);
  classifier_ = d.classifier;
  agg_ = d.aggregate;
  post_ = d.post;
  binary_case_ = d.binary_case;
  all_positive_ = d.weights_all_positive;
  single_ = !d.classifier && d.n_targets == 1;
  base_.assign(d.base, d.base + d.n_base);
  if (d.classifier) labels_.assign(d.class_labels, d.class_labels + d.n_targets);

  // The description, checked.
  const int64_t n64 = static_cast<int64_t>(n);
  const auto leaf = [&](int64_t i) { return d.cmp[i] == static_cast<uint8_t>(TreeCmp::kLeaf); };
  if (d.weight_start[0] != 0) bad("weights must start at 0");
  for (size_t i = 0; i < n; ++i) {
    if (d.cmp[i] > static_cast<uint8_t>(TreeCmp::kLeaf)) bad("unknown node comparison");
    if (d.weight_start[i + 1] < d.weight_start[i]) bad("weight offsets must not decrease");
    if (leaf(static_cast<int64_t>(i))) continue;
    if (d.feature[i] < 0 || d.feature[i] >= static_cast<int64_t>(d.n_features)) {
      bad("nodes_featureids: feature " + std::to_string(d.feature[i]) + " out of range");
    }
    for (const int64_t c : {d.true_child[i], d.false_child[i]}) {
      if (c < 0 || c >= n64 || c == static_cast<int64_t>(i)) {
        bad("node " + std::to_string(i) + ": child " + std::to_string(c) + " out of range");
      }
    }
  }
  for (size_t w = 0; w < static_cast<size_t>(d.weight_start[n]); ++w) {
    if (d.weight_target[w] < 0 || d.weight_target[w] >= static_cast<int64_t>(d.n_targets)) {
      bad("a weight's target or class id is out of range");
    }
  }
  for (size_t r = 0; r < d.n_roots; ++r) {
    if (d.roots[r] < 0 || d.roots[r] >= n64) bad("a tree root is out of range");
  }

  // Layout: interior nodes in preorder from each root (true child first), leaves numbered as
  // met; a node met again (from another branch or root) keeps its place. A node met again
  // while its subtree is being walked closes a cycle.
  std::vector<int32_t> new_id(n, -1), depth_of(n, 0), min_depth_of(n, 0), order;
  std::vector<uint8_t> state(n, 0);  // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int32_t, bool>> stack;
  int32_t n_interior = 0, n_leaves = 0;
  for (size_t r = 0; r < d.n_roots; ++r) {
    stack.emplace_back(static_cast<int32_t>(d.roots[r]), false);
    while (!stack.empty()) {
      const auto [u, leaving] = stack.back();
      stack.pop_back();
      if (leaving) {
        state[u] = 2;
        depth_of[u] = 1 + std::max(depth_of[d.true_child[u]], depth_of[d.false_child[u]]);
        min_depth_of[u] =
            1 + std::min(min_depth_of[d.true_child[u]], min_depth_of[d.false_child[u]]);
        continue;
      }
      if (state[u] == 2) continue;
      if (state[u] == 1) bad("nodes_truenodeids / nodes_falsenodeids form a cycle");
      order.push_back(u);
      if (leaf(u)) {
        state[u] = 2;
        new_id[u] = ~n_leaves++;
        continue;
      }
      state[u] = 1;
      new_id[u] = n_interior++;
      stack.emplace_back(u, true);
      stack.emplace_back(static_cast<int32_t>(d.false_child[u]), false);
      stack.emplace_back(static_cast<int32_t>(d.true_child[u]), false);
    }
  }

  nodes_.resize(static_cast<size_t>(n_interior) + 1);
  flags_.assign(nodes_.size(), 0);
  leaf_value_.resize(static_cast<size_t>(n_leaves));
  leaf_start_.assign(static_cast<size_t>(n_leaves) + 1, 0);
  int mode = -1;
  for (const int32_t u : order) {
    const int32_t j = new_id[u];
    if (j < 0) {  // a leaf: its weights, in the order given
      const auto l = static_cast<size_t>(~j);
      leaf_value_[l] = static_cast<T>(d.value[u]);
      for (int64_t w = d.weight_start[u]; w < d.weight_start[u + 1]; ++w) {
        wtarget_.push_back(static_cast<int32_t>(d.weight_target[w]));
        wvalue_.push_back(static_cast<T>(d.weight_value[w]));
      }
      leaf_start_[l + 1] = static_cast<int32_t>(wtarget_.size());
      continue;
    }
    Node<T>& nd = nodes_[static_cast<size_t>(j)];
    nd.value = static_cast<T>(d.value[u]);
    nd.feature = static_cast<int32_t>(d.feature[u]);
    nd.next[0] = new_id[d.true_child[u]];
    nd.next[1] = new_id[d.false_child[u]];
    flags_[static_cast<size_t>(j)] = static_cast<uint8_t>(d.cmp[u] | (d.nan_true[u] ? kNanTrue : 0));
    nan_flags_ = nan_flags_ || d.nan_true[u];
    mode = mode == -1 || mode == d.cmp[u] ? d.cmp[u] : kModeMixed;
  }
  mode_ = mode == -1 ? 0 : mode;
  // The sink: an idle walker's node, its own child both ways.
  sink_ = n_interior;
  nodes_[static_cast<size_t>(sink_)] = Node<T>{T(0), 0, {sink_, sink_}};

  roots_.resize(d.n_roots);
  uniform_.resize(d.n_roots);
  for (size_t r = 0; r < d.n_roots; ++r) {
    const int64_t u = d.roots[r];
    roots_[r] = new_id[u];
    sum_depth_ += static_cast<size_t>(depth_of[u]);
    uniform_[r] = depth_of[u] == min_depth_of[u] ? depth_of[u] : -1;
    all_uniform_ = r == 0 || uniform_[r] == all_uniform_ ? uniform_[r] : -1;
  }
  steps_per_row_ = std::max(sum_depth_, n_trees_);
}

template <typename T, typename O>
bool Ensemble<T, O>::has_nan(const T* x, size_t cols, size_t r0, size_t r1) const {
  bool any = false;
  for (const T* p = x + r0 * cols; p < x + r1 * cols; ++p) any |= *p != *p;
  return any;
}

template <typename T, typename O>
void Ensemble<T, O>::add_leaf(int32_t leaf, T* s, uint8_t* h) const {
  if (single_) {
    const T v = leaf_value_[static_cast<size_t>(leaf)];
    switch (agg_) {
      case TreeAggregate::kMin:
        if (!h[0] || v < s[0]) s[0] = v;
        h[0] = 1;
        break;
      case TreeAggregate::kMax:
        if (!h[0] || v > s[0]) s[0] = v;
        h[0] = 1;
        break;
      default:
        s[0] += v;
    }
    return;
  }
  for (int32_t w = leaf_start_[leaf]; w < leaf_start_[leaf + 1]; ++w) {
    const int32_t t = wtarget_[w];
    const T v = wvalue_[w];
    switch (agg_) {
      case TreeAggregate::kMin:
        if (!h[t] || v < s[t]) s[t] = v;
        break;
      case TreeAggregate::kMax:
        if (!h[t] || v > s[t]) s[t] = v;
        break;
      default:
        s[t] += v;
    }
    h[t] = 1;
  }
}

template <typename T, typename O>
template <int kMode, bool kNan>
void Ensemble<T, O>::row_leaves(const T* xr, size_t t0, size_t t1, int32_t* leaves) const {
  static const T zero[1] = {T(0)};
  if (all_uniform_ >= 0) {
    const T* xs[kWalkers];
    std::fill(xs, xs + kWalkers, xr);
    for (size_t g = t0; g < t1; g += kWalkers) {
      const int count = static_cast<int>(std::min<size_t>(kWalkers, t1 - g));
      int32_t* idx = leaves + (g - t0);
      for (int k = 0; k < count; ++k) idx[k] = roots_[g + static_cast<size_t>(k)];
      walk_fixed<kMode, kNan, kWalkers>(nodes_.data(), flags_.data(), xs, idx, count,
                                        all_uniform_);
      for (int k = 0; k < count; ++k) idx[k] = ~idx[k];
    }
    return;
  }
  walk<kMode, kNan>(nodes_.data(), flags_.data(), sink_, zero, t1 - t0,
                    [&](size_t j, int32_t& start, const T*& xp) {
                      start = roots_[t0 + j];
                      xp = xr;
                    }, leaves);
}

template <typename T, typename O>
template <int kMode, bool kNan>
void Ensemble<T, O>::tree_leaves(size_t t, const T* x, size_t cols, size_t r0, size_t r1,
                                 int32_t* leaves) const {
  static const T zero[1] = {T(0)};
  const size_t nr = r1 - r0;
  const T* xb = x + r0 * cols;
  const int32_t root = roots_[t];
  if (uniform_[t] < 0) {
    walk<kMode, kNan>(nodes_.data(), flags_.data(), sink_, zero, nr,
                      [&](size_t j, int32_t& start, const T*& xp) {
                        start = root;
                        xp = xb + j * cols;
                      }, leaves);
    return;
  }
  const T* xs[kWalkers];
  for (size_t g = 0; g < nr; g += kWalkers) {
    const int count = static_cast<int>(std::min<size_t>(kWalkers, nr - g));
    int32_t* idx = leaves + g;
    for (int k = 0; k < count; ++k) {
      xs[k] = xb + (g + static_cast<size_t>(k)) * cols;
      idx[k] = root;
    }
    walk_fixed<kMode, kNan, kWalkers>(nodes_.data(), flags_.data(), xs, idx, count, uniform_[t]);
    for (int k = 0; k < count; ++k) idx[k] = ~idx[k];
  }
}

template <typename T, typename O>
template <int kMode, bool kNan>
void Ensemble<T, O>::block(const T* x, size_t cols, size_t r0, size_t r1, T* s,
                           uint8_t* h) const {
  const size_t nr = r1 - r0, ns = n_targets_;
  int32_t leaves[kBlockRows];
  if (nr < kWalkers) {
    // A few rows: each walks the trees, kBlockRows at a time.
    for (size_t r = 0; r < nr; ++r) {
      for (size_t g = 0; g < n_trees_; g += kBlockRows) {
        const size_t e = std::min(g + kBlockRows, n_trees_);
        row_leaves<kMode, kNan>(x + (r0 + r) * cols, g, e, leaves);
        for (size_t t = g; t < e; ++t) add_leaf(leaves[t - g], s + r * ns, h + r * ns);
      }
    }
    return;
  }
  // Many rows: the block's rows through one tree, tree after tree.
  const bool sums = single_ && (agg_ == TreeAggregate::kSum || agg_ == TreeAggregate::kAverage);
  for (size_t t = 0; t < n_trees_; ++t) {
    tree_leaves<kMode, kNan>(t, x, cols, r0, r1, leaves);
    if (sums) {
      for (size_t r = 0; r < nr; ++r) s[r] += leaf_value_[static_cast<size_t>(leaves[r])];
    } else {
      for (size_t r = 0; r < nr; ++r) add_leaf(leaves[r], s + r * ns, h + r * ns);
    }
  }
}

// The leaves of rows [r0, r1) (at most kBlockRows) in trees [t0, t1), into
// leaves[r * n_trees_ + t].
template <typename T, typename O>
template <int kMode, bool kNan>
void Ensemble<T, O>::leaves_block(const T* x, size_t cols, size_t r0, size_t r1, size_t t0,
                                  size_t t1, int32_t* leaves) const {
  if (r1 - r0 < kWalkers) {
    for (size_t r = r0; r < r1; ++r) {
      row_leaves<kMode, kNan>(x + r * cols, t0, t1, leaves + r * n_trees_ + t0);
    }
    return;
  }
  int32_t buf[kBlockRows];
  for (size_t t = t0; t < t1; ++t) {
    tree_leaves<kMode, kNan>(t, x, cols, r0, r1, buf);
    for (size_t r = r0; r < r1; ++r) leaves[r * n_trees_ + t] = buf[r - r0];
  }
}

#define ONNXPLEX_TREE_DISPATCH(call_nan, call_plain)                 \
  switch (mode_) {                                                  \
    case 0:                                                         \
      if (nan) call_nan(0); else call_plain(0);                     \
      break;                                                        \
    case 1:                                                         \
      if (nan) call_nan(1); else call_plain(1);                     \
      break;                                                        \
    case 2:                                                         \
      if (nan) call_nan(2); else call_plain(2);                     \
      break;                                                        \
    default:                                                        \
      if (nan) call_nan(kModeMixed); else call_plain(kModeMixed);   \
  }

template <typename T, typename O>
void Ensemble<T, O>::rows_range(const T* x, size_t cols, size_t r0, size_t r1, O* z,
                                int64_t* labels) const {
  const size_t ns = n_targets_;
  std::vector<T> s(std::min(kBlockRows, r1 - r0) * ns);
  std::vector<uint8_t> h(s.size());
  for (size_t b = r0; b < r1; b += kBlockRows) {
    const size_t e = std::min(b + kBlockRows, r1);
    std::fill(s.begin(), s.end(), T(0));
    std::fill(h.begin(), h.end(), uint8_t(0));
    const bool nan = nan_flags_ && has_nan(x, cols, b, e);
#define ONNXPLEX_TREE_BLOCK_NAN(M) block<M, true>(x, cols, b, e, s.data(), h.data())
#define ONNXPLEX_TREE_BLOCK(M) block<M, false>(x, cols, b, e, s.data(), h.data())
    ONNXPLEX_TREE_DISPATCH(ONNXPLEX_TREE_BLOCK_NAN, ONNXPLEX_TREE_BLOCK)
#undef ONNXPLEX_TREE_BLOCK_NAN
#undef ONNXPLEX_TREE_BLOCK
    for (size_t r = b; r < e; ++r) {
      finalize(s.data() + (r - b) * ns, h.data() + (r - b) * ns, z + r * n_targets_,
               labels ? labels + r : nullptr);
    }
  }
}

template <typename T, typename O>
void Ensemble<T, O>::leaves_range(const T* x, size_t cols, size_t rows, size_t t0, size_t t1,
                                  int32_t* leaves) const {
  for (size_t b = 0; b < rows; b += kBlockRows) {
    const size_t e = std::min(b + kBlockRows, rows);
    const bool nan = nan_flags_ && has_nan(x, cols, b, e);
#define ONNXPLEX_TREE_LEAVES_NAN(M) leaves_block<M, true>(x, cols, b, e, t0, t1, leaves)
#define ONNXPLEX_TREE_LEAVES(M) leaves_block<M, false>(x, cols, b, e, t0, t1, leaves)
    ONNXPLEX_TREE_DISPATCH(ONNXPLEX_TREE_LEAVES_NAN, ONNXPLEX_TREE_LEAVES)
#undef ONNXPLEX_TREE_LEAVES_NAN
#undef ONNXPLEX_TREE_LEAVES
  }
}

#undef ONNXPLEX_TREE_DISPATCH

template <typename T, typename O>
void Ensemble<T, O>::run(const void* xv, size_t rows, size_t cols, void* zv, int64_t* labels,
                         size_t threads) const {
  if (cols < n_features_) {
    throw std::invalid_argument("the trees read feature " + std::to_string(n_features_ - 1) +
                                " but the input has " + std::to_string(cols) + " columns");
  }
  if (rows == 0) return;
  const T* x = static_cast<const T*>(xv);
  O* z = static_cast<O*>(zv);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t steps = rows * steps_per_row_;
  if (threads > 1 && steps >= kMinParallelSteps && n_trees_ > 1) {
    if (rows >= threads * kBlockRows) {
      // Rows split in tasks of whole blocks (a task reads the model once a block, as one
      // thread would), a few tasks a thread for balance.
      const size_t per = std::max(kBlockRows, (rows + threads * 4 - 1) / (threads * 4));
      const size_t tasks = (rows + per - 1) / per;
      parallel_for(tasks, threads, [&](size_t t) {
        rows_range(x, cols, t * per, std::min(rows, (t + 1) * per), z, labels);
      });
      return;
    }
    // Fewer rows: the trees split (each thread reads its part of the model), the leaves
    // gathered; then each row summed in tree order, as one thread would, rows split.
    const size_t tasks = std::min(n_trees_, threads);
    std::vector<int32_t> leaves(rows * n_trees_);
    parallel_for(tasks, threads, [&](size_t t) {
      leaves_range(x, cols, rows, n_trees_ * t / tasks, n_trees_ * (t + 1) / tasks,
                   leaves.data());
    });
    const size_t row_tasks = std::min(rows, threads);
    parallel_for(row_tasks, threads, [&](size_t t) {
      const size_t ns = n_targets_;
      std::vector<T> s(ns);
      std::vector<uint8_t> h(ns);
      for (size_t r = rows * t / row_tasks; r < rows * (t + 1) / row_tasks; ++r) {
        std::fill(s.begin(), s.end(), T(0));
        std::fill(h.begin(), h.end(), uint8_t(0));
        for (size_t j = 0; j < n_trees_; ++j) add_leaf(leaves[r * n_trees_ + j], s.data(), h.data());
        finalize(s.data(), h.data(), z + r * n_targets_, labels ? labels + r : nullptr);
      }
    });
    return;
  }
  rows_range(x, cols, 0, rows, z, labels);
}

template <typename T, typename O>
void Ensemble<T, O>::write_scores(T* s, uint8_t* h, size_t n, O* z) const {
  switch (post_) {
    case TreePost::kProbit:
      for (size_t i = 0; i < n; ++i) z[i] = static_cast<O>(ort_probit(static_cast<float>(scored(s[i], h[i]))));
      return;
    case TreePost::kLogistic:
      for (size_t i = 0; i < n; ++i) z[i] = static_cast<O>(ort_logistic(static_cast<float>(scored(s[i], h[i]))));
      return;
    case TreePost::kSoftmax:
    case TreePost::kSoftmaxZero: {
      float vmax = -std::numeric_limits<float>::max();
      for (size_t i = 0; i < n; ++i) vmax = std::max(vmax, static_cast<float>(scored(s[i], h[i])));
      float sum = 0.f;
      if (post_ == TreePost::kSoftmax) {
        for (size_t i = 0; i < n; ++i) {
          const float e = std::exp(static_cast<float>(scored(s[i], h[i])) - vmax);
          s[i] = static_cast<T>(e);
          sum += e;
        }
        for (size_t i = 0; i < n; ++i) z[i] = static_cast<O>(static_cast<float>(s[i]) / sum);
        return;
      }
      // Values within 1e-7 of zero are scaled rather than exponentiated: zeros stay zero.
      const float exp_neg_max = std::exp(-vmax);
      for (size_t i = 0; i < n; ++i) {
        const T v = scored(s[i], h[i]);
        const float f = static_cast<float>(v);
        if (f > 0.0000001f || f < -0.0000001f) {
          const float e = std::exp(f - vmax);
          s[i] = static_cast<T>(e);
          sum += e;
        } else {
          s[i] = v * static_cast<T>(exp_neg_max);
        }
      }
      for (size_t i = 0; i < n; ++i) z[i] = static_cast<O>(s[i] / static_cast<T>(sum));
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) z[i] = static_cast<O>(scored(s[i], h[i]));
  }
}

// onnxruntime's two columns from one score (write_scores' "binary case"): `add` says how the
// second column is made.
template <typename T, typename O>
void Ensemble<T, O>::write_binary1(T s0, uint8_t h0, int add, O* z) const {
  const T v = scored(s0, h0);
  if (post_ == TreePost::kProbit) {
    z[0] = static_cast<O>(ort_probit(static_cast<float>(v)));
    z[1] = O(0);  // onnxruntime leaves it unwritten
    return;
  }
  switch (add) {
    case 0:
    case 1: {  // all weights positive: the score is the positive class's probability
      const T p = post_ == TreePost::kLogistic
                      ? static_cast<T>(ort_logistic(static_cast<float>(v))) : v;
      z[0] = static_cast<O>(T(1) - p);
      z[1] = static_cast<O>(p);
      return;
    }
    case 2:
    case 3:  // mixed weights: a margin
      if (post_ == TreePost::kLogistic) {
        z[0] = static_cast<O>(ort_logistic(static_cast<float>(-v)));
        z[1] = static_cast<O>(ort_logistic(static_cast<float>(v)));
      } else {
        z[0] = static_cast<O>(-v);
        z[1] = static_cast<O>(v);
      }
      return;
    default:
      z[0] = static_cast<O>(v);
      z[1] = O(0);  // onnxruntime leaves it unwritten
  }
}

template <typename T, typename O>
void Ensemble<T, O>::finalize(T* s, uint8_t* h, O* z, int64_t* label) const {
  const size_t n = n_targets_, nb = base_.size();
  if (!classifier_) {
    if (n == 1) {
      const T origin = nb == 1 ? base_[0] : T(0);
      T v = s[0];
      switch (agg_) {
        case TreeAggregate::kSum:
          v += origin;
          break;
        case TreeAggregate::kAverage:
          v /= static_cast<T>(n_trees_);
          v += origin;
          break;
        default:
          v = h[0] ? v + origin : origin;
      }
      z[0] = post_ == TreePost::kProbit ? static_cast<O>(ort_probit(static_cast<float>(v)))
                                        : static_cast<O>(v);
      return;
    }
    const bool use = nb == n;
    for (size_t i = 0; i < n; ++i) {
      switch (agg_) {
        case TreeAggregate::kSum:
          if (use) s[i] = s[i] + base_[i];
          break;
        case TreeAggregate::kAverage:
          s[i] = use ? s[i] / static_cast<T>(n_trees_) + base_[i]
                     : s[i] / static_cast<T>(n_trees_);
          break;
        default:
          s[i] = (use ? base_[i] : T(0)) + scored(s[i], h[i]);
      }
    }
    write_scores(s, h, n, z);
    return;
  }
  if (n == 1) {
    // A classifier trained on one label: that label, and its score (onnxruntime reads a
    // second class that is not there: labels 1 or 0 whatever the class, and no post
    // transform; sklearn predicts the one class).
    if (nb == 1) s[0] += base_[0];
    h[0] = 1;
    *label = labels_[0];
    write_scores(s, h, 1, z);
    return;
  }
  if (n > 2) {
    for (size_t k = 0; k < nb; ++k) {
      s[k] = h[k] ? s[k] + base_[k] : base_[k];
      h[k] = 1;
    }
    ptrdiff_t best = -1;
    T best_score = 0;
    for (size_t k = 0; k < n; ++k) {
      if (h[k] && (best == -1 || s[k] > best_score)) {
        best = static_cast<ptrdiff_t>(k);
        best_score = s[k];
      }
    }
    *label = labels_[best < 0 ? 0 : static_cast<size_t>(best)];
    write_scores(s, h, n, z);
    return;
  }
  // Two classes: onnxruntime's TreeAggregatorClassifier::FinalizeScores, quirks included.
  int add = -1;
  size_t size = 2;
  if (nb == 2) {
    if (h[1]) {
      s[1] = base_[1] + s[0];
      s[0] = -s[1];
    } else {
      s[1] += base_[1];
      s[0] += base_[0];
    }
  } else if (nb == 1) {
    s[0] += base_[0];
    if (!h[1]) size = 1;
  } else if (nb == 0) {
    add = 3;
    if (!h[1]) size = 1;
  }
  const T pos = size == 2 && h[1] ? s[1] : scored(s[0], h[0]);
  if (binary_case_) {
    const bool positive = all_positive_ ? pos > T(0.5) : pos > T(0);
    add = all_positive_ ? (positive ? 0 : 1) : (positive ? 2 : 3);
    *label = labels_[positive ? 1 : 0];
  } else {
    *label = pos > T(0) ? 1 : 0;  // onnxruntime's positive_label_ / negative_label_
  }
  if (size == 2) {
    write_scores(s, h, 2, z);
  } else {
    write_binary1(s[0], h[0], add, z);
  }
}

}  // namespace

std::unique_ptr<TreeEnsemble> make_tree_ensemble(const TreeEnsembleDesc& d, bool in_double,
                                                 bool out_double) {
  if (!in_double && out_double) bad("a float ensemble writes float");
  if (!in_double) return std::make_unique<Ensemble<float, float>>(d);
  if (!out_double) return std::make_unique<Ensemble<double, float>>(d);
  return std::make_unique<Ensemble<double, double>>(d);
}

namespace {

// ONNX opset-1/3 mode codes (TreeV3Attrs::modes) to TreeCmp, and whether the children swap:
// GTE and GT take < and <=, NEQ ==, with the children swapped.
constexpr uint8_t kV3Cmp[8] = {0, 1, 1, 0, 2, 2, 2, 3};
constexpr bool kV3Swap[8] = {false, false, true, true, false, true, false, false};
constexpr int64_t kV3Gte = 2, kV3Gt = 3, kV3Neq = 5, kV3Member = 6, kV3Leaf = 7;
// Feature ids are int32 in the laid-out nodes.
constexpr int64_t kMaxFeatureId = std::numeric_limits<int32_t>::max();

// Nodes found by (tree id, node id): in the common layout (each tree one run of nodes_treeids,
// its nodes numbered 0, 1, ... in order) by arithmetic, otherwise by binary search over the
// nodes sorted by (tree id, node id).
class V3Finder {
 public:
  V3Finder(const TreeV3Attrs& a, const std::vector<int64_t>& starts)
      : a_(a), starts_(starts), runs_(starts.size()) {
    const size_t n_runs = starts.size();
    bool sorted = true;
    for (size_t r = 0; r < n_runs; ++r) {
      runs_[r] = {a.tree_ids[starts[r]], static_cast<int64_t>(r)};
      sorted = sorted && (r == 0 || runs_[r - 1].first < runs_[r].first);
    }
    if (!sorted) std::sort(runs_.begin(), runs_.end());
    dense_ = true;
    for (size_t r = 1; r < n_runs && dense_; ++r) dense_ = runs_[r - 1].first != runs_[r].first;
    for (size_t r = 0; r < n_runs && dense_; ++r) {
      const int64_t s = starts[r], e = end(r);
      for (int64_t i = s; i < e; ++i) {
        if (a.node_ids[i] != i - s) {
          dense_ = false;
          break;
        }
      }
    }
    if (dense_) return;
    by_id_.resize(a.n_nodes);
    for (size_t i = 0; i < a.n_nodes; ++i) by_id_[i] = static_cast<int64_t>(i);
    std::sort(by_id_.begin(), by_id_.end(), [&](int64_t x, int64_t y) {
      const int64_t tx = a.tree_ids[x], ty = a.tree_ids[y];
      if (tx != ty) return tx < ty;
      const int64_t kx = a.node_ids[x], ky = a.node_ids[y];
      return kx != ky ? kx < ky : x < y;
    });
  }

  // A node given twice (the one of the smallest such (tree id, node id)), or -1.
  int64_t duplicate() const {
    for (size_t p = 1; p < by_id_.size(); ++p) {
      const int64_t x = by_id_[p - 1], y = by_id_[p];
      if (a_.tree_ids[x] == a_.tree_ids[y] && a_.node_ids[x] == a_.node_ids[y]) return x;
    }
    return -1;
  }

  // The index of node id k of run r's tree, or -1.
  int64_t in_run(size_t r, int64_t k) const {
    if (!dense_) return search(a_.tree_ids[starts_[r]], k);
    return k >= 0 && k < end(r) - starts_[r] ? starts_[r] + k : -1;
  }

  // The index of node id k of tree t, or -1 (consecutive lookups of one tree are cheap).
  int64_t find(int64_t t, int64_t k) {
    if (!dense_) return search(t, k);
    if (!cached_ || t != cached_tree_) {
      const auto it = std::lower_bound(runs_.begin(), runs_.end(), std::make_pair(t, int64_t{0}));
      cached_ = true;
      cached_tree_ = t;
      cached_run_ = it != runs_.end() && it->first == t ? it->second : -1;
    }
    return cached_run_ < 0 ? -1 : in_run(static_cast<size_t>(cached_run_), k);
  }

  int64_t end(size_t r) const {
    return r + 1 < starts_.size() ? starts_[r + 1] : static_cast<int64_t>(a_.n_nodes);
  }

 private:
  int64_t search(int64_t t, int64_t k) const {
    const auto it = std::lower_bound(by_id_.begin(), by_id_.end(), 0, [&](int64_t x, int) {
      const int64_t tx = a_.tree_ids[x];
      return tx != t ? tx < t : a_.node_ids[x] < k;
    });
    return it != by_id_.end() && a_.tree_ids[*it] == t && a_.node_ids[*it] == k ? *it : -1;
  }

  const TreeV3Attrs& a_;
  const std::vector<int64_t>& starts_;
  std::vector<std::pair<int64_t, int64_t>> runs_;  // (tree id, run), by tree id
  std::vector<int64_t> by_id_;  // not dense: node indices by (tree id, node id, index)
  bool dense_ = true;
  bool cached_ = false;
  int64_t cached_tree_ = 0, cached_run_ = -1;
};

}  // namespace

TreeV3Result resolve_tree_v3(const TreeV3Attrs& a, const TreeV3Nodes& o) {
  using E = TreeV3Error;
  const auto refuse = [](E e, size_t i) {
    TreeV3Result r;
    r.error = e;
    r.index = i;
    return r;
  };
  // (the arrays as locals: stores through the outputs may alias the structs' fields)
  const size_t n = a.n_nodes, m = a.n_weights;
  const int64_t* const mode = a.modes;
  const int64_t* const feature = a.feature;
  const int64_t* const tree_ids = a.tree_ids;
  TreeV3Result res;
  // modes, then feature ids (a leaf's counts when positive, as onnxruntime's); tree runs
  size_t bad_feature = n;
  int64_t max_feature = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t md = mode[i], f = feature[i];
    if (md < 0 || md > kV3Leaf || md == kV3Member) return refuse(E::kMode, i);
    if (bad_feature == n && (md != kV3Leaf || f > 0) && (f < 0 || f >= kMaxFeatureId)) {
      bad_feature = i;
    }
    max_feature = std::max(max_feature, f);
    if (i == 0 || tree_ids[i] != tree_ids[i - 1]) res.roots.push_back(static_cast<int64_t>(i));
  }
  if (bad_feature < n) return refuse(E::kFeature, bad_feature);
  res.n_features = max_feature + 1;

  V3Finder finder(a, res.roots);
  if (const int64_t d = finder.duplicate(); d >= 0) {
    return refuse(E::kDuplicate, static_cast<size_t>(d));
  }

  // Children: every true child checked before the false ones.
  const int64_t* const true_ids = a.true_ids;
  const int64_t* const false_ids = a.false_ids;
  int64_t* const true_child = o.true_child;
  int64_t* const false_child = o.false_child;
  TreeV3Result false_refused;
  const size_t n_runs = res.roots.size();
  for (size_t r = 0; r < n_runs; ++r) {
    const int64_t e = finder.end(r);
    for (int64_t i = res.roots[r]; i < e; ++i) {
      if (mode[i] == kV3Leaf) {
        true_child[i] = false_child[i] = 0;
        continue;
      }
      const int64_t t = finder.in_run(r, true_ids[i]), f = finder.in_run(r, false_ids[i]);
      if (t < 0 || t == i) {
        return refuse(t < 0 ? E::kTrueMissing : E::kTrueSelf, static_cast<size_t>(i));
      }
      if ((f < 0 || f == i) && false_refused.error == E::kNone) {
        false_refused = refuse(f < 0 ? E::kFalseMissing : E::kFalseSelf, static_cast<size_t>(i));
      }
      true_child[i] = t;
      false_child[i] = f;
    }
  }
  if (false_refused.error != E::kNone) return false_refused;

  // The weights' leaves (-1: an interior node's weight, ignored as onnxruntime does).
  const int64_t* const w_ids = a.w_ids;
  const double* const w_values = a.w_values;
  std::vector<int64_t> owner(m);
  for (size_t k = 0; k < m; ++k) {
    const int64_t c = finder.find(a.w_trees[k], a.w_nodes[k]);
    if (c < 0) return refuse(E::kWeightNode, k);
    owner[k] = mode[c] == kV3Leaf ? c : -1;
  }
  const auto n_targets = static_cast<int64_t>(a.n_targets);
  if (n_targets > 0) {
    for (size_t k = 0; k < m; ++k) {
      if (w_ids[k] < 0 || w_ids[k] >= n_targets) return refuse(E::kWeightId, k);
    }
  }
  // grouped by leaf, in the order given
  int64_t* const ws = o.weight_start;
  int64_t* const w_target = o.weight_target;
  double* const w_value = o.weight_value;
  std::fill(ws, ws + n + 1, int64_t{0});
  for (size_t k = 0; k < m; ++k) {
    if (owner[k] >= 0) ++ws[owner[k] + 1];
  }
  for (size_t i = 0; i < n; ++i) ws[i + 1] += ws[i];
  std::vector<int64_t> next(ws, ws + n);
  bool one_id = m > 0, positive = true;
  for (size_t k = 0; k < m; ++k) {
    one_id = one_id && w_ids[k] == w_ids[0];
    positive = positive && w_values[k] >= 0;
    if (owner[k] < 0) continue;
    const int64_t p = next[owner[k]]++;
    w_target[p] = w_ids[k];
    w_value[p] = w_values[k];
  }
  res.binary_case = one_id;
  res.weights_all_positive = positive;

  const int64_t* const missing = a.missing;
  const size_t n_missing = a.n_missing;
  const double* const values = a.values;
  uint8_t* const cmp = o.cmp;
  uint8_t* const nan_true = o.nan_true;
  double* const value = o.value;
  for (size_t i = 0; i < n; ++i) {
    const int64_t md = mode[i];
    bool nan = i < n_missing && missing[i] == 1;  // (onnxruntime tests for 1)
    if (md == kV3Gte || md == kV3Gt) nan = !nan;    // the comparison's complement
    if (md == kV3Neq || md == kV3Leaf) nan = false;  // (NaN != t holds: the swap sends it)
    cmp[i] = kV3Cmp[md];
    nan_true[i] = nan;
    if (md == kV3Leaf) {
      // one target: the first weight, or without one the node's own value (as onnxruntime)
      value[i] = ws[i + 1] > ws[i] ? w_value[ws[i]] : values[i];
      continue;
    }
    value[i] = values[i];
    if (kV3Swap[md]) std::swap(true_child[i], false_child[i]);
  }
  return res;
}

}  // namespace onnxplex::mlas
