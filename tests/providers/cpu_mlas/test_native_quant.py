"""The native integer GEMM of cpu_mlas (``_mlas_native``, providers/cpu_mlas/src) against exact
int64 arithmetic, and the quantized kernels on it (MatMulInteger, MatMulIntegerToFloat,
DynamicQuantizeMatMul, QLinearMatMul) against their numpy paths: bit-identical outputs."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from onnxplex import ProviderContext
from onnxplex.providers.cpu_mlas import _native
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

from ._no_native import without_native
from ._oracle import load_model, node_model

MS = "com.microsoft"
NAT = _native.native()
pytestmark = pytest.mark.skipif(NAT is None, reason="_mlas_native is not built")

ISAS = [i for i in ("scalar", "avx2", "avx512vnni", "amx")
        if NAT is not None and NAT.isa_available(i)]
# M, K, N: odd sizes, sizes past one panel / micro-tile / task, K not a multiple of 4, empty.
SHAPES = [(1, 1, 1), (7, 13, 67), (6, 64, 64), (49, 130, 129), (130, 3, 17), (3, 0, 5),
          (0, 8, 4)]
I8 = (np.uint8, np.int8)


def _ints(rng, dtype, shape, extreme: str | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    if extreme == "min":
        return np.full(shape, info.min, dtype)
    if extreme == "max":
        return np.full(shape, info.max, dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _exact(a, azp, b, bzp) -> np.ndarray:
    a64 = a.astype(np.int64) - (0 if azp is None else azp.astype(np.int64).reshape(-1, 1))
    b64 = b.astype(np.int64) - (0 if bzp is None else bzp.astype(np.int64).reshape(1, -1))
    return (a64 @ b64).astype(np.int32)


@contextlib.contextmanager
def numpy_path(monkeypatch):
    """The kernels as built without the native module."""
    with without_native():
        yield


# --------------------------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("a_type,b_type", [(a, b) for a in I8 for b in I8])
@pytest.mark.parametrize("zp", ["none", "tensor", "per_row_col", "min", "max"])
def test_qgemm_i32_exact(isa, m, k, n, a_type, b_type, zp):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = _ints(rng, a_type, (m, k)), _ints(rng, b_type, (k, n))
    if zp == "none":
        azp = bzp = None
    elif zp == "tensor":
        azp, bzp = _ints(rng, a_type, (1,)), _ints(rng, b_type, (1,))
    elif zp == "per_row_col":
        azp, bzp = _ints(rng, a_type, (m,)), _ints(rng, b_type, (n,))
    else:  # zero points and operands at the extremes of their types
        a, b = _ints(rng, a_type, (m, k), zp), _ints(rng, b_type, (k, n), "min")
        azp = _ints(rng, a_type, (1,), "max" if zp == "min" else "min")
        bzp = _ints(rng, b_type, (n,), "max")
    for pack_threads in (1, 2):  # panels packed on one thread or two: the same B
        packed = NAT.pack_b(b, bzp, isa, pack_threads)
        assert (packed.k, packed.n, packed.isa) == (k, n, isa)
        for threads in (1, 2, 0):
            np.testing.assert_array_equal(NAT.qgemm_i32(a, azp, packed, threads),
                                          _exact(a, azp, b, bzp))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,k,n", SHAPES[:5])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_qgemm_f32_epilogue_bit_exact(isa, m, k, n, per_column, with_bias):
    rng = np.random.default_rng(k)
    a, b = _ints(rng, np.uint8, (m, k)), _ints(rng, np.int8, (k, n))
    azp, bzp = _ints(rng, np.uint8, (1,)), _ints(rng, np.int8, (n,))
    scale = rng.random(n if per_column else 1).astype(np.float32) * np.float32(0.01)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    want = _exact(a, azp, b, bzp).astype(np.float32) * scale
    if bias is not None:
        want = want + bias
    got = NAT.qgemm_f32(a, azp, NAT.pack_b(b, bzp, isa), scale, bias, 2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 67), (33, 70, 129)])
@pytest.mark.parametrize("kind", ["normal", "positive", "negative", "zeros", "wide"])
def test_dynamic_qgemm_matches_dynamic_quantize_linear(isa, m, k, n, kind):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x = {"normal": x, "positive": np.abs(x) + 1, "negative": -np.abs(x) - 0.5,
         "zeros": np.zeros_like(x), "wide": x * np.float32(1e4)}[kind]
    b = _ints(rng, np.int8, (k, n))
    bs = rng.random(n).astype(np.float32)
    y, a_scale, a_zp = NAT.dynamic_qgemm_f32(x, NAT.pack_b(b, None, isa), bs, None, 2)
    # DynamicQuantizeLinear, as ONNX defines it (round half to even)
    lo, hi = min(np.float32(0), x.min()), max(np.float32(0), x.max())
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    q = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.int64)
    assert np.float32(a_scale) == scale and a_zp == int(zp)
    want = ((q - int(zp)) @ b.astype(np.int64)).astype(np.float32) * (scale * bs)
    np.testing.assert_array_equal(y, want)


def test_bad_arguments_are_value_errors():
    b = np.zeros((4, 3), np.int8)
    with pytest.raises(ValueError):
        NAT.pack_b(b, np.zeros(2, np.int8))
    with pytest.raises(ValueError):
        NAT.pack_b(b, None, "no-such-isa")
    with pytest.raises(ValueError):
        NAT.qgemm_i32(np.zeros((2, 5), np.uint8), None, NAT.pack_b(b), 1)
    with pytest.raises(TypeError):
        NAT.pack_b(b.astype(np.int16))


# --------------------------------------------------------------------------------------------
# The kernels: native path == numpy path
# --------------------------------------------------------------------------------------------


def _run(op_type, inputs, const, threads, **kw):
    model = load_model(node_model(op_type, inputs, const_inputs=const, **kw))
    node = model.node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    kernel = config.factory(node, ProviderContext(intra_op_num_threads=threads))
    args = [None if a is None else (node.inputs[i].const if node.inputs[i].const is not None
                                    else a) for i, a in enumerate(inputs)]
    out = kernel(*args)
    return out if isinstance(out, tuple) else (out,)


def _both(monkeypatch, op_type, inputs, const, **kw):
    got = _run(op_type, inputs, const, 2, **kw)
    with numpy_path(monkeypatch):
        want = _run(op_type, inputs, const, 1, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("a_type,b_type", [(a, b) for a in I8 for b in I8])
@pytest.mark.parametrize("a_shape,n", [((7, 13), 5), ((2, 9, 33), 70), ((13,), 3)])
@pytest.mark.parametrize("zp", ["none", "tensor", "row_col"])
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul_integer(monkeypatch, a_type, b_type, a_shape, n, zp, const_b):
    rng = np.random.default_rng(n)
    k = a_shape[-1]
    a, b = _ints(rng, a_type, a_shape), _ints(rng, b_type, (k, n))
    if zp == "none":
        inputs = [a, b]
    elif zp == "tensor":
        inputs = [a, b, _ints(rng, a_type, ()), _ints(rng, b_type, ())]
    else:
        rows = a_shape[-2] if len(a_shape) > 1 else 1
        inputs = [a, b, _ints(rng, a_type, (rows,)), _ints(rng, b_type, (n,))]
    const = (1, 3) if const_b and len(inputs) == 4 else ((1,) if const_b else ())
    _both(monkeypatch, "MatMulInteger", inputs, const, opset=10)


@pytest.mark.parametrize("b_type", I8)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("const_b", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_integer_to_float(monkeypatch, b_type, per_column, const_b, with_bias):
    rng = np.random.default_rng(3)
    k, n = 67, 45
    a, b = _ints(rng, np.uint8, (2, 11, k)), _ints(rng, b_type, (k, n))
    shape = (n,) if per_column else (1,)
    b_s = (rng.random(shape) * 0.01).astype(np.float32)
    inputs = [a, b, np.asarray(0.02, np.float32), b_s, _ints(rng, np.uint8, ()),
              _ints(rng, b_type, shape),
              rng.standard_normal(n).astype(np.float32) if with_bias else None]
    const = (1, 3, 5, 6) if const_b else ()
    _both(monkeypatch, "MatMulIntegerToFloat", inputs, const, domain=MS, opset=17)


@pytest.mark.parametrize("b_type", I8)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("const_b", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("a_shape", [(1, 40), (3, 17, 40), (130, 40)])
def test_dynamic_quantize_matmul(monkeypatch, b_type, per_column, const_b, with_bias,
                                 a_shape):
    rng = np.random.default_rng(5)
    n = 33
    a = (rng.standard_normal(a_shape) * 3).astype(np.float32)
    b = _ints(rng, b_type, (a_shape[-1], n))
    shape = (n,) if per_column else (1,)
    inputs = [a, b, (rng.random(shape) * 0.01).astype(np.float32),
              _ints(rng, b_type, shape),
              rng.standard_normal(n).astype(np.float32) if with_bias else None]
    const = (1, 2, 3, 4) if const_b else ()
    _both(monkeypatch, "DynamicQuantizeMatMul", inputs, const, domain=MS, opset=17)


def test_numpy_fallback_when_disabled(monkeypatch):
    with numpy_path(monkeypatch):
        assert _native.native() is None
    assert _native.native() is NAT
