// Tree-ensemble evaluation for ai.onnx.ml TreeEnsembleClassifier / TreeEnsembleRegressor
// (ml opsets 1 and 3) and TreeEnsemble (ml opset 5), with onnxruntime's numerics. Knows nothing
// about Python.
//
// The caller (providers/cpu_mlas/ml_trees.py; for ml opsets 1 and 3 through resolve_tree_v3
// below) resolves the ONNX attributes into one node list:
// each node an interior comparison or a leaf, children as indices into the list, every
// comparison reduced to x <= t, x < t or x == t (GTE and GT take < and <= with their children
// swapped and their NaN direction flipped, NEQ == with its children swapped), BRANCH_MEMBER
// unrolled into a chain of equalities.
// make_tree_ensemble checks the description again (indices in range, no cycles) and lays it out
// for the walk: each tree's interior nodes in preorder, the true child next to its parent, 16
// bytes a node (float; 24 double), a child index < 0 naming a leaf (~index), the leaves' values
// and weights apart.
//
// The walk: eight walkers (eight rows through one tree, or one row through eight trees) step in
// turn without branching on the comparisons (a conditional move picks the child); a walker
// that reaches a leaf takes the next row or tree at once, so walks of different depths do not
// wait for each other. Rows with a NaN take a variant that honours each node's NaN direction,
// and only when some node sends NaN to its true child.
//
// Sums and the post transforms are onnxruntime's: sums in the threshold type (float for
// float and integer inputs, double for double), tree by tree in the order of the roots (the
// same bits at every thread count), base values, averages, the binary-classifier rules and the
// float-precision LOGISTIC / SOFTMAX / SOFTMAX_ZERO / PROBIT of its ml_common.h, including what
// a class or target no tree scored reads as (0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace onnxplex::mlas {

// A node's comparison after the caller's rewriting: the true child is taken when it holds.
enum class TreeCmp : uint8_t { kLeq = 0, kLt = 1, kEq = 2, kLeaf = 3 };
// onnxruntime's numbering (ml_common.h), not the ONNX opset-5 one.
enum class TreeAggregate : uint8_t { kAverage = 0, kSum = 1, kMin = 2, kMax = 3 };
enum class TreePost : uint8_t { kNone = 0, kLogistic = 1, kSoftmax = 2, kSoftmaxZero = 3,
                                kProbit = 4 };

struct TreeEnsembleDesc {
  size_t n_nodes = 0;
  const uint8_t* cmp = nullptr;          // [n_nodes] TreeCmp
  const uint8_t* nan_true = nullptr;     // [n_nodes] a NaN takes the true child
  const int64_t* feature = nullptr;      // [n_nodes] column of an interior node
  const double* value = nullptr;         // [n_nodes] interior: threshold; leaf: its value
                                         // when there is one target (first weight, else the
                                         // node's own value, as onnxruntime)
  const int64_t* true_child = nullptr;   // [n_nodes] (interior nodes only)
  const int64_t* false_child = nullptr;  // [n_nodes]
  const int64_t* weight_start = nullptr;  // [n_nodes + 1] each node's weights (leaves only)
  const int64_t* weight_target = nullptr;
  const double* weight_value = nullptr;
  size_t n_roots = 0;
  const int64_t* roots = nullptr;        // the trees, in summation order
  size_t n_targets = 1;                  // targets, or classes of a classifier
  TreeAggregate aggregate = TreeAggregate::kSum;
  TreePost post = TreePost::kNone;
  size_t n_base = 0;
  const double* base = nullptr;
  bool classifier = false;
  bool binary_case = false;           // two classes and one class id in the weights
  bool weights_all_positive = true;
  const int64_t* class_labels = nullptr;  // [n_targets] the label written for each class
  size_t n_features = 0;                  // columns the input must have at least
};

class TreeEnsemble {
 public:
  virtual ~TreeEnsemble() = default;
  // Scores of x [rows, cols] (C-contiguous, of the input type: float, or double when built
  // with in_double) into scores [rows, n_targets] (the output type) and, for a classifier,
  // labels [rows]. Throws std::invalid_argument when cols < n_features(). threads 0 = all.
  virtual void run(const void* x, size_t rows, size_t cols, void* scores, int64_t* labels,
                   size_t threads) const = 0;
  size_t n_targets() const { return n_targets_; }
  size_t n_features() const { return n_features_; }
  size_t n_trees() const { return n_trees_; }
  // A row's work in node steps (the trees' depths summed; at least one a tree).
  size_t steps_per_row() const { return steps_per_row_; }
  bool in_double() const { return in_double_; }
  bool out_double() const { return out_double_; }
  bool classifier() const { return classifier_; }

 protected:
  size_t n_targets_ = 0, n_features_ = 0, n_trees_ = 0, steps_per_row_ = 0;
  bool in_double_ = false, out_double_ = false, classifier_ = false;
};

// Throws std::invalid_argument, naming what is wrong, for a description that does not hold
// (an index out of range, a cycle, an unknown code).
std::unique_ptr<TreeEnsemble> make_tree_ensemble(const TreeEnsembleDesc& d, bool in_double,
                                                 bool out_double);

// TreeEnsembleClassifier / TreeEnsembleRegressor (ml opsets 1 and 3): the node and weight lists
// as their attributes give them, to resolve into a TreeEnsembleDesc's node arrays.
struct TreeV3Attrs {
  size_t n_nodes = 0;
  const int64_t* modes = nullptr;      // [n_nodes] 0 LEQ 1 LT 2 GTE 3 GT 4 EQ 5 NEQ 7 LEAF
  const int64_t* tree_ids = nullptr;   // [n_nodes] nodes_treeids
  const int64_t* node_ids = nullptr;   // [n_nodes] nodes_nodeids
  const int64_t* feature = nullptr;    // [n_nodes] nodes_featureids
  const int64_t* true_ids = nullptr;   // [n_nodes] nodes_truenodeids (node ids of the tree)
  const int64_t* false_ids = nullptr;  // [n_nodes] nodes_falsenodeids
  const double* values = nullptr;      // [n_nodes] nodes_values
  size_t n_missing = 0;                // the first n_missing nodes' flags (the others 0)
  const int64_t* missing = nullptr;    // nodes_missing_value_tracks_true (1 = NaN goes true)
  size_t n_weights = 0;
  const int64_t* w_trees = nullptr;    // [n_weights] target_treeids / class_treeids
  const int64_t* w_nodes = nullptr;    // [n_weights] target_nodeids / class_nodeids
  const int64_t* w_ids = nullptr;      // [n_weights] target_ids / class_ids
  const double* w_values = nullptr;    // [n_weights] target_weights / class_weights
  size_t n_targets = 0;                // w_ids must be below it (0: not checked)
};

// What resolve_tree_v3 refuses, the first found in this order, and the index it names (a node,
// or for kWeightNode / kWeightId a weight).
enum class TreeV3Error : int {
  kNone = 0,
  kMode = 1,          // a mode code not listed above
  kFeature = 2,       // an interior node's (or a leaf's positive) feature id < 0 or >= 2^31-1
  kDuplicate = 3,     // a (tree, node) pair given twice: the smallest such pair
  kTrueMissing = 4,   // an interior node's true child does not exist in its tree
  kTrueSelf = 5,      // ... is the node itself
  kFalseMissing = 6,  // (all true children are checked before the false ones)
  kFalseSelf = 7,
  kWeightNode = 8,    // a weight's (tree, node) does not exist
  kWeightId = 9,      // a weight's target or class id is outside [0, n_targets)
};

// The resolved node list (a TreeEnsembleDesc's arrays, see make_tree_ensemble), in the
// caller's buffers.
struct TreeV3Nodes {
  uint8_t* cmp = nullptr;          // [n_nodes] TreeCmp
  uint8_t* nan_true = nullptr;     // [n_nodes]
  double* value = nullptr;         // [n_nodes] threshold; a leaf's first weight, or its value
  int64_t* true_child = nullptr;   // [n_nodes] node indices (0 for a leaf)
  int64_t* false_child = nullptr;  // [n_nodes]
  int64_t* weight_start = nullptr;   // [n_nodes + 1] each leaf's weights
  int64_t* weight_target = nullptr;  // [n_weights] (the first weight_start[n_nodes] used)
  double* weight_value = nullptr;    // [n_weights]
};

// What resolve_tree_v3 refuses (error, index) or, without an error, the rest it resolves.
struct TreeV3Result {
  TreeV3Error error = TreeV3Error::kNone;
  size_t index = 0;
  std::vector<int64_t> roots;      // where nodes_treeids changes (onnxruntime's trees)
  int64_t n_features = 1;          // the largest feature id (at least 0) + 1
  bool binary_case = false;        // the weights' ids are one id
  bool weights_all_positive = true;  // every weight >= 0
};

// Resolves the opset-1/3 lists as ml_trees.py documents (node ids to indices, each tree's nodes
// contiguous and numbered 0, 1, ... or in any order with any ids; weights on interior nodes
// dropped, the others grouped by leaf in the order given; GTE, GT and NEQ rewritten with their
// children swapped). Refusals are returned, not thrown, for the caller to word.
TreeV3Result resolve_tree_v3(const TreeV3Attrs& a, const TreeV3Nodes& o);

}  // namespace onnxplex::mlas
