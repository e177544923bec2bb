"""cpu_mlas ai.onnx.ml kernels (LabelEncoder, ArrayFeatureExtractor, Binarizer, TreeEnsemble)
against onnxruntime and onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as oh
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from onnxplex import ProviderContext, load_model
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

ort.set_default_logger_severity(3)
ML = "ai.onnx.ml"
RNG = np.random.default_rng(11)


def _model(op_type: str, x: np.ndarray, out_type: int, ml_opset: int, n_in: int = 1,
           extra_inputs: tuple = (), **attrs) -> onnx.ModelProto:
    names = ["x"] + [f"i{k}" for k in range(len(extra_inputs))]
    node = oh.make_node(op_type, names, ["y"], domain=ML, **attrs)
    ins = [oh.make_tensor_value_info("x", oh.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    ins += [oh.make_tensor_value_info(f"i{k}", oh.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for k, a in enumerate(extra_inputs)]
    g = oh.make_graph([node], "g", ins, [oh.make_tensor_value_info("y", out_type, None)])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 21),
                                           oh.make_opsetid(ML, ml_opset)], ir_version=10)


def _ours(model: onnx.ModelProto, *args: np.ndarray) -> np.ndarray:
    node = load_model(model).node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    ro = []
    for a in args:
        v = a.view()
        v.flags.writeable = False
        ro.append(v)
    return config.factory(node, ProviderContext())(*ro)


def _feeds(args):
    return {n: a for n, a in zip(["x", "i0", "i1"], args)}


def _ort(model, *args):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, _feeds(args))[0]


def _ref(model, *args):
    return np.asarray(ReferenceEvaluator(model).run(None, _feeds(args))[0])


def _same(got, want, tol=0.0):
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "OU":
        assert got.dtype == object
        assert got.tolist() == want.astype(object).tolist()
        return
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------------
# LabelEncoder
# --------------------------------------------------------------------------------------------


def S(*v):
    a = np.empty(len(v), dtype=object)
    a[:] = list(v)
    return a


@pytest.mark.parametrize("case", ["str_int", "int_str", "float_float", "int_float",
                                  "str_str_default"])
def test_label_encoder_v2(case):
    if case == "str_int":
        x = S("a", "b", "zz", "c", "a").reshape(5, 1)
        attrs = dict(keys_strings=["a", "b", "c"], values_int64s=[5, -2, 7], default_int64=99)
        out = onnx.TensorProto.INT64
    elif case == "int_str":
        x = np.array([[3, 1], [-4, 8]], np.int64)
        attrs = dict(keys_int64s=[1, 3, 8], values_strings=["one", "three", "eight"])
        out = onnx.TensorProto.STRING
    elif case == "float_float":
        x = np.array([0.5, 1.5, -0.0, 2.5], np.float32)
        attrs = dict(keys_floats=[0.5, 2.5, 0.0], values_floats=[10.0, 20.0, 30.0],
                     default_float=-1.0)
        out = onnx.TensorProto.FLOAT
    elif case == "int_float":
        x = np.array([7, 8, 9], np.int64)
        attrs = dict(keys_int64s=[9, 7], values_floats=[0.25, 0.75])
        out = onnx.TensorProto.FLOAT
    else:
        x = S("x", "y", "q")
        attrs = dict(keys_strings=["x", "y"], values_strings=["X", "Y"], default_string="?")
        out = onnx.TensorProto.STRING
    m = _model("LabelEncoder", x, out, 2, **attrs)
    _same(_ours(m, x), _ort(m, x))


def test_label_encoder_v4_tensors_and_nan_keys():
    keys = np.array([1.0, np.nan, 3.0], np.float64)
    vals = np.array([10, 20, 30], np.int16)
    x = np.array([3.0, np.nan, 5.0, 1.0], np.float64)
    m = _model("LabelEncoder", x, onnx.TensorProto.INT16, 4,
               keys_tensor=numpy_helper.from_array(keys, "k"),
               values_tensor=numpy_helper.from_array(vals, "v"),
               default_tensor=numpy_helper.from_array(np.array([-7], np.int16), "d"))
    got = _ours(m, x)
    assert got.dtype == np.int16 and got.tolist() == [30, 20, -7, 10]


def test_label_encoder_v1():
    m = _model("LabelEncoder", S("b", "q"), onnx.TensorProto.INT64, 1,
               classes_strings=["a", "b"], default_int64=-5)
    assert _ours(m, S("b", "q", "a")).tolist() == [1, -5, 0]
    m = _model("LabelEncoder", np.array([0], np.int64), onnx.TensorProto.STRING, 1,
               classes_strings=["a", "b"], default_string="none")
    assert _ours(m, np.array([1, 5, 0], np.int64)).tolist() == ["b", "none", "a"]


# --------------------------------------------------------------------------------------------
# ArrayFeatureExtractor, Binarizer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, object])
def test_array_feature_extractor(shape, dtype):
    x = RNG.integers(0, 9, shape).astype(dtype)
    if dtype is object:
        x = x.astype(str).astype(object)
    idx = np.array([4, 0, 4], np.int64)
    out = onnx.TensorProto.STRING if dtype is object else oh.np_dtype_to_tensor_dtype(x.dtype)
    m = _model("ArrayFeatureExtractor", x, out, 1, extra_inputs=(idx,))
    want = _ort(m, x, idx) if dtype is not object else _ref(m, x, idx)
    _same(_ours(m, x, idx), want)
    for bad in ([5], [-1], [0, 7]):   # past the end, negative (numpy would wrap it), mixed
        with pytest.raises(IndexError, match="out of range"):
            _ours(m, x, np.array(bad, np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, object])
def test_array_feature_extractor_one_label(dtype):
    """A classifier's label lookup (a 1-D table, one index: the fast path) gives onnxruntime's
    [1, 1] (the reference's for strings), a new array, and the out-of-range errors."""
    x = np.array([7, 3, 5], dtype=dtype if dtype is not object else np.int64)
    if dtype is object:
        x = x.astype(str).astype(object)
    out = onnx.TensorProto.STRING if dtype is object else oh.np_dtype_to_tensor_dtype(x.dtype)
    for k in range(3):
        idx = np.array([[k]], np.int64)
        m = _model("ArrayFeatureExtractor", x, out, 1, extra_inputs=(idx,))
        got = _ours(m, x, idx)
        _same(got, _ort(m, x, idx) if dtype is not object else _ref(m, x, idx))
        assert got.shape == (1, 1) and not np.shares_memory(got, x)
    for bad in ([[3]], [[-1]]):
        with pytest.raises(IndexError, match="out of range"):
            _ours(m, x, np.array(bad, np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_binarizer(dtype):
    x = (RNG.standard_normal((4, 5)) * 3).astype(dtype)
    m = _model("Binarizer", x, oh.np_dtype_to_tensor_dtype(np.dtype(dtype)), 1, threshold=0.5)
    _same(_ours(m, x), _ref(m, x))


# --------------------------------------------------------------------------------------------
# TreeEnsemble
# --------------------------------------------------------------------------------------------


def _tree_attrs(dtype, modes, agg=1, missing=None):
    """Two trees over 3 features: tree 0 has 3 interior nodes, tree 1 is a single leaf."""
    t = lambda a, name: numpy_helper.from_array(np.asarray(a, dtype=dtype), name)  # noqa: E731
    attrs = dict(
        nodes_featureids=[0, 1, 2, 0],
        nodes_modes=numpy_helper.from_array(np.asarray(modes + [0], np.uint8), "m"),
        nodes_splits=t([0.0, 0.5, -0.25, 0.0], "s"),
        # tree 1 is the degenerate single leaf 3 (the reference reads a leaf root's weight
        # at the root's node index, so keep the two equal)
        nodes_truenodeids=[1, 0, 2, 3], nodes_trueleafs=[0, 1, 1, 1],
        nodes_falsenodeids=[2, 1, 4, 3], nodes_falseleafs=[0, 1, 1, 1],
        leaf_targetids=[0, 1, 0, 1, 1], leaf_weights=t([1.5, -2.0, 4.0, 10.0, 0.25], "w"),
        tree_roots=[0, 3], n_targets=2, aggregate_function=agg, post_transform=0)
    if missing is not None:
        attrs["nodes_missing_value_tracks_true"] = missing
    return attrs


@pytest.mark.parametrize("modes", [[0, 0, 0], [1, 2, 3], [4, 5, 0], [3, 1, 2]])
@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble(modes, agg, dtype):
    x = np.round(RNG.standard_normal((40, 3)), 1).astype(dtype)
    x[::7, 0] = 0.0
    x[3::9, 1] = np.nan
    m = _model("TreeEnsemble", x, oh.np_dtype_to_tensor_dtype(np.dtype(dtype)), 5,
               **_tree_attrs(dtype, modes, agg, missing=[0, 1, 0, 0]))
    _same(_ours(m, x), _ort(m, x), tol=1e-6)  # MIN/MAX of an unscored target: 0, not +-max


def test_tree_ensemble_membership():
    attrs = _tree_attrs(np.float32, [6, 0, 6])
    attrs["membership_values"] = numpy_helper.from_array(
        np.array([0.0, 2.0, np.nan, 1.0, -1.0, 3.0, np.nan], np.float32), "mv")
    x = np.array([[0, 0, 1], [2, 9, 3], [1, 0.1, -1], [5, 0.9, 0.0]], np.float32)
    m = _model("TreeEnsemble", x, onnx.TensorProto.FLOAT, 5, **attrs)
    # the ONNX reference stops reading a set at a member equal to 0, so compare by hand:
    # row 0: 0 in {0, 2} -> node 1 (LEQ 0.5, x1=0 -> leaf 0: t0 += 1.5); tree 1 -> t1 += 10
    want = np.array([[1.5, 10.0], [1.5, 10.0], [0.25, 10.0], [0.0, 10.25]], np.float32)
    want[1] = [0.0, 8.0]    # 2 in set -> node 1: 9 > 0.5 -> leaf 1 (t1 -2)
    want[2] = [4.0, 10.0]   # 1 not in {0,2} -> node 2: -1 in {1,-1,3} -> leaf 2 (t0 +4)
    want[3] = [0.0, 10.25]  # node 2: 0 not in set -> leaf 3 (t1 +0.25)
    _same(_ours(m, x), want)


def test_tree_ensemble_post_transform_logistic():
    attrs = _tree_attrs(np.float32, [0, 0, 0])
    attrs["post_transform"] = 2
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    m = _model("TreeEnsemble", x, onnx.TensorProto.FLOAT, 5, **attrs)
    attrs["post_transform"] = 0
    raw = _ours(_model("TreeEnsemble", x, onnx.TensorProto.FLOAT, 5, **attrs), x)
    np.testing.assert_allclose(_ours(m, x), 1 / (1 + np.exp(-raw)), rtol=1e-6)
