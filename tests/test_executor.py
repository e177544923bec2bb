"""The execution plan: intermediates released after their last reader, cancellation."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from graphs import chain, diamond_abc

import onnxplex
from onnxplex.framework import executor as _executor


@pytest.fixture(autouse=True)
def _loops(both_loops):
    """Every test here runs on the executor's C loop and on its Python loop."""


def test_intermediates_are_released_after_last_use():
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp"]))
    plan = sess._exec
    live = []
    slots = _executor.feed_slots(plan, {"x": np.ones((2, 3), np.float32)})

    def record(step, t0, t1, ins, outs):
        live.append(sum(v is not None for v in slots))

    _executor.run_sequential(plan, slots, record=record)
    # the input and at most two intermediates are alive at any time, never the whole chain
    assert max(live) <= 3
    assert [i for i, v in enumerate(slots) if v is not None] == [plan.output_slots["y"]]


def test_run_options_terminate_cancels():
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]))
    ro = onnxplex.RunOptions()
    ro.terminate = True
    with pytest.raises(onnxplex.OnnxplexError, match="cancelled"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)}, ro)
    ro.terminate = False
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)}, ro)[0].shape == (2, 3)


class _Faulty(onnxplex.ExecutionProvider):
    """Claims Relu; its kernel misbehaves in the way named by option ``mode``."""

    name = "faulty"
    option_specs = {"mode": onnxplex.Option("raise", str)}

    def get_capability(self, graph):
        return onnxplex.Capability(tuple(onnxplex.NodeGroup((n.index,)) for n in graph.nodes
                                         if n.op_type == "Relu"))

    def compile(self, subgraph):
        mode = self.options["mode"]

        def kernel(x):
            if mode == "raise" and x.sum() < 0:
                raise ValueError("negative input")
            if mode == "dtype":
                return x.astype(np.float64)
            if mode == "shape":
                return x[:1]
            if mode == "narrow" and x.shape[0] == 4:   # a wrong width, for batches of 4 only
                return np.maximum(x, 0)[:, :1]
            if mode == "count":
                return ()
            return np.maximum(x, 0)

        return kernel


@pytest.fixture
def faulty():
    onnxplex.register_provider(_Faulty)
    yield
    onnxplex.framework.plugins.unregister_provider("faulty")


def test_kernel_error_names_node_op_provider_and_session_survives(faulty):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]), providers=["faulty"])
    with pytest.raises(onnxplex.KernelExecutionError,
                       match=r"node 'A' \(Relu\) on provider faulty failed: ValueError: negative"):
        sess.run(None, {"x": -np.ones((2, 3), np.float32)})
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


def test_outputs_with_symbolic_dims_are_checked_on_every_run(faulty):
    """A shape that passed is remembered per output (one comparison on later runs); another
    batch size is checked again, and a wrong fixed dim is caught after good runs."""
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"], shape=("batch", 3)),
                                     providers=[("faulty", {"mode": "narrow"}), "cpu_mlas"])
    for n in (2, 2, 5):
        assert sess.run(None, {"x": np.ones((n, 3), np.float32)})[0].shape == (n, 3)
    for _ in range(3):   # (every time: a wrong shape is never remembered as a good one)
        with pytest.raises(onnxplex.KernelExecutionError,
                           match=r"node 'A' \(Relu\) on provider faulty: output 0 has shape "
                                 r"\[4, 1\], declared \['batch', 3\]"):
            sess.run(None, {"x": np.ones((4, 3), np.float32)})
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


@pytest.mark.parametrize("mode, message", [
    ("dtype", "has dtype float64, declared float"),
    ("shape", r"has shape \[1, 3\], declared \[2, 3\]"),
    ("count", r"returned 0 output\(s\), expected 1"),
])
def test_wrong_kernel_outputs_are_caught(faulty, mode, message):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]),
                                     providers=[("faulty", {"mode": mode})])
    with pytest.raises(onnxplex.KernelExecutionError, match=message) as e:
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert e.value.provider == "faulty" and e.value.node == "A"


# ---- the compiled plan (a plain run: no cancellation, no profiling) --------------------------


class _Probe(onnxplex.ExecutionProvider):
    """Claims every node; its kernels apply the node's op with numpy and note, per call, the
    intermediates still alive (weak references to every array a kernel returned)."""

    name = "probe"
    option_specs = {"mode": onnxplex.Option("plain", str)}
    OPS = {"Relu": lambda x: np.maximum(x, 0), "Neg": np.negative, "Abs": np.abs,
           "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh, "Exp": np.exp}

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.made: list = []
        self.alive: list[int] = []

    def get_capability(self, graph):
        return onnxplex.Capability(tuple(onnxplex.NodeGroup((n.index,)) for n in graph.nodes))

    def compile(self, subgraph):
        import weakref
        fn, mode = self.OPS[subgraph.nodes[0].op_type], self.options["mode"]

        def kernel(x):
            self.alive.append(sum(r() is not None for r in self.made))
            y = fn(x)
            if mode == "scalar":   # a numpy scalar: kept as a 0-d array
                return y.reshape(-1)[0]
            if mode == "tuple":    # one output as a 1-tuple
                return (y,)
            self.made.append(weakref.ref(y))
            return y

        return kernel


@pytest.fixture
def probe():
    onnxplex.register_provider(_Probe)
    yield
    onnxplex.framework.plugins.unregister_provider("probe")


def test_compiled_plan_releases_intermediates(probe):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp"]),
                                     providers=["probe"])
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    (y,) = sess.run(None, {"x": x})
    prov = sess._providers[0]
    # each kernel sees at most its own input alive among the intermediates (the one before
    # was dropped when its reader returned), never the chain
    assert max(prov.alive) <= 1
    assert sess._exec._runner is not None
    np.testing.assert_allclose(y, np.exp(np.abs(-np.tanh(1 / (1 + np.exp(-np.maximum(x, 0)))))),
                               rtol=1e-6)


@pytest.mark.parametrize("mode", ["scalar", "tuple"])
def test_compiled_plan_settles_unusual_returns(probe, mode):
    shape = () if mode == "scalar" else (2, 3)
    sess = onnxplex.InferenceSession(chain(["Relu", "Neg"], shape=shape),
                                     providers=[("probe", {"mode": mode})])
    x = np.full(shape, 2.0, np.float32)
    (y,) = sess.run(None, {"x": x})
    assert type(y) is np.ndarray and y.shape == shape and (y == -2).all()


def test_compiled_plan_matches_the_step_loop():
    """Same outputs as the step-by-step loop (which profiling and cancellation take), and the
    same intermediates released."""
    sess = onnxplex.InferenceSession(diamond_abc())
    plan = sess._exec
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    slots_a = _executor.feed_slots(plan, {"x": x})
    slots_b = _executor.feed_slots(plan, {"x": x})
    _executor.run_sequential(plan, slots_a)                           # compiled
    _executor.run_sequential(plan, slots_b, cancelled=lambda: False)  # step loop
    out = plan.output_slots["y"]
    np.testing.assert_array_equal(slots_a[out], slots_b[out])
    assert [v is None for v in slots_a] == [v is None for v in slots_b]


def test_compiled_plan_error_names_the_step(faulty):
    sess = onnxplex.InferenceSession(chain(["Tanh", "Relu", "Sigmoid"]),
                                     providers=["faulty", "cpu_mlas"])
    with pytest.raises(onnxplex.KernelExecutionError,
                       match=r"node 'B' \(Relu\) on provider faulty failed: ValueError") as e:
        sess.run(None, {"x": -np.ones((2, 3), np.float32)})
    assert e.value.node == "B" and isinstance(e.value.__cause__, ValueError)


def test_plan_constants_carry_numpy_canonical_dtypes():
    """onnx-ir's arrays are little-endian ``<f4``: equal to numpy's float32 but another dtype
    object, which a ufunc's result inherits. Constants are read as views with the canonical
    dtype (what the plan holds and kernels capture), so outputs computed from them pass the
    plan's identity test."""
    from onnx import TensorProto, helper, numpy_helper
    c = numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")
    g = helper.make_graph([helper.make_node("Add", ["c", "x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                          initializer=[c])
    sess = onnxplex.InferenceSession(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)]), providers=["cpu_mlas"])
    plan = sess._exec
    for v in plan.constants.values():
        assert v.dtype is np.dtype(v.dtype.type) and not v.flags.writeable
    (y,) = sess.run(None, {"x": np.ones(3, np.float32)})
    assert y.dtype is np.dtype(np.float32) and y.tolist() == [1, 2, 3]


def test_plan_takes_the_loop_in_use(both_loops):
    sess = onnxplex.InferenceSession(chain(["Relu", "Neg"]))
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    native = type(sess._exec._runner).__module__ == "onnxplex._runloop"
    assert native == (both_loops == "native loop")


def test_kernel_interrupt_passes_unattributed(probe):
    """A KeyboardInterrupt from a kernel is not a kernel failure: it reaches the caller as it
    is (both loops catch Exception and SystemExit only); a kernel's sys.exit() is attributed."""
    sess = onnxplex.InferenceSession(chain(["Relu", "Neg"]), providers=["probe"])
    x = np.ones((2, 3), np.float32)
    for exc, expected in ((KeyboardInterrupt, KeyboardInterrupt),
                          (SystemExit, onnxplex.KernelExecutionError)):
        def boom(_, exc=exc):
            raise exc()
        _Probe.OPS["Neg"], saved = boom, _Probe.OPS["Neg"]
        try:
            fresh = onnxplex.InferenceSession(chain(["Relu", "Neg"]), providers=["probe"])
            with pytest.raises(expected):
                fresh.run(None, {"x": x})
        finally:
            _Probe.OPS["Neg"] = saved
    assert (sess.run(None, {"x": x})[0] == -1).all()


# ---- onnxplex._runloop.Runner itself ---------------------------------------------------------

runloop = pytest.importorskip("onnxplex._runloop") if _executor._runloop is None \
    else _executor._runloop


def _fail(i, e):
    raise RuntimeError(f"step {i}") from e


def test_runner_rejects_malformed_plans_and_slots():
    R = runloop.Runner
    with pytest.raises(TypeError, match="1- or 7-tuple"):
        R(2, np.ndarray, _fail, [(np.negative, (0,))])
    with pytest.raises(ValueError, match="input slot 5 out of range"):
        R(2, np.ndarray, _fail, [(np.negative, (5,), 1, None, None, np.asarray, ())])
    with pytest.raises(ValueError, match="output slot 2 out of range"):
        R(2, np.ndarray, _fail, [(np.negative, (0,), 2, None, None, np.asarray, ())])
    with pytest.raises(ValueError, match="released slot -1 out of range"):
        R(2, np.ndarray, _fail, [(np.negative, (0,), 1, None, None, np.asarray, (-1,))])
    with pytest.raises(TypeError, match="not callable"):
        R(2, np.ndarray, _fail, [(3,)])
    with pytest.raises(TypeError, match="must be numpy.ndarray"):   # (its struct is read)
        R(2, np.matrix, _fail, [])
    run = R(2, np.ndarray, _fail, [(np.negative, (0,), 1, [None], None, np.asarray, (0,))])
    with pytest.raises(ValueError, match="3 slots given, the plan has 2"):
        run([np.ones(2), None, None])
    with pytest.raises(TypeError):
        run((np.ones(2), None))


def test_runner_checks_and_settles_like_the_python_loop():
    """Omitted inputs are None; a result of another shape or dtype, or not an array, goes to
    the settle function; released slots become None; a settle error is attributed."""
    seen = []

    def settle(r):
        seen.append(r)
        return np.asarray(r, np.float32)

    def kernel(a, b):
        assert b is None
        return a * 2

    cell = [(3,)]
    run = runloop.Runner(3, np.ndarray, _fail, [
        (kernel, (0, -1), 1, cell, np.dtype(np.float32), settle, (0,)),
        (lambda s: s.__setitem__(2, s[1] + 1),),   # a general step: call(slots)
    ])
    slots = [np.ones(3, np.float32), None, None]
    run(slots)
    assert slots[0] is None and (slots[1] == 2).all() and (slots[2] == 3).all() and not seen
    slots = [np.ones(3, np.float64), None, None]   # float64 result: settled
    run(slots)
    assert len(seen) == 1 and slots[1].dtype == np.float32
    slots = [np.ones(4, np.float32), None, None]   # another shape: settled
    run(slots)
    assert len(seen) == 2
    slots = [np.float32(2), None, None]            # a numpy scalar: settled
    run(slots)
    assert len(seen) == 3 and type(slots[1]) is np.ndarray

    def bad(r):
        raise ValueError("no")

    run = runloop.Runner(2, np.ndarray, _fail, [(np.negative, (0,), 1, [(1,)], None, bad, ())])
    with pytest.raises(RuntimeError, match="step 0") as e:
        run([np.ones(2), None])
    assert isinstance(e.value.__cause__, ValueError)


def test_runner_requires_fail_to_raise():
    run = runloop.Runner(2, np.ndarray, lambda i, e: None,
                         [(lambda x: 1 / 0, (0,), 1, None, None, np.asarray, ())])
    with pytest.raises(SystemError, match="fail\\(\\) returned"):
        run([np.ones(2), None])


def test_runner_holds_no_references_after_release():
    import gc
    import weakref

    class K:   # a kernel that can be weakly referenced
        def __call__(self, x):
            return -x

    k = K()
    ref = weakref.ref(k)
    run = runloop.Runner(2, np.ndarray, _fail, [(k, (0,), 1, None, None, np.asarray, ())])
    x = np.ones(4)
    before = (sys.getrefcount(x), sys.getrefcount(np.ndarray))
    for _ in range(100):
        run([x, None])
    assert (sys.getrefcount(x), sys.getrefcount(np.ndarray)) == before
    del k, run
    gc.collect()
    assert ref() is None
