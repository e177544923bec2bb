"""Basic-level passes: each rewrites a small graph and keeps the results."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel as Level
from onnxplex import optimizer as _optimizer

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _sessions(model, level=Level.ORT_ENABLE_BASIC):
    off, on = onnxplex.SessionOptions(), onnxplex.SessionOptions()
    off.graph_optimization_level = Level.ORT_DISABLE_ALL
    on.graph_optimization_level = level
    return (onnxplex.InferenceSession(model, off, providers=["cpu_mlas"]),
            onnxplex.InferenceSession(model, on, providers=["cpu_mlas"]))


def _ops(sess):
    return [n.op_type for n in sess.model.nodes]


def _same(model, feed, level=Level.ORT_ENABLE_BASIC):
    off, on = _sessions(model, level)
    for a, b in zip(off.run(None, feed), on.run(None, feed)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    return off, on


X = helper.make_tensor_value_info("x", F, [2, 3, 4])
Y = helper.make_tensor_value_info("y", F, None)
FEED = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}


def test_constant_folding_makes_shape_computations_static():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    off, on = _same(_model(nodes, [X], [Y], inits), FEED)
    assert len(_ops(off)) == 5 and _ops(on) == ["Reshape"]
    assert on.model.value_info("shape").const.tolist() == [2, -1]


def test_identity_dropout_and_dead_code_are_removed():
    nodes = [
        helper.make_node("Identity", ["x"], ["i"]),
        helper.make_node("Dropout", ["i"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
        helper.make_node("Sigmoid", ["x"], ["unused"]),
    ]
    off, on = _same(_model(nodes, [X], [Y]), FEED)
    assert _ops(off) == ["Identity", "Dropout", "Relu", "Sigmoid"]
    assert _ops(on) == ["Relu"]


def test_noop_chains_collapse():
    nodes = [
        helper.make_node("Cast", ["x"], ["c0"], to=F),                       # no-op cast
        helper.make_node("Transpose", ["c0"], ["t1"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0, 2]),        # cancels
        helper.make_node("Reshape", ["t2", "s1"], ["r1"]),
        helper.make_node("Reshape", ["r1", "s2"], ["r2"]),                    # one reshape
        helper.make_node("Mul", ["r2", "one"], ["y"]),                       # x * 1
    ]
    inits = [numpy_helper.from_array(np.array([6, 4], np.int64), "s1"),
             numpy_helper.from_array(np.array([3, 8], np.int64), "s2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    off, on = _same(_model(nodes, [X], [Y], inits), FEED)
    assert _ops(on) == ["Reshape"]


def test_noop_candidates_alone_are_removed():
    """A Transpose keeping the order and a Cast to its input's type, each on its own (the pass
    tries its rules only at nodes that could match: these must count)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 2]),
        helper.make_node("Cast", ["t"], ["y"], to=F),
    ]
    off, on = _same(_model(nodes, [X], [Y]), FEED)
    assert _ops(off) == ["Relu", "Transpose", "Cast"]
    assert _ops(on) == ["Relu"]


def test_common_subexpressions_are_merged():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["x"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    off, on = _same(_model(nodes, [X], [Y]), FEED)
    assert _ops(on) == ["Relu", "Add"]


def test_common_subexpression_prefilter_needs_a_shared_op_and_inputs():
    import onnx_ir as ir

    from onnxplex.optimizer._basic import _may_have_common_subexpressions

    def graph(*nodes):
        return ir.serde.deserialize_model(_model(list(nodes), [X], [Y])).graph

    relu = helper.make_node("Relu", ["x"], ["a"])
    assert not _may_have_common_subexpressions(graph(
        relu, helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["a"], ["y"])))
    # the same op on the same inputs: a candidate even though the attributes differ
    assert _may_have_common_subexpressions(graph(
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
        helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
        helper.make_node("Add", ["a", "b"], ["y"])))


def test_failing_pass_is_rolled_back_with_a_warning(caplog):
    def broken(ctx):
        ctx.model.graph.remove(list(ctx.model.graph)[0], safe=False)   # damage, then fail
        raise RuntimeError("pass bug")

    _optimizer.PASSES.append(_optimizer.Pass("broken test pass", 1, broken))
    try:
        nodes = [helper.make_node("Relu", ["x"], ["y"])]
        with caplog.at_level(logging.WARNING, "onnxplex.optimizer"):
            off, on = _same(_model(nodes, [X], [Y]), FEED)
        assert _ops(on) == ["Relu"]
        assert "rolled back and skipped: RuntimeError: pass bug" in caplog.text
        report = {r.name: r for r in on._optimizer_reports}
        assert report["broken test pass"].skipped == "RuntimeError: pass bug"
    finally:
        _optimizer.PASSES.pop()


def test_passes_share_one_snapshot_unless_one_fails(monkeypatch):
    import onnx_ir as ir

    from onnxplex.session import session as _session

    clones, reloads = [], []
    real_clone, real_load = ir.Graph.clone, _session.load_model

    def counting_clone(self, *a, **kw):
        clones.append(1)
        return real_clone(self, *a, **kw)

    def counting_load(*a, **kw):
        reloads.append(1)
        return real_load(*a, **kw)

    monkeypatch.setattr(ir.Graph, "clone", counting_clone)
    monkeypatch.setattr(_session, "load_model", counting_load)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = _model(nodes, [X], [Y])
    _same(model, FEED)
    # A session that can load its source again keeps no snapshot for the run of all passes;
    # one created from an onnxplex.Model (the same object: nothing to reload) keeps one.
    assert clones == [] and len(reloads) == 2   # the two sessions' own loads
    clones.clear()
    onnxplex.InferenceSession(onnxplex.load_model(model), providers=["cpu_mlas"])
    assert len(clones) == 1

    ran = []

    def late_failure(ctx):
        ran.append(1)
        raise RuntimeError("late bug")

    _optimizer.PASSES.append(_optimizer.Pass("late failing test pass", 1, late_failure))
    try:
        clones.clear()
        reloads.clear()
        off, on = _same(model, FEED)
        # restored by loading the source again, then redone pass by pass: the earlier passes
        # still applied (CSE merged the two Relus), the failing one rolled back on its own
        assert _ops(on) == ["Relu", "Add"] and len(ran) == 2
        assert len(reloads) == 3   # the two sessions' loads and the restoring one
        basic = {p.name for p in _optimizer.PASSES if p.level == 1}
        done = sum(r.name in basic and r.seconds > 0 for r in on._optimizer_reports)
        assert 0 < done < len(basic)   # passes that cannot match this graph did not run
        assert len(clones) == done  # one snapshot per pass that ran in the redo
        report = {r.name: r for r in on._optimizer_reports}
        assert report["late failing test pass"].skipped == "RuntimeError: late bug"
    finally:
        _optimizer.PASSES.pop()


def test_verify_mode_rolls_back_a_pass_that_changes_results():
    def wrong(ctx):
        node = next(n for n in ctx.model.graph if n.op_type == "Relu")
        node.op_type = "Sigmoid"     # a "fusion" with a bug
        return 1

    _optimizer.PASSES.append(_optimizer.Pass("wrong test pass", 1, wrong))
    try:
        nodes = [helper.make_node("Relu", ["x"], ["y"])]
        so = onnxplex.SessionOptions()
        so.add_session_config_entry("session.optimizer_verify", "1")
        sess = onnxplex.InferenceSession(_model(nodes, [X], [Y]), so)
        assert _ops(sess) == ["Relu"]
        report = {r.name: r for r in sess._optimizer_reports}
        assert "changed beyond rtol" in report["wrong test pass"].skipped
    finally:
        _optimizer.PASSES.pop()


def test_debug_reports_passes(monkeypatch, caplog):
    monkeypatch.setenv("ONNXPLEX_DEBUG", "1")
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    with caplog.at_level(logging.WARNING, "onnxplex.optimizer"):
        onnxplex.InferenceSession(_model(nodes, [X], [Y]))
    assert "eliminate Identity/Dropout: 1 change(s)" in caplog.text


@pytest.mark.parametrize("level", [Level.ORT_ENABLE_BASIC, Level.ORT_ENABLE_ALL])
def test_saved_optimized_model_loads_in_onnxruntime(tmp_path, level):
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = onnxplex.InferenceSession(_model(nodes, [X], [Y]), so)
    saved = onnx.load(so.optimized_model_filepath)
    assert [n.op_type for n in saved.graph.node] == ["Relu"]
    ref = ort.InferenceSession(so.optimized_model_filepath, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(ref.run(None, FEED)[0], sess.run(None, FEED)[0])


@pytest.mark.parametrize("op, identity, expect", [
    ("Mul", 1.0, ["Relu"]), ("Add", 0.0, ["Relu"]), ("Mul", 2.0, ["Relu", "Mul"]),
    ("Add", [0.0, 0.0, 0.0, 0.0], ["Relu"]), ("Add", [0.0, 0.0, 0.0, 1.0], ["Relu", "Add"]),
])
def test_no_op_chain_rules_run_only_when_they_can_match(op, identity, expect):
    """The no-op chain pass runs when the graph has a candidate; its ``applies`` test must
    never skip one that matches (here: x * 1, x + 0, x + a small zero vector) and skips the
    rest (x * 2, a bias that is not all zero: onnxscript's rules match scalars only, and
    trying them at every bias Add was a cost)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["r", "c"], ["y"])]
    inits = [numpy_helper.from_array(np.array(identity, np.float32), "c")]
    off, on = _same(_model(nodes, [X], [Y], inits), FEED)
    assert _ops(on) == expect
    report = {r.name: r for r in on._optimizer_reports}["no-op chains"]
    assert (report.seconds > 0) == (expect == ["Relu"])


def test_a_cnn_session_does_not_load_the_rewriter():
    """Conv/Relu/ReduceMean (a global pool) graphs match no onnxscript rule set: onnxscript
    (and the onnx reference ops it imports) is not even imported."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnxplex
w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("ReduceMean", ["r"], ["y"], axes=[2, 3], keepdims=0)]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", 1, None)], [w])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
s = onnxplex.InferenceSession(m.SerializeToString())
s.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
assert "onnxscript" not in sys.modules, "onnxscript was imported"
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _ir(model):
    import onnx_ir as ir

    return ir.serde.deserialize_model(model)


def test_remove_unused_frees_chains_bodies_initializers_and_optional_outputs():
    from onnxplex.optimizer._basic import remove_unused

    body = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["dead_in_body"]),
         helper.make_node("Relu", ["x"], ["b_out"])],
        "body", [], [helper.make_tensor_value_info("b_out", F, None)])
    nodes = [
        # a dead chain: Sigmoid -> Tanh -> Abs, nothing reads Abs
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Tanh", ["s"], ["t"]),
        helper.make_node("Abs", ["t"], ["a"]),
        # LayerNormalization's Mean is read only by the dead Exp: named out after the sweep,
        # its InvStdDev is a graph output and stays
        helper.make_node("LayerNormalization", ["x", "g"], ["ln", "mean", "inv"]),
        helper.make_node("Exp", ["mean"], ["e"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body),
        helper.make_node("Add", ["ln", "y"], ["z"]),
    ]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "g"),
             numpy_helper.from_array(np.ones(4, np.float32), "unused"),
             numpy_helper.from_array(np.ones(4, np.float32), "default_in")]
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    default_in = helper.make_tensor_value_info("default_in", F, [4])
    model = _ir(_model(nodes, [X, cond, default_in],
                       [helper.make_tensor_value_info("z", F, None),
                        helper.make_tensor_value_info("inv", F, None)], inits))
    # 4 main-graph nodes + 2 body nodes (one per branch) + 1 initializer
    assert remove_unused(model) == 7
    assert [n.op_type for n in model.graph] == ["LayerNormalization", "If", "Add"]
    ln = model.graph.node(0)
    assert [o.name for o in ln.outputs] == ["ln", "", "inv"]
    then = model.graph.node(1).attributes["then_branch"].value
    assert [n.op_type for n in then] == ["Relu"]
    assert set(model.graph.initializers) == {"g", "default_in"}   # an input's default stays
    assert remove_unused(model) == 0


@pytest.mark.parametrize("opset, mode, kept",
                         [(15, None, 1), (15, 0, 1), (15, 1, 3), (13, None, 3)])
def test_remove_unused_keeps_batchnorm_training_outputs_unless_inference(opset, mode, kept):
    from onnxplex.optimizer._basic import remove_unused

    extra = {} if mode is None else {"training_mode": mode}
    nodes = [helper.make_node("BatchNormalization", ["x", "c", "c", "c", "c"],
                              ["y", "rm", "rv"], **extra)]
    inits = [numpy_helper.from_array(np.ones(3, np.float32), "c")]
    model = _ir(_model(nodes, [X], [Y], inits, opset=opset))
    remove_unused(model)
    node = model.graph.node(0)
    assert len(node.outputs) == kept
    assert ("training_mode" in node.attributes) == (mode is not None and kept == 3)


def test_a_large_fold_of_a_file_weight_is_computed_when_read(tmp_path):
    """Transpose(W) of a weight in the model file (GPT-2's tied LM head): the folded constant
    is a tensor that transposes when read, not a copy the graph keeps for the session's
    life; the session gives the unoptimized one's results. A small fold is still kept."""
    import onnx_ir as ir

    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((512, 640)).astype(np.float32), "w")
    small = numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "s")
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]),
             helper.make_node("MatMul", ["x", "wt"], ["y"]),
             helper.make_node("Transpose", ["s"], ["st"]),
             helper.make_node("MatMul", ["x4", "st"], ["z"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 640]),
                       helper.make_tensor_value_info("x4", F, [3, 5])],
               [Y, helper.make_tensor_value_info("z", F, None)], [w, small])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    feed = {"x": rng.standard_normal((3, 640)).astype(np.float32),
            "x4": rng.standard_normal((3, 5)).astype(np.float32)}
    off, on = _sessions(str(path))
    for a, b in zip(off.run(None, feed), on.run(None, feed)):   # (K = 640: GEMM rounding)
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
    assert "Transpose" not in _ops(on)
    inits = on.model.ir.graph.initializers
    assert isinstance(inits["wt"].const_value, ir.LazyTensor)
    assert not isinstance(inits["st"].const_value, ir.LazyTensor)
    np.testing.assert_array_equal(inits["wt"].const_value.numpy(),
                                  numpy_helper.to_array(w).T)


def test_cast_to_its_own_type_is_removed_without_the_rewriter():
    """skl2onnx casts every classifier's int64 label to int64: the Cast becomes an Identity
    and goes, the graph output keeping its name (a Cast to another type stays)."""
    nodes = [helper.make_node("ArgMax", ["x"], ["label"], axis=1, keepdims=0),
             helper.make_node("Cast", ["label"], ["y"], to=TensorProto.INT64),
             helper.make_node("Cast", ["label"], ["z"], to=TensorProto.INT32)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])],
               [helper.make_tensor_value_info("y", TensorProto.INT64, None),
                helper.make_tensor_value_info("z", TensorProto.INT32, None)])
    feed = {"x": np.array([[0, 2, 1], [3, 1, 0]], np.float32)}
    off, on = _same(m, feed)
    assert _ops(on) == ["ArgMax", "Cast"]
    assert [o.name for o in on.get_outputs()] == ["y", "z"]
    y, z = on.run(None, feed)
    assert y.dtype == np.int64 and z.dtype == np.int32 and y.tolist() == [1, 0]


def test_folding_inf_and_nan_results_warns_nothing():
    """A folded Div by zero and Log(0) give inf/-inf/NaN as a run would, without numpy's
    RuntimeWarning at session creation (kernels leave the error state to their caller)."""
    import warnings
    zero = numpy_helper.from_array(np.array([0.0, 1.0, 0.0], np.float32), "z")
    nodes = [helper.make_node("Div", ["z", "z"], ["q"]),
             helper.make_node("Log", ["z"], ["l"]),
             helper.make_node("Add", ["x", "q"], ["a"]),
             helper.make_node("Add", ["a", "l"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_tensor_value_info("y", F, [3])], [zero])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = onnxplex.InferenceSession(model, providers=["cpu_mlas"])
        (y,) = sess.run(None, {"x": np.ones(3, np.float32)})
    assert _ops(sess) == ["Add", "Add"]
    assert np.isnan(y[0]) and y[1] == 2 and np.isnan(y[2])


@pytest.mark.parametrize("op, const, side, removed", [
    ("Add", np.zeros((1, 3), np.float32), 1, True),    # skl2onnx's BernoulliNB zero row
    ("Add", np.zeros((1, 3), np.float32), 0, True),    # 0 + x
    ("Sub", np.zeros(3, np.float32), 1, True),
    ("Mul", np.ones((1, 3), np.float32), 0, True),     # 1 * x
    ("Mul", np.ones((1, 1, 3), np.float32), 0, False),  # raises x's rank
    ("Div", np.ones((2, 3), np.float32), 1, True),     # dims match x's: no broadcast
    ("Sub", np.zeros(3, np.float32), 0, False),        # 0 - x is -x
    ("Div", np.ones(3, np.float32), 0, False),         # 1 / x
    ("Add", np.zeros((2, 2, 3), np.float32), 1, False),  # broadcasts x to a higher rank
    ("Add", np.zeros((2, 3), np.float32), 1, False),   # x's dim 0 symbolic: 2 not known
    ("Add", np.array([0, 0, 1e-7], np.float32), 1, False),
    ("Mul", np.ones(65, np.float32), 1, False),        # larger than the rule reads
])
def test_neutral_constant_operands_are_removed(op, const, side, removed):
    """x + 0, x - 0, x * 1, x / 1 with a small constant tensor become nothing when the
    constant cannot change x's shape or type by broadcasting (onnxruntime's NoopElimination);
    anything else stays, and every case gives the unoptimized session's values."""
    n = const.shape[-1]
    shape = [2, n]
    declared = ["N", n] if const.shape == (2, 3) and not removed else shape
    ins = ["x", "c"] if side == 1 else ["c", "x"]
    nodes = [helper.make_node("Relu", ["x0"], ["x"]), helper.make_node(op, ins, ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x0", F, declared)],
                   [helper.make_tensor_value_info("y", F, None)],
                   [numpy_helper.from_array(const, "c")])
    feed = {"x0": np.random.default_rng(0).standard_normal(shape).astype(np.float32) + 2}
    off, on = _same(model, feed)
    assert _ops(on) == (["Relu"] if removed else ["Relu", op])
    assert on.run(None, feed)[0].shape == off.run(None, feed)[0].shape


@pytest.mark.parametrize("target, kept", [(TensorProto.FLOAT16, ["Cast", "Relu"]),
                                          (TensorProto.FLOAT, ["Relu"])])
def test_castlike_of_a_known_type_becomes_a_cast(target, kept):
    """onnxruntime expands CastLike into the Cast to its target's type; a Cast to the input's
    own type then goes with the no-op chains."""
    like = numpy_helper.from_array(np.zeros(1, helper.tensor_dtype_to_np_dtype(target)), "like")
    nodes = [helper.make_node("CastLike", ["x", "like"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = _model(nodes, [X], [helper.make_tensor_value_info("y", target, None)], [like],
                   opset=19)
    off, on = _same(model, FEED)
    assert _ops(on) == kept
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, FEED)[0]
    got = on.run(None, FEED)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op, value", [("Add", 1e-8), ("Sub", -1e-8), ("Mul", 1.000001),
                                       ("Div", 0.9999999)])
def test_nearly_neutral_scalars_are_kept(op, value):
    """An epsilon is not a zero: x + 1e-8 before a Sqrt (a layer norm written out, as
    onnxruntime's quantization tests build it) was removed as a no-op (onnxscript's x + 0 rule
    takes a scalar within a tolerance), and a row of equal values then gave 0 / 0 = NaN where
    onnxruntime gives the bias. Only exactly neutral constants go."""
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2", "axes"], ["v"]),
             helper.make_node(op, ["v", "c"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])],
                   [helper.make_tensor_value_info("y", F, [2, 3])],
                   [axes, numpy_helper.from_array(np.array(value, np.float32), "c")], opset=18)
    feed = {"x": np.array([[1, 1, 1], [1, 2, 4]], np.float32)}
    off, on = _same(model, feed, Level.ORT_ENABLE_ALL)
    assert op in _ops(on)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = on.run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)   # (NaN where onnxruntime has NaN)
    assert np.isfinite(got).all() == (op in ("Add", "Sub"))


@pytest.mark.parametrize("op, const", [
    ("Add", np.zeros(3, np.float32)), ("Mul", np.ones(3, np.float32)),
    ("Add", np.array(0.0, np.float32)), ("Mul", np.array(1.0, np.float32)),
])
def test_neutral_default_a_feed_may_override_is_kept(op, const):
    """An initializer that is also a graph input (IR 4 on) is a default, not a constant: x + b
    with b = 0 stays, and a fed b counts, as in onnxruntime."""
    model = _model([helper.make_node(op, ["x", "b"], ["y"])],
                   [helper.make_tensor_value_info("x", F, [3]),
                    helper.make_tensor_value_info("b", F, list(const.shape))],
                   [helper.make_tensor_value_info("y", F, None)],
                   [numpy_helper.from_array(const, "b")])
    feed = {"x": np.array([1, 2, 3], np.float32), "b": np.full(const.shape, 5, np.float32)}
    off, on = _same(model, feed)
    assert _ops(on) == [op]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(on.run(None, feed)[0], want)


NX = helper.make_tensor_value_info("x", F, ["N", 3, 4])
NFEED = {"x": np.random.default_rng(1).standard_normal((5, 3, 4)).astype(np.float32)}


@pytest.mark.parametrize("node, inits, removed", [
    (helper.make_node("Concat", ["x"], ["t"], axis=1), {}, True),
    (helper.make_node("Concat", ["x"], ["t"], axis=-3), {}, True),
    # a Reshape to the shape x has: known dims matched, 0 copies, one -1 for N
    (helper.make_node("Reshape", ["x", "s"], ["t"]), {"s": [-1, 3, 4]}, True),
    (helper.make_node("Reshape", ["x", "s"], ["t"]), {"s": [0, 3, 4]}, True),
    (helper.make_node("Reshape", ["x", "s"], ["t"]), {"s": [0, 0, 0]}, True),
    (helper.make_node("Reshape", ["x", "s"], ["t"]), {"s": [-1, 0, 4]}, True),
    (helper.make_node("Reshape", ["x", "s"], ["t"]), {"s": [-1, 4, 3]}, False),
    (helper.make_node("Reshape", ["x", "s"], ["t"]), {"s": [-1, 12]}, False),
    (helper.make_node("Reshape", ["x", "s"], ["t"], allowzero=1), {"s": [-1, 3, 4]}, True),
    # every index of a known axis, in order
    (helper.make_node("Gather", ["x", "i"], ["t"], axis=1), {"i": [0, 1, 2]}, True),
    (helper.make_node("Gather", ["x", "i"], ["t"], axis=-1), {"i": [0, 1, 2, 3]}, True),
    (helper.make_node("Gather", ["x", "i"], ["t"], axis=1), {"i": [0, 2, 1]}, False),
    (helper.make_node("Gather", ["x", "i"], ["t"], axis=1), {"i": [0, 1]}, False),
    (helper.make_node("Gather", ["x", "i"], ["t"], axis=0), {"i": [0, 1, 2, 3, 4]}, False),
])
def test_shape_ops_that_pass_their_input_through_are_removed(node, inits, removed):
    """A single-input Concat, a Reshape to its input's own shape and a Gather of a whole
    axis in order go; the results stay onnxruntime's (a following Relu keeps a node)."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in inits.items()]
    model = _model([node, helper.make_node("Relu", ["t"], ["y"])], [NX], [Y], inits)
    _, on = _same(model, NFEED)
    assert (node.op_type not in _ops(on)) == removed
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, NFEED)[0]
    np.testing.assert_array_equal(on.run(None, NFEED)[0], want)


def test_overridable_gather_indices_are_kept():
    """Indices that are also a graph input (IR 4 on: a default a feed may replace) are not a
    constant: the Gather stays."""
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [NX, i], [Y],
                   [numpy_helper.from_array(np.array([0, 1, 2], np.int64), "i")])
    _, on = _sessions(model)
    assert "Gather" in _ops(on)
    feed = {**NFEED, "i": np.array([2, 1, 0], np.int64)}
    np.testing.assert_array_equal(on.run(None, feed)[0], NFEED["x"][:, ::-1])


def test_constant_nodes_fold_without_a_kernel(monkeypatch):
    """A Constant with a tensor ``value`` becomes an initializer holding that very tensor (no
    kernel built and run for it); the other Constant forms (value_float ...) still fold by
    their kernel; the results are onnxruntime's."""
    from onnxplex.optimizer import _basic

    ran = []
    real = _basic._run_node
    monkeypatch.setattr(_basic, "_run_node", lambda view, *a: ran.append(view.op_type)
                        or real(view, *a))
    t = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "t")
    nodes = [helper.make_node("Constant", [], ["c"], value=t),
             helper.make_node("Constant", [], ["f"], value_float=0.5),
             helper.make_node("Add", ["x", "c"], ["s"]),
             helper.make_node("Mul", ["s", "f"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 4])], [Y])
    _, on = _same(model, FEED)
    assert "Constant" not in _ops(on)
    assert ran == ["Constant"]   # (value_float's, through its kernel)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, FEED)[0]
    np.testing.assert_array_equal(on.run(None, FEED)[0], want)
