"""The native RNN / GRU / LSTM time loop (``_mlas_native.rnn_seq_f32``, rnn.h): the same
outputs as the numpy loop it replaces and as onnxruntime, on every configuration it takes
(directions, sequence lengths, initial states, peepholes, clip, linear_before_reset, hidden
sizes off the vector width), NaN where they have NaN, and the numpy loop kept for what it
does not take (other activations, input_forget, float64)."""

from __future__ import annotations

import types

import numpy as np
import onnxruntime as ort
import pytest

from onnxplex.providers.cpu_mlas import rnn
from onnxplex.providers.cpu_mlas._native import native

from ._oracle import assert_same, ort_run, ours
from .test_rnn import _inputs as rnn_inputs

ort.set_default_logger_severity(3)

mod = native()
pytestmark = pytest.mark.skipif(mod is None, reason="the _mlas_native module is not built")

def _inputs(op_type, t, b, i, h, dirs, *, seed, lens=False, init=True, peep=False,
            dtype=np.float32):
    return rnn_inputs(op_type, t, b, i, h, dirs, lens=lens, init=init, peep=peep,
                      rng=np.random.default_rng(seed), dtype=dtype)


class Calls:
    """Counts the native loop's calls (installed as rnn.native's module)."""

    def __init__(self):
        self.n = 0

    def rnn_seq_f32(self, *args, **kwargs):
        self.n += 1
        return mod.rnn_seq_f32(*args, **kwargs)


def _both(monkeypatch, op_type, xs, **attrs):
    """(native loop's outputs, numpy loop's outputs, native calls)."""
    calls = Calls()
    monkeypatch.setattr(rnn, "native", lambda: types.SimpleNamespace(
        rnn_seq_f32=calls.rnn_seq_f32))
    n_out = 3 if op_type == "LSTM" else 2
    got = ours(op_type, xs, n_out, opset=14, const_inputs=[1, 2, 3], **attrs)
    monkeypatch.setattr(rnn, "native", lambda: None)
    want = ours(op_type, xs, n_out, opset=14, const_inputs=[1, 2, 3], **attrs)
    return got, want, calls.n


CASES = [
    # op, direction, hidden, extra attributes, peepholes
    ("RNN", "forward", 16, {}, False),
    ("RNN", "bidirectional", 13, {"clip": 0.8}, False),
    ("GRU", "forward", 24, {}, False),
    ("GRU", "reverse", 9, {"linear_before_reset": 1}, False),
    ("GRU", "bidirectional", 33, {"clip": 1.1}, False),
    ("LSTM", "forward", 32, {}, False),
    ("LSTM", "reverse", 17, {"clip": 0.9}, True),
    ("LSTM", "bidirectional", 40, {}, True),
    ("LSTM", "bidirectional", 8, {"activations": ["Sigmoid", "Tanh", "Tanh"] * 2}, False),
]


@pytest.mark.parametrize("op_type, direction, h, attrs, peep", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{sorted(c[3])}-{c[4]}" for c in CASES])
@pytest.mark.parametrize("lens", [False, True], ids=["full", "seq_lens"])
def test_native_loop_matches_numpy_loop_and_onnxruntime(monkeypatch, op_type, direction, h,
                                                       attrs, peep, lens):
    dirs = 2 if direction == "bidirectional" else 1
    xs = _inputs(op_type, 7, 3, 5, h, dirs, seed=h, lens=lens, peep=peep)
    attrs = dict(hidden_size=h, direction=direction, **attrs)
    got, want, calls = _both(monkeypatch, op_type, xs, **attrs)
    assert calls == dirs
    assert_same(got, want, rtol=2e-5, atol=2e-6)
    theirs = ort_run(op_type, xs, len(got), opset=14, const_inputs=[1, 2, 3], **attrs)
    assert_same(got, theirs, rtol=1e-4, atol=1e-5)


def test_nan_propagates_as_in_the_numpy_loop(monkeypatch):
    xs = _inputs("LSTM", 4, 2, 3, 11, 1, seed=3)
    xs[0][1, 0, 2] = np.nan   # batch entry 0 from step 1 on
    got, want, calls = _both(monkeypatch, "LSTM", xs, hidden_size=11)
    assert calls == 1
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    assert np.isnan(got[0][1:, 0, 0]).all() and not np.isnan(got[0][:, 0, 1]).any()


@pytest.mark.parametrize("op_type, attrs, dtype", [
    ("RNN", {"activations": ["Relu"]}, np.float32),
    ("GRU", {"activations": ["HardSigmoid", "Tanh"], "activation_alpha": [0.3]}, np.float32),
    ("LSTM", {"input_forget": 1}, np.float32),
    ("LSTM", {}, np.float64),
])
def test_numpy_loop_keeps_what_the_native_loop_does_not_take(monkeypatch, op_type, attrs,
                                                             dtype):
    xs = _inputs(op_type, 4, 2, 3, 6, 1, seed=5, dtype=dtype)
    got, want, calls = _both(monkeypatch, op_type, xs, hidden_size=6, **attrs)
    assert calls == 0
    assert_same(got, want, rtol=0, atol=0)


def test_binding_refuses_bad_arrays():
    h = np.zeros((2, 4), np.float32)
    y = np.zeros((3, 2, 4), np.float32)
    xw = np.zeros((3, 2, 16), np.float32)
    rt = np.zeros((4, 16), np.float32)
    c = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="cell must be"):
        mod.rnn_seq_f32(5, xw, rt, h, c, y, None, None, None, 0.0, False)
    with pytest.raises(ValueError, match="rt: expected a C-contiguous float32"):
        mod.rnn_seq_f32(2, xw, rt[:, ::2], h, c, y, None, None, None, 0.0, False)
    with pytest.raises(ValueError, match="h must be writeable"):
        ro = h.copy()
        ro.flags.writeable = False
        mod.rnn_seq_f32(2, xw, rt, ro, c, y, None, None, None, 0.0, False)
    with pytest.raises(ValueError, match="G\\*H"):
        mod.rnn_seq_f32(1, xw, rt, h, None, y, None, None, None, 0.0, False)
    with pytest.raises(ValueError, match="one length per batch entry"):
        mod.rnn_seq_f32(2, xw, rt, h, c, y, None, None, np.array([1, 2, 3]), 0.0, False)
    mod.rnn_seq_f32(2, xw, rt, h, c, y, None, None, np.array([1, 3]), 0.0, False)
    assert (y == 0).all()   # zero inputs and states: sigmoid(0) * tanh(0) = 0


@pytest.mark.parametrize("cell, lbr, peep", [(0, False, False), (1, False, False),
                                             (1, True, False), (2, False, True)])
@pytest.mark.parametrize("b, h", [(1, 21), (3, 37), (5, 21), (8, 40)])
def test_every_isa_variant_agrees_with_the_portable_one(cell, lbr, peep, b, h):
    """The variant a test run takes is this CPU's best: the others (those this CPU runs) are
    compared with the portable one (libm's exp and tanh, the generic product) directly, over
    batch sizes that take each of the x86 product's row blockings and column tails."""
    rng = np.random.default_rng(cell)
    t = 5
    g = (1, 3, 4)[cell]
    xw = (rng.standard_normal((t, b, g * h)) * 2).astype(np.float32)
    xw[0, 0, :3] = [0.0, 1e-6, -40.0]   # tanh/sigmoid near 0 and saturated
    rt = (rng.standard_normal((h, g * h)) * 0.3).astype(np.float32)
    rbh = rng.standard_normal(h).astype(np.float32) if cell == 1 else None
    pp = rng.standard_normal(3 * h).astype(np.float32) if peep else None
    lens = rng.integers(1, t + 1, b)

    def run(isa):
        hs = rng_state.copy()
        c = rng_state.copy() if cell == 2 else None
        y = np.empty((t, b, h), np.float32)
        mod.rnn_seq_f32(cell, xw, rt, hs, c, y, rbh, pp, lens, 0.0, lbr, isa)
        return y, hs, c

    rng_state = rng.standard_normal((b, h)).astype(np.float32)
    ref = run("portable")
    isas = [i for i in ("avx2", "avx512") if _runs(i)]
    for isa in isas:
        for got, want in zip(run(isa), ref):
            if want is not None:
                np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6, err_msg=isa)
    with pytest.raises(ValueError, match="not one this CPU runs"):
        run("sse9")


def _runs(isa):
    try:
        mod.rnn_seq_f32(0, np.zeros((1, 1, 8), np.float32), np.zeros((8, 8), np.float32),
                        np.zeros((1, 8), np.float32), None, np.zeros((1, 1, 8), np.float32),
                        None, None, None, 0.0, False, isa)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("op_type, peep", [("GRU", False), ("LSTM", False), ("LSTM", True)])
def test_directions_run_concurrently_with_the_same_results(monkeypatch, op_type, peep):
    """With two intra-op threads a bidirectional node's directions run at once, in one native
    call on the native pool (rnn_seqs_f32): the outputs are those of one thread (a native
    call per direction), to the bit, and onnxruntime's."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxplex

    h, g = 24, GATES_OF[op_type]
    rng = np.random.default_rng(4)
    shapes = [("W", (2, g * h, 8)), ("R", (2, g * h, h)), ("B", (2, 2 * g * h))]
    names = ["X", "W", "R", "B"]
    if peep:
        shapes.append(("P", (2, 3 * h)))
        names += ["", "", "", "P"]
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in shapes]
    outs = ["Y", "Y_h"] + (["Y_c"] if op_type == "LSTM" else [])
    node = helper.make_node(op_type, names, outs, hidden_size=h, direction="bidirectional")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [9, 3, 8])], [helper.make_tensor_value_info(
            o, TensorProto.FLOAT, None) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    x = rng.standard_normal((9, 3, 8)).astype(np.float32)
    calls = {"one": 0, "together": 0}

    def one(*args, **kwargs):
        calls["one"] += 1
        return mod.rnn_seq_f32(*args, **kwargs)

    def together(*args, **kwargs):
        calls["together"] += 1
        return mod.rnn_seqs_f32(*args, **kwargs)

    monkeypatch.setattr(rnn, "native", lambda: types.SimpleNamespace(rnn_seq_f32=one,
                                                                      rnn_seqs_f32=together))
    results = []
    for threads in (1, 2):
        so = onnxplex.SessionOptions()
        so.intra_op_num_threads = threads
        results.append(onnxplex.InferenceSession(model.SerializeToString(), so).run(
            None, {"X": x}))
    assert calls == {"one": 2, "together": 1}, calls
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"X": x})
    assert_same(results[1], theirs, rtol=1e-4, atol=1e-5)


def test_directions_together_refuses_bad_jobs():
    h = np.zeros((2, 4), np.float32)
    y = np.zeros((3, 2, 4), np.float32)
    xw = np.zeros((3, 2, 12), np.float32)
    rt = np.zeros((4, 12), np.float32)
    with pytest.raises(ValueError, match="each direction"):
        mod.rnn_seqs_f32(1, [(xw, rt, h)], 0.0, False, 2)
    with pytest.raises(ValueError, match="rt"):
        mod.rnn_seqs_f32(1, [(xw, rt[:2], h, None, y, None, None, False)], 0.0, False, 2)


GATES_OF = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.mark.parametrize("cell,gates", [(0, 1), (1, 3), (2, 4)])
def test_strided_views_and_reverse_are_the_gathered_loop(cell, gates):
    """The loop reads a direction's projections as a view of both directions' array
    (``xw[:, :, d]``) and writes its slice of Y (``y[:, d]``) in place; ``reverse`` steps from
    the last time step: the same bits as the contiguous loop over the time-reversed copies."""
    rng = np.random.default_rng(cell)
    t, b, h = 7, 3, 8
    gh = gates * h
    both = rng.standard_normal((t, b, 2, gh)).astype(np.float32)
    rt = (rng.standard_normal((h, gh)) * 0.3).astype(np.float32)
    h0 = rng.standard_normal((b, h)).astype(np.float32)
    c0 = rng.standard_normal((b, h)).astype(np.float32) if cell == 2 else None
    y_both = np.zeros((t, 2, b, h), np.float32)
    hv, cv = h0.copy(), None if c0 is None else c0.copy()
    mod.rnn_seq_f32(cell, both[:, :, 1], rt, hv, cv, y_both[:, 1], None, None, None, 0.0,
                    False, reverse=True)
    hw, cw = h0.copy(), None if c0 is None else c0.copy()
    y_ref = np.empty((t, b, h), np.float32)
    mod.rnn_seq_f32(cell, np.ascontiguousarray(both[::-1, :, 1]), rt, hw, cw, y_ref, None,
                    None, None, 0.0, False)
    np.testing.assert_array_equal(y_both[:, 1], y_ref[::-1])
    np.testing.assert_array_equal(hv, hw)
    assert not y_both[:, 0].any()   # the other direction's slice untouched
    with pytest.raises(ValueError, match="reverse runs whole sequences"):
        mod.rnn_seq_f32(cell, both[:, :, 0], rt, h0.copy(), None if c0 is None else c0.copy(),
                        y_ref, None, None, np.full(b, t, np.int64), 0.0, False, reverse=True)
    with pytest.raises(ValueError, match="contiguous rows"):
        mod.rnn_seq_f32(cell, both.reshape(t, b, 2 * gh)[:, :, ::2], rt, h0.copy(),
                        None if c0 is None else c0.copy(), y_ref, None, None, None, 0.0, False)


@pytest.mark.parametrize("cell", [0, 1, 2])
def test_pack_cache_gives_the_uncached_results_per_variant_and_batch(cell):
    """An RnnPackCache keeps R^T as each variant packs it for each batch size (a GRU's h-gate
    product apart): calls given one get the uncached results to the bit, whatever variant and
    batch size came before, and it holds one entry per (variant, batch size, product)."""
    rng = np.random.default_rng(10 + cell)
    t, h, g = 4, 19, (1, 3, 4)[cell]
    rt = (rng.standard_normal((h, g * h)) * 0.3).astype(np.float32)
    cache = mod.RnnPackCache()
    assert cache.size == 0

    def run(b, isa, with_cache):
        local = np.random.default_rng(b)
        xw = local.standard_normal((t, b, g * h)).astype(np.float32)
        hs = local.standard_normal((b, h)).astype(np.float32)
        c = local.standard_normal((b, h)).astype(np.float32) if cell == 2 else None
        y = np.empty((t, b, h), np.float32)
        mod.rnn_seq_f32(cell, xw, rt, hs, c, y, None, None, None, 0.0, False, isa,
                        cache=cache if with_cache else None)
        return y, hs

    isas = ["portable"] + [i for i in ("avx2", "avx512") if _runs(i)]
    for isa in isas:
        for b in (1, 5, 1):   # (batch 1 again: its entries from the first call)
            for got, want in zip(run(b, isa, True), run(b, isa, False)):
                np.testing.assert_array_equal(got, want, err_msg=f"{isa} batch {b}")
    assert cache.size == len(isas) * 2 * 2   # batch sizes 1 and 5; gates and h products
    for b in range(2, 14):   # many batch sizes: emptied now and then, not grown
        for got, want in zip(run(b, "", True), run(b, "", False)):
            np.testing.assert_array_equal(got, want, err_msg=f"batch {b}")
        assert cache.size <= 16
    with pytest.raises(TypeError, match="RnnPackCache"):
        mod.rnn_seq_f32(cell, np.zeros((1, 1, g * h), np.float32), rt,
                        np.zeros((1, h), np.float32),
                        np.zeros((1, h), np.float32) if cell == 2 else None,
                        np.zeros((1, 1, h), np.float32), None, None, None, 0.0, False,
                        cache=object())


@pytest.mark.parametrize("op_type", ["GRU", "LSTM"])
@pytest.mark.parametrize("r_constant", [True, False], ids=["R_initializer", "R_fed"])
def test_kernel_caches_r_packing_only_for_a_constant_r(monkeypatch, op_type, r_constant):
    """The kernel hands each direction's cache to the native loop when R is an initializer,
    and none when R is fed at run time: a second run with another R (and another batch size)
    then gives that R's results, which a cache would have kept stale."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxplex

    h, g, i = 12, GATES_OF[op_type], 6
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((2, g * h, i)) * 0.3).astype(np.float32)
    r1, r2 = ((rng.standard_normal((2, g * h, h)) * 0.3).astype(np.float32) for _ in "12")
    inits = [numpy_helper.from_array(w, "W")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, None, i])]
    if r_constant:
        inits.append(numpy_helper.from_array(r1, "R"))
    else:
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, [2, g * h, h]))
    outs = ["Y", "Y_h"]
    node = helper.make_node(op_type, ["X", "W", "R"], outs, hidden_size=h,
                            direction="bidirectional")
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(
        o, TensorProto.FLOAT, None) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    given = []

    class Spy:
        RnnPackCache = mod.RnnPackCache

        def rnn_seq_f32(self, *args, **kwargs):
            given.append(kwargs.get("cache"))
            return mod.rnn_seq_f32(*args, **kwargs)

    monkeypatch.setattr(rnn, "native", lambda: Spy())
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 1   # (one native call a direction)
    sess = onnxplex.InferenceSession(model.SerializeToString(), so)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [(2, r1), (3, r1 if r_constant else r2), (2, r1 if r_constant else r2)]
    for batch, r in runs:
        feeds = {"X": rng.standard_normal((5, batch, i)).astype(np.float32)}
        if not r_constant:
            feeds["R"] = r
        assert_same(sess.run(None, feeds), ref.run(None, feeds), rtol=1e-4, atol=1e-5)
    assert len(given) == 2 * len(runs)
    if r_constant:
        assert all(isinstance(c, mod.RnnPackCache) for c in given)
        assert given[0] is given[2] is given[4] and given[1] is given[3] is not given[0]
        assert given[0].size == 2 * 2   # batch sizes 2 and 3, each its two products
    else:
        assert given == [None] * len(given)
