// Bindings of the tree-ensemble evaluator: the description's arrays checked for size, the
// input cast to the ensemble's type, outputs allocated here, GIL released around the walk.
#include <memory>
#include <stdexcept>
#include <string>

#include "bind_util.h"
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

py::object run(const TreeEnsemble& e, const py::array& x_in, size_t threads) {
  if (x_in.ndim() != 1 && x_in.ndim() != 2) {
    throw py::value_error("a tree ensemble's input must have rank 1 or 2, not " +
                          std::to_string(x_in.ndim()));
  }
  py::array x = e.in_double() ? py::array(Arr<double>::ensure(x_in))
                              : py::array(Arr<float>::ensure(x_in));
  if (!x) throw py::type_error("a tree ensemble's input must be numeric");
  const size_t rows = x.ndim() == 1 ? 1 : static_cast<size_t>(x.shape(0));
  const size_t cols = static_cast<size_t>(x.shape(x.ndim() - 1));
  const auto n_rows = static_cast<py::ssize_t>(rows);
  const auto n_out = static_cast<py::ssize_t>(e.n_targets());
  py::array scores = e.out_double() ? py::array(py::array_t<double>({n_rows, n_out}))
                                    : py::array(py::array_t<float>({n_rows, n_out}));
  py::array_t<int64_t> labels;
  if (e.classifier()) labels = py::array_t<int64_t>(n_rows);
  const void* xp = x.data();
  void* zp = scores.mutable_data();
  int64_t* lp = e.classifier() ? labels.mutable_data() : nullptr;
  {
    py::gil_scoped_release release;
    e.run(xp, rows, cols, zp, lp, threads);
  }
  if (e.classifier()) return py::make_tuple(labels, scores);
  return std::move(scores);
}

}  // namespace

void register_trees(py::module_& m) {
  py::class_<TreeEnsemble, std::shared_ptr<TreeEnsemble>>(
      m, "TreeEnsemble",
      "A tree ensemble laid out for evaluation (immutable; run it from any thread).")
      .def("run", &run, py::arg("x"), py::arg("threads") = 0,
           "Scores of x [N, F] (or [F], one row), cast to the ensemble's input type: an "
           "array [N, n_targets] (float32, or float64 for an ensemble built with "
           "out_double), and before it for a classifier the labels [N] (int64).")
      .def_property_readonly("n_targets", &TreeEnsemble::n_targets)
      .def_property_readonly("n_features", &TreeEnsemble::n_features)
      .def_property_readonly("n_trees", &TreeEnsemble::n_trees);

  m.def("tree_ensemble", [](const py::object& cmp_in, const py::object& nan_true_in,
                            const py::object& feature_in, const py::object& value_in,
                            const py::object& true_in, const py::object& false_in,
                            const py::object& wstart_in, const py::object& wtarget_in,
                            const py::object& wvalue_in, const py::object& roots_in,
                            size_t n_targets, int aggregate, int post,
                            const py::object& base_in, bool classifier, bool binary_case,
                            bool weights_all_positive, const py::object& labels_in,
                            size_t n_features, bool in_double, bool out_double) {
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
    if (classifier) labels = arr<int64_t>(labels_in, "class_labels",
                                          static_cast<py::ssize_t>(n_targets));
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
    std::shared_ptr<TreeEnsemble> e = make_tree_ensemble(d, in_double, out_double);
    return e;
  }, py::arg("cmp"), py::arg("nan_true"), py::arg("feature"), py::arg("value"),
     py::arg("true_child"), py::arg("false_child"), py::arg("weight_start"),
     py::arg("weight_target"), py::arg("weight_value"), py::arg("roots"),
     py::arg("n_targets"), py::arg("aggregate"), py::arg("post"), py::arg("base"),
     py::arg("classifier") = false, py::arg("binary_case") = false,
     py::arg("weights_all_positive") = true, py::arg("class_labels") = py::none(),
     py::arg("n_features") = 0, py::arg("in_double") = false, py::arg("out_double") = false,
     "A TreeEnsemble from a resolved node list (see tree_ensemble.h): per node its comparison "
     "(0 <=, 1 <, 2 ==, 3 leaf), NaN direction, feature, threshold (a leaf: its single-target "
     "value), children; the leaves' weights (CSR over the nodes); the roots in summation "
     "order; onnxruntime's aggregate (0 AVERAGE 1 SUM 2 MIN 3 MAX) and post transform (0 NONE "
     "1 LOGISTIC 2 SOFTMAX 3 SOFTMAX_ZERO 4 PROBIT) codes. Raises ValueError on an index out "
     "of range or a cycle.");
}

}  // namespace onnxplex::mlas::bind
