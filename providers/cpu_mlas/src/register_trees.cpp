// Bindings of the ai.onnx.ml evaluators: the tree ensemble (the description's arrays checked
// for size, the input cast to the ensemble's type, outputs allocated here, GIL released around
// the walk), the SVM (svm.h) and the small-batch linear scores (linear.h), both built once per
// kernel and run on float32 rows.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bind_util.h"
#include "linear.h"
#include "svm.h"
#include "tree_ensemble.h"

namespace onnxplex::mlas::bind {

namespace {

template <typename T>
using Arr = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
Arr<T> arr(const py::object& a, const char* what, py::ssize_t size) {
  Arr<T> v = Arr<T>::ensure(a);
  if (!v) throw py::type_error(std::string(what) + " must be a numeric array");
  if (size >= 0 && v.size() != size) {
    throw py::value_error(std::string(what) + " must have " + std::to_string(size) +
                          " values, not " + std::to_string(v.size()));
  }
  return v;
}

// Arrays read for one call (cast, sizes checked), kept alive until it returns.
struct Held {
  std::vector<py::array> keep;

  static py::ssize_t size(const py::object& a, const char* what) {
    const py::array v = py::array::ensure(a);
    if (!v) throw py::type_error(std::string(what) + " must be a numeric array");
    return v.size();
  }

  template <typename T>
  const T* data(const py::object& a, const char* what, py::ssize_t size) {
    const Arr<T> v = arr<T>(a, what, size);
    keep.push_back(v);
    return v.data();
  }
};

// Below this many node steps the walk runs holding the GIL (releasing and taking it back
// costs more than the walk of a small model at batch 1).
constexpr size_t kKeepGilSteps = 4096;

// The ensemble as Python holds it: with the thread count of its session and, for string
// classes, the label objects (a run then returns them; one call does it all).
struct PyTreeEnsemble {
  std::shared_ptr<TreeEnsemble> e;
  size_t threads = 0;
  py::object names = py::none();  // a tuple of the class label strings, or None

  py::object run(const py::array& x_in, py::ssize_t threads_in) const {
    if (x_in.ndim() != 1 && x_in.ndim() != 2) {
      throw py::value_error("a tree ensemble's input must have rank 1 or 2, not " +
                            std::to_string(x_in.ndim()));
    }
    py::array x = e->in_double() ? py::array(Arr<double>::ensure(x_in))
                                 : py::array(Arr<float>::ensure(x_in));
    if (!x) throw py::type_error("a tree ensemble's input must be numeric");
    const size_t rows = x.ndim() == 1 ? 1 : static_cast<size_t>(x.shape(0));
    const size_t cols = static_cast<size_t>(x.shape(x.ndim() - 1));
    const auto n_rows = static_cast<py::ssize_t>(rows);
    const auto n_out = static_cast<py::ssize_t>(e->n_targets());
    py::array scores = e->out_double() ? py::array(py::array_t<double>({n_rows, n_out}))
                                       : py::array(py::array_t<float>({n_rows, n_out}));
    py::array_t<int64_t> labels;
    if (e->classifier()) labels = py::array_t<int64_t>(n_rows);
    const void* xp = x.data();
    void* zp = scores.mutable_data();
    int64_t* lp = e->classifier() ? labels.mutable_data() : nullptr;
    const size_t t = threads_in < 0 ? threads : static_cast<size_t>(threads_in);
    if (rows * e->steps_per_row() < kKeepGilSteps) {
      e->run(xp, rows, cols, zp, lp, t);
    } else {
      py::gil_scoped_release release;
      e->run(xp, rows, cols, zp, lp, t);
    }
    if (!e->classifier()) return std::move(scores);
    if (names.is_none()) return py::make_tuple(labels, scores);
    // string classes: the label objects themselves, in an object array
    const auto tuple = py::reinterpret_borrow<py::tuple>(names);
    // numpy.empty: an object array (of None) numpy owns and lets us write
    static const auto* empty = new py::object(py::module_::import("numpy").attr("empty"));
    py::array out = (*empty)(n_rows, "O");
    auto** slot = static_cast<PyObject**>(out.mutable_data());
    const auto n_names = static_cast<int64_t>(tuple.size());
    for (size_t r = 0; r < rows; ++r) {
      const int64_t k = lp[r];
      if (k < 0 || k >= n_names) throw py::value_error("a class index is out of range");
      PyObject* o = PyTuple_GET_ITEM(tuple.ptr(), static_cast<py::ssize_t>(k));
      Py_INCREF(o);
      Py_XDECREF(slot[r]);
      slot[r] = o;
    }
    return py::make_tuple(out, scores);
  }
};


// The rows of x, a float32 [N, F] or [F] array of n_features columns (errors name `what`).
size_t float_rows(const Arr<float>& x, size_t n_features, const char* what) {
  if (!x) throw py::type_error(std::string(what) + "'s input must be numeric");
  if (x.ndim() != 1 && x.ndim() != 2) {
    throw py::value_error(std::string(what) + "'s input must have rank 1 or 2");
  }
  const size_t cols = static_cast<size_t>(x.shape(x.ndim() - 1));
  if (cols != n_features) {
    throw py::value_error("input has " + std::to_string(cols) + " features, the model " +
                          "expects " + std::to_string(n_features));
  }
  return x.ndim() == 1 ? 1 : static_cast<size_t>(x.shape(0));
}

// Below this many multiply-adds of kernel evaluation the SVM runs holding the GIL.
constexpr size_t kKeepGilSvm = 1 << 16;

struct PySvm {
  std::shared_ptr<SvmModel> m;
  size_t threads = 0;

  // x: float32 [N, F] (or [F]). A classifier returns (label indices int64 [N], scores float32
  // [N, n_scores]); a regressor the scores.
  py::object run(const py::array& x_in) const {
    const Arr<float> x = Arr<float>::ensure(x_in);
    const size_t rows = float_rows(x, m->n_features, "an SVM");
    const auto n_rows = static_cast<py::ssize_t>(rows);
    py::array_t<float> scores({n_rows, static_cast<py::ssize_t>(m->n_scores())});
    const bool classifier = m->n_classes > 0;
    py::array_t<int64_t> labels(classifier ? n_rows : 0);
    const float* xp = x.data();
    float* sp = scores.mutable_data();
    int64_t* lp = classifier ? labels.mutable_data() : nullptr;
    if (rows * m->n_vectors * m->n_features < kKeepGilSvm) {
      m->run(xp, rows, sp, lp, 1);
    } else {
      py::gil_scoped_release release;
      m->run(xp, rows, sp, lp, threads);
    }
    if (!classifier) return std::move(scores);
    return py::make_tuple(labels, scores);
  }
};

struct PyLinear {
  std::shared_ptr<LinearModel> m;

  // x: float32 [N, F] (or [F]) -> (best int64 [N], scores float32 [N, n_out]).
  py::tuple run(const py::array& x_in) const {
    const Arr<float> x = Arr<float>::ensure(x_in);
    const size_t rows = float_rows(x, m->n_features, "a linear model");
    const auto n_rows = static_cast<py::ssize_t>(rows);
    py::array_t<float> scores({n_rows, static_cast<py::ssize_t>(m->n_out)});
    py::array_t<int64_t> best(n_rows);
    m->run(x.data(), rows, scores.mutable_data(), best.mutable_data());
    return py::make_tuple(best, scores);
  }
};

template <typename T>
std::vector<T> values(const py::object& a, const char* what) {
  const auto v = arr<T>(a, what, -1);
  return std::vector<T>(v.data(), v.data() + v.size());
}

}  // namespace

void register_trees(py::module_& m) {
  py::class_<PyLinear>(m, "Linear", "Linear scores for small batches (linear.h; immutable).")
      .def("run", &PyLinear::run, py::arg("x"),
           "Rows of x float32 [N, F] (or [F]): (index of each row's first best raw score, "
           "int64 [N]; scores x W^T + b after the post transform, float32 [N, n_out]).");

  m.def("linear", [](const py::object& w_in, const py::object& b_in, int post) {
    if (post < 0 || post > 2) throw py::value_error("post must be 0..2");
    auto l = std::make_shared<LinearModel>();
    l->b = values<float>(b_in, "intercepts");
    l->w = values<float>(w_in, "coefficients");
    l->n_out = l->b.size();
    if (l->n_out == 0 || l->w.size() % l->n_out) {
      throw py::value_error("coefficients must hold n_out = len(intercepts) rows");
    }
    l->n_features = l->w.size() / l->n_out;
    l->post = static_cast<LinearPost>(post);
    return PyLinear{l};
  }, py::arg("coefficients"), py::arg("intercepts"), py::arg("post") = 0,
     "A Linear from coefficients [n_out * F] (row-major, one row an output) and intercepts "
     "[n_out]; post 0 NONE, 1 LOGISTIC, 2 SOFTMAX (onnxruntime's float transforms).");

  py::class_<PySvm>(m, "Svm", "An SVM laid out for evaluation (svm.h; immutable).")
      .def("run", &PySvm::run, py::arg("x"),
           "Rows of x float32 [N, F] (or [F]): a classifier's (label indices int64 [N], scores "
           "float32 [N, S]), S the pairs' decision values or, with prob_a, the coupled class "
           "probabilities; a regressor's outputs [N, P] float32.");

  m.def("svm", [](const py::object& vectors_in, size_t n_features, int kind, double gamma,
                  double coef0, double degree, const py::object& coefs_in,
                  const py::object& seg_start_in, const py::object& seg_count_in,
                  const py::object& seg_coef_in, const py::object& out_begin_in,
                  const py::object& bias_in, size_t n_classes, const py::object& prob_a_in,
                  const py::object& prob_b_in, size_t threads) {
    if (kind < 0 || kind > 3) throw py::value_error("kind must be 0..3");
    if (n_features == 0) throw py::value_error("n_features must be > 0");
    auto s = std::make_shared<SvmModel>();
    s->kind = static_cast<SvmKernel>(kind);
    s->gamma = gamma;
    s->coef0 = coef0;
    s->degree = degree;
    s->vectors = values<float>(vectors_in, "vectors");
    s->n_features = n_features;
    s->n_vectors = s->vectors.size() / n_features;
    s->coefs = values<float>(coefs_in, "coefs");
    s->seg_start = values<int64_t>(seg_start_in, "seg_start");
    s->seg_count = values<int64_t>(seg_count_in, "seg_count");
    s->seg_coef = values<int64_t>(seg_coef_in, "seg_coef");
    s->out_begin = values<int64_t>(out_begin_in, "out_begin");
    s->bias = values<double>(bias_in, "bias");
    s->n_classes = n_classes;
    s->prob_a = values<float>(prob_a_in, "prob_a");
    s->prob_b = values<float>(prob_b_in, "prob_b");
    try {
      s->check();
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
    return PySvm{s, threads};
  }, py::arg("vectors"), py::arg("n_features"), py::arg("kind"), py::arg("gamma"),
     py::arg("coef0"), py::arg("degree"), py::arg("coefs"), py::arg("seg_start"),
     py::arg("seg_count"), py::arg("seg_coef"), py::arg("out_begin"), py::arg("bias"),
     py::arg("n_classes"), py::arg("prob_a"), py::arg("prob_b"), py::arg("threads") = 0,
     "An Svm (see svm.h): support vectors [V * F] float32, the kernel (0 LINEAR 1 POLY 2 RBF "
     "3 SIGMOID) and its gamma, coef0, degree; each output's sum over the kernel values as "
     "segments (start vector, count, offset into coefs; out_begin [P + 1] the outputs' "
     "segments) plus bias [P]; n_classes > 0 a classifier of one-vs-one pairs (P = C(C-1)/2), "
     "prob_a/prob_b (empty or [P]) its Platt parameters; threads for a large run (0: all). "
     "Raises ValueError on bad layout.");

  py::class_<PyTreeEnsemble>(
      m, "TreeEnsemble",
      "A tree ensemble laid out for evaluation (immutable; run it from any thread).")
      .def("run", &PyTreeEnsemble::run, py::arg("x"), py::arg("threads") = -1,
           "Scores of x [N, F] (or [F], one row), cast to the ensemble's input type: an "
           "array [N, n_targets] (float32, or float64 for an ensemble built with "
           "out_double), and before it for a classifier the labels [N] (int64, or the class "
           "names' objects when built with them). threads -1: the ensemble's own.")
      .def_property_readonly("n_targets", [](const PyTreeEnsemble& p) {
        return p.e->n_targets();
      })
      .def_property_readonly("n_features", [](const PyTreeEnsemble& p) {
        return p.e->n_features();
      })
      .def_property_readonly("n_trees", [](const PyTreeEnsemble& p) { return p.e->n_trees(); });

  m.def("tree_ensemble", [](const py::object& cmp_in, const py::object& nan_true_in,
                            const py::object& feature_in, const py::object& value_in,
                            const py::object& true_in, const py::object& false_in,
                            const py::object& wstart_in, const py::object& wtarget_in,
                            const py::object& wvalue_in, const py::object& roots_in,
                            size_t n_targets, int aggregate, int post,
                            const py::object& base_in, bool classifier, bool binary_case,
                            bool weights_all_positive, const py::object& labels_in,
                            const py::object& names_in, size_t n_features, bool in_double,
                            bool out_double, size_t threads) {
    const auto cmp = arr<uint8_t>(cmp_in, "cmp", -1);
    const py::ssize_t n = cmp.size();
    const auto nan_true = arr<uint8_t>(nan_true_in, "nan_true", n);
    const auto feature = arr<int64_t>(feature_in, "feature", n);
    const auto value = arr<double>(value_in, "value", n);
    const auto t = arr<int64_t>(true_in, "true_child", n);
    const auto f = arr<int64_t>(false_in, "false_child", n);
    const auto wstart = arr<int64_t>(wstart_in, "weight_start", n + 1);
    const auto wtarget = arr<int64_t>(wtarget_in, "weight_target", -1);
    const auto wvalue = arr<double>(wvalue_in, "weight_value", wtarget.size());
    if (wstart.at(n) > wtarget.size()) {
      throw py::value_error("weight_start runs past the weights");
    }
    const auto roots = arr<int64_t>(roots_in, "roots", -1);
    const auto base = arr<double>(base_in, "base", -1);
    Arr<int64_t> labels;
    if (classifier) {
      labels = arr<int64_t>(labels_in, "class_labels", static_cast<py::ssize_t>(n_targets));
    }
    PyTreeEnsemble out;
    if (!names_in.is_none()) {
      py::tuple names = py::tuple(names_in);
      if (!classifier || names.size() != n_targets) {
        throw py::value_error("class_names: one name a class of a classifier");
      }
      for (size_t k = 0; k < n_targets; ++k) {
        if (labels.at(static_cast<py::ssize_t>(k)) != static_cast<int64_t>(k)) {
          throw py::value_error("with class_names, class_labels must be 0, 1, ...");
        }
      }
      out.names = names;
    }
    if (aggregate < 0 || aggregate > 3) throw py::value_error("aggregate must be 0..3");
    if (post < 0 || post > 4) throw py::value_error("post must be 0..4");
    TreeEnsembleDesc d;
    d.n_nodes = static_cast<size_t>(n);
    d.cmp = cmp.data();
    d.nan_true = nan_true.data();
    d.feature = feature.data();
    d.value = value.data();
    d.true_child = t.data();
    d.false_child = f.data();
    d.weight_start = wstart.data();
    d.weight_target = wtarget.data();
    d.weight_value = wvalue.data();
    d.n_roots = static_cast<size_t>(roots.size());
    d.roots = roots.data();
    d.n_targets = n_targets;
    d.aggregate = static_cast<TreeAggregate>(aggregate);
    d.post = static_cast<TreePost>(post);
    d.n_base = static_cast<size_t>(base.size());
    d.base = base.data();
    d.classifier = classifier;
    d.binary_case = binary_case;
    d.weights_all_positive = weights_all_positive;
    d.class_labels = classifier ? labels.data() : nullptr;
    d.n_features = n_features;
    out.e = make_tree_ensemble(d, in_double, out_double);
    out.threads = threads;
    return out;
  }, py::arg("cmp"), py::arg("nan_true"), py::arg("feature"), py::arg("value"),
     py::arg("true_child"), py::arg("false_child"), py::arg("weight_start"),
     py::arg("weight_target"), py::arg("weight_value"), py::arg("roots"),
     py::arg("n_targets"), py::arg("aggregate"), py::arg("post"), py::arg("base"),
     py::arg("classifier") = false, py::arg("binary_case") = false,
     py::arg("weights_all_positive") = true, py::arg("class_labels") = py::none(),
     py::arg("class_names") = py::none(), py::arg("n_features") = 0,
     py::arg("in_double") = false, py::arg("out_double") = false, py::arg("threads") = 0,
     "A TreeEnsemble from a resolved node list (see tree_ensemble.h): per node its comparison "
     "(0 <=, 1 <, 2 ==, 3 leaf), NaN direction, feature, threshold (a leaf: its single-target "
     "value), children; the leaves' weights (CSR over the nodes); the roots in summation "
     "order; onnxruntime's aggregate (0 AVERAGE 1 SUM 2 MIN 3 MAX) and post transform (0 NONE "
     "1 LOGISTIC 2 SOFTMAX 3 SOFTMAX_ZERO 4 PROBIT) codes; class_names (a classifier's label "
     "strings, class_labels then 0, 1, ...) returned in place of the indices; threads the "
     "run's default (0 = all). Raises ValueError on an index out of range or a cycle.");

  m.def("tree_v3_nodes", [](const py::object& modes_in, const py::object& tree_ids_in,
                            const py::object& node_ids_in, const py::object& feature_in,
                            const py::object& true_ids_in, const py::object& false_ids_in,
                            const py::object& values_in, const py::object& missing_in,
                            const py::object& w_trees_in, const py::object& w_nodes_in,
                            const py::object& w_ids_in, const py::object& w_values_in,
                            size_t n_targets) -> py::tuple {
    Held in;
    TreeV3Attrs a;
    const py::ssize_t n = in.size(modes_in, "nodes_modes");
    const py::ssize_t m = in.size(w_trees_in, "weight tree ids");
    // the int64 lists: the node lists' n entries, the weight lists' m
    using List = std::tuple<const int64_t**, const py::object*, const char*, py::ssize_t>;
    for (const List& l : {List{&a.modes, &modes_in, "nodes_modes", n},
                          List{&a.tree_ids, &tree_ids_in, "nodes_treeids", n},
                          List{&a.node_ids, &node_ids_in, "nodes_nodeids", n},
                          List{&a.feature, &feature_in, "nodes_featureids", n},
                          List{&a.true_ids, &true_ids_in, "nodes_truenodeids", n},
                          List{&a.false_ids, &false_ids_in, "nodes_falsenodeids", n},
                          List{&a.w_trees, &w_trees_in, "weight tree ids", m},
                          List{&a.w_nodes, &w_nodes_in, "weight node ids", m},
                          List{&a.w_ids, &w_ids_in, "weight ids", m}}) {
      *std::get<0>(l) = in.data<int64_t>(*std::get<1>(l), std::get<2>(l), std::get<3>(l));
    }
    a.n_nodes = static_cast<size_t>(n);
    a.n_weights = static_cast<size_t>(m);
    a.values = in.data<double>(values_in, "nodes_values", n);
    a.w_values = in.data<double>(w_values_in, "weights", m);
    const py::ssize_t n_missing = in.size(missing_in, "nodes_missing_value_tracks_true");
    a.n_missing = static_cast<size_t>(std::min(n_missing, n));
    a.missing = in.data<int64_t>(missing_in, "nodes_missing_value_tracks_true", n_missing);
    a.n_targets = n_targets;
    py::array_t<uint8_t> cmp(n), nan_true(n);
    py::array_t<double> value(n), weight_value(m);
    py::array_t<int64_t> true_child(n), false_child(n), weight_start(n + 1), weight_target(m);
    TreeV3Nodes o{cmp.mutable_data(), nan_true.mutable_data(), value.mutable_data(),
                  true_child.mutable_data(), false_child.mutable_data(),
                  weight_start.mutable_data(), weight_target.mutable_data(),
                  weight_value.mutable_data()};
    const TreeV3Result res = resolve_tree_v3(a, o);
    if (res.error != TreeV3Error::kNone) {
      return py::make_tuple(static_cast<int>(res.error), res.index);
    }
    const py::ssize_t kept = o.weight_start[n];
    py::object wt = weight_target, wv = weight_value;
    if (kept < m) {  // (weights on interior nodes dropped)
      const py::slice used(0, kept, 1);
      wt = weight_target[used];
      wv = weight_value[used];
    }
    py::array_t<int64_t> roots(static_cast<py::ssize_t>(res.roots.size()));
    std::copy(res.roots.begin(), res.roots.end(), roots.mutable_data());
    return py::make_tuple(0, 0, cmp, nan_true, value, true_child, false_child, weight_start, wt,
                          wv, roots, res.n_features, res.binary_case, res.weights_all_positive);
  }, py::arg("modes"), py::arg("tree_ids"), py::arg("node_ids"), py::arg("feature"),
     py::arg("true_ids"), py::arg("false_ids"), py::arg("values"), py::arg("missing"),
     py::arg("w_trees"), py::arg("w_nodes"), py::arg("w_ids"), py::arg("w_values"),
     py::arg("n_targets") = 0,
     "TreeEnsembleClassifier / TreeEnsembleRegressor (ml opsets 1, 3) node lists resolved for "
     "tree_ensemble (see resolve_tree_v3 in tree_ensemble.h): modes as codes (0 LEQ 1 LT 2 GTE "
     "3 GT 4 EQ 5 NEQ 7 LEAF), the node attributes, the missing-value flags (the first ones "
     "given), the weights' tree ids, node ids, target or class ids and values, n_targets (0: "
     "the ids unchecked). Returns (error code, index) for a refusal (TreeV3Error), else (0, "
     "0, cmp, nan_true, value, true_child, false_child, weight_start, weight_target, "
     "weight_value, roots, n_features, binary_case, weights_all_positive).");
}

}  // namespace onnxplex::mlas::bind
