"""cpu_mlas Gemm, FusedGemm and MatMul on small problems (np.dot on a prepared copy of the
constant weight), single rows of larger weights (gemv) and, for contrast, problems large enough
for the native GEMM or the split: every attribute combination against numpy, and which path
each shape takes."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplex.providers.cpu_mlas import _blas, linalg

from ._oracle import ours

MS = "com.microsoft"
RNG = np.random.default_rng(11)
TOL = dict(rtol=1e-4, atol=1e-4)

# (M, K, N): tiny, one row, one row of a weight above _GEMV_MIN_WEIGHT, one column above
# _SMALL_MACS, above _SMALL_MACS
SIZES = {"tiny": (3, 4, 5), "row": (1, 10, 32), "gemv": (1, 128, 160), "column": (1700, 20, 1),
         "large": (64, 32, 48)}
C_KINDS = ["none", "n", "1n", "mn", "m1", "scalar"]  # C absent, [N], [1, N], [M, N], ...
ALPHA_BETA = [(1.0, 1.0), (-2.0, 0.5), (0.5, 0.0)]


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def c_of(kind: str, m: int, n: int, dtype=np.float32) -> np.ndarray | None:
    shape = {"none": None, "n": (n,), "1n": (1, n), "mn": (m, n), "m1": (m, 1), "scalar": ()}[kind]
    return None if shape is None else rand(*shape, dtype=dtype)


def gemm_ref(a, b, c, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    y = alpha * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64))
    return y if c is None else y + beta * c.astype(np.float64)


def gemm_inputs(m, k, n, trans_a, trans_b, c_kind, dtype=np.float32):
    a = rand(k, m, dtype=dtype) if trans_a else rand(m, k, dtype=dtype)
    b = rand(n, k, dtype=dtype) if trans_b else rand(k, n, dtype=dtype)
    return a, b, c_of(c_kind, m, n, dtype)


@pytest.mark.parametrize("const_c", [True, False], ids=["const_c", "runtime_c"])
@pytest.mark.parametrize("c_kind", C_KINDS)
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("size", list(SIZES))
def test_gemm_every_attribute(size, trans_a, trans_b, alpha, beta, c_kind, const_c):
    m, k, n = SIZES[size]
    a, b, c = gemm_inputs(m, k, n, trans_a, trans_b, c_kind)
    inputs = [a, b] if c is None else [a, b, c]
    const = [1, 2] if const_c else [1]
    (y,) = ours("Gemm", inputs, opset=13, alpha=alpha, beta=beta, transA=trans_a,
                transB=trans_b, const_inputs=const)
    assert y.dtype == np.float32 and y.shape == (m, n)
    np.testing.assert_allclose(y, gemm_ref(a, b, c, alpha, beta, trans_a, trans_b), **TOL)


@pytest.mark.parametrize("const_b", [True, False])
@pytest.mark.parametrize("size", list(SIZES))
def test_gemm_runtime_b(size, const_b):
    m, k, n = SIZES[size]
    a, b, c = gemm_inputs(m, k, n, 0, 1, "n")
    (y,) = ours("Gemm", [a, b, c], opset=13, alpha=0.5, beta=2.0, transB=1,
                const_inputs=[1, 2] if const_b else [2])
    np.testing.assert_allclose(y, gemm_ref(a, b, c, 0.5, 2.0, 0, 1), **TOL)


def relu(y):
    return np.maximum(y, 0)


ACTIVATIONS = {
    "Relu": ({}, relu),
    "LeakyRelu": ({"activation_alpha": 0.1}, lambda y: np.where(y < 0, 0.1 * y, y)),
    "Tanh": ({}, np.tanh),
}


@pytest.mark.parametrize("const_c", [True, False], ids=["const_c", "runtime_c"])
@pytest.mark.parametrize("c_kind", ["none", "n", "mn"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("size", list(SIZES))
def test_fused_gemm(size, activation, c_kind, const_c):
    m, k, n = SIZES[size]
    a, b, c = gemm_inputs(m, k, n, 0, 1, c_kind)
    params, fn = ACTIVATIONS[activation]
    inputs = [a, b] if c is None else [a, b, c]
    (y,) = ours("FusedGemm", inputs, domain=MS, activation=activation, alpha=0.5, beta=1.5,
                transB=1, const_inputs=[1, 2] if const_c else [1], **params)
    np.testing.assert_allclose(y, fn(gemm_ref(a, b, c, 0.5, 1.5, 0, 1)), **TOL)


@pytest.mark.parametrize("dtype,tol", [(np.float16, dict(rtol=2e-2, atol=2e-2)),
                                       (np.float64, dict(rtol=1e-10, atol=1e-10))])
@pytest.mark.parametrize("size", ["tiny", "row", "gemv"])
def test_gemm_float16_and_double(size, dtype, tol):
    m, k, n = SIZES[size]
    a, b, c = gemm_inputs(m, k, n, 1, 1, "1n", dtype=dtype)
    (y,) = ours("Gemm", [a, b, c], opset=13, alpha=0.25, beta=0.5, transA=1, transB=1,
                const_inputs=[1, 2])
    assert y.dtype == dtype
    np.testing.assert_allclose(y.astype(np.float64), gemm_ref(a, b, c, 0.25, 0.5, 1, 1), **tol)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (2.0, 3.0), (1.0, 0.0)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(1, 6, 7), (4, 5, 3)])
def test_gemm_integer_small(shape, dtype, alpha, beta):
    m, k, n = shape
    a = RNG.integers(-5, 5, (m, k)).astype(dtype)
    b = RNG.integers(-5, 5, (k, n)).astype(dtype)
    c = RNG.integers(-5, 5, (n,)).astype(dtype)
    (y,) = ours("Gemm", [a, b, c], opset=13, alpha=alpha, beta=beta, const_inputs=[1, 2])
    want = (alpha * (a.astype(np.float64) @ b) + beta * c).astype(dtype)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, want)


MATMUL_A = [(10,), (1, 10), (3, 10), (2, 3, 10), (1, 1, 10), (0, 10), (0, 3, 10), (2, 0, 10)]


@pytest.mark.parametrize("n", [4, 32, 1024])
@pytest.mark.parametrize("a_shape", MATMUL_A)
def test_matmul_const_b(a_shape, n):
    a, b = rand(*a_shape), rand(10, n)
    (y,) = ours("MatMul", [a, b], opset=13, const_inputs=[1])
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, **TOL)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("a_shape", [(6,), (1, 6), (2, 2, 6)])
def test_matmul_const_b_dtypes(a_shape, dtype):
    a = (RNG.integers(-4, 4, a_shape) if dtype in (np.int32, np.int64) else rand(*a_shape))
    b = RNG.integers(-4, 4, (6, 5))
    a, b = a.astype(dtype), b.astype(dtype)
    (y,) = ours("MatMul", [a, b], opset=13, const_inputs=[1])
    assert y.dtype == dtype
    np.testing.assert_allclose(y.astype(np.float64), np.matmul(a.astype(np.float64), b),
                               rtol=1e-3, atol=1e-3)


def test_matmul_small_path_still_rejects_a_wrong_k():
    # [2, 3, 8] would reshape to [6, 4] rows: the small path must not take it
    with pytest.raises(Exception):  # noqa: B017, PT011 - numpy's or the native GEMM's error
        ours("MatMul", [rand(2, 3, 8), rand(4, 5)], opset=13, const_inputs=[1])


def test_small_output_is_fresh_and_writable():
    a, b, c = rand(1, 4), rand(4, 3), rand(3)
    for op, inputs in (("Gemm", [a, b, c]), ("MatMul", [a, b])):
        (y1,) = ours(op, inputs, opset=13, const_inputs=[1, 2])
        y1[...] = 7.0  # must not alter the prepared weight or bias
        (y2,) = ours(op, inputs, opset=13, const_inputs=[1, 2])
        np.testing.assert_allclose(y2, gemm_ref(a, b, c if op == "Gemm" else None), **TOL)


# --------------------------------------------------------------------------------------------
# Which path a shape takes
# --------------------------------------------------------------------------------------------


@pytest.fixture
def calls(monkeypatch):
    """Names of the _blas GEMM entry points the kernels call (np.dot paths call neither; a
    bound native GEMM plan a kernel calls counts as ``gemm``)."""
    seen: list[str] = []
    for name in ("gemm", "matmul"):
        real = getattr(_blas, name)

        def spy(*args, _real=real, _name=name, **kw):
            seen.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(_blas, name, spy)
    real_plan = _blas.gemm_plan

    def plan_spy(*args, **kw):   # kernels that call a bound native GEMM (a float32 Gemm)
        plan = real_plan(*args, **kw)
        if plan is None:
            return None

        def spy(*a):
            seen.append("gemm")
            return plan(*a)

        return spy

    monkeypatch.setattr(_blas, "gemm_plan", plan_spy)
    return seen


NATIVE = _blas._sgemm_module() is not None


def run_gemm(op, m, k, n, c_kind="n", const=(1, 2), **attrs):
    a, b, c = gemm_inputs(m, k, n, 0, 0, c_kind)
    inputs = [a, b] if c is None else [a, b, c]
    if op == "FusedGemm":
        attrs = dict(domain=MS, activation="Relu", **attrs)
    else:
        attrs = dict(opset=13, **attrs)
    (y,) = ours(op, inputs, const_inputs=list(const), **attrs)
    want = gemm_ref(a, b, c, attrs.get("alpha", 1.0), attrs.get("beta", 1.0))
    np.testing.assert_allclose(y, relu(want) if op == "FusedGemm" else want, **TOL)


def test_small_products_run_as_np_dot(calls):
    run_gemm("Gemm", 1, 10, 32, c_kind="none")  # MatMul-like: no epilogue
    run_gemm("Gemm", 8, 16, 16, c_kind="none")
    run_gemm("Gemm", 1, 10, 4, c_kind="m1", const=(1,), alpha=-2.0)  # k-means: C at run time
    run_gemm("Gemm", 1, 128, 160)  # a single row of a larger weight: gemv
    run_gemm("FusedGemm", 1, 128, 160)
    run_gemm("Gemm", 1, 10, 32, const=(1,))  # C at run time
    run_gemm("Gemm", 1700, 20, 1)  # a single column: gemv on A's side
    run_gemm("FusedGemm", 300, 20, 1)
    run_gemm("Gemm", 5000, 10, 1, c_kind="none")
    (y,) = ours("MatMul", [rand(1, 10), rand(10, 4)], opset=13, const_inputs=[1])
    (y,) = ours("MatMul", [rand(2, 3, 10), rand(10, 4)], opset=13, const_inputs=[1])
    (y,) = ours("MatMul", [rand(50, 100, 10), rand(10, 1)], opset=13, const_inputs=[1])
    assert calls == []


def test_larger_products_keep_their_path(calls):
    run_gemm("Gemm", 64, 32, 48, c_kind="none")
    run_gemm("Gemm", 64, 32, 48)
    ours("MatMul", [rand(64, 32), rand(32, 48)], opset=13, const_inputs=[1])
    expected = ["gemm"] * 3 if NATIVE else ["matmul"] * 3
    assert calls == expected


@pytest.mark.skipif(not NATIVE, reason="the native GEMM is not available")
def test_native_epilogue_keeps_tiny_products(calls):
    # C per column and Relu fused into the native call beat np.dot plus two passes
    run_gemm("Gemm", 1, 10, 32)
    run_gemm("FusedGemm", 1, 10, 32)
    run_gemm("FusedGemm", 4, 10, 32)
    run_gemm("FusedGemm", 4, 10, 1)  # a single column below _COLUMN_MIN_MACS
    assert calls == ["gemm"] * 4


def test_blas_matmul_small_product_is_one_dot_with_the_epilogue():
    a, b, bias = rand(3, 7), rand(7, 5), rand(5)
    seen = []

    def add(o, r, c):
        seen.append((r, c))
        np.add(o, bias, out=o)

    y = _blas.matmul(a, b, epilogue=add)
    np.testing.assert_allclose(y, a @ b + bias, **TOL)
    assert y.flags.c_contiguous and seen == [(slice(None), slice(None))]


def test_blas_matmul_product_the_split_would_not_split_is_one_call(monkeypatch):
    a, b, bias = rand(100, 64), rand(64, 64), rand(64)
    seen = []

    def add(o, r, c):
        seen.append((r, c))
        np.add(o, bias[c], out=o)

    size = _blas.intra_threads()
    _blas.configure_threads(2)
    try:
        y = _blas.matmul(a, b, epilogue=add)  # 409600 multiply-adds: one chunk
        np.testing.assert_allclose(y, a @ b + bias, **TOL)
        assert y.flags.c_contiguous and seen == [(slice(None), slice(None))]
        seen.clear()
        monkeypatch.setattr(_blas, "_MIN_CHUNK_MACS", 1)
        y = _blas.matmul(a, b, epilogue=add)  # now split: one epilogue call per chunk
        np.testing.assert_allclose(y, a @ b + bias, **TOL)
        assert len(seen) > 1
    finally:
        _blas.configure_threads(size)


@pytest.mark.parametrize("sa,sb", [((2, 3, 10), (2, 10, 4)), ((2, 3, 10), (10, 4)),
                                   ((3, 10), (2, 10, 4)), ((2, 1, 3, 10), (2, 5, 10, 4)),
                                   ((2, 40, 24), (2, 24, 36))])
def test_blas_matmul_batched_small_and_not(sa, sb):
    a, b = rand(*sa), rand(*sb)
    y = _blas.matmul(a, b)
    np.testing.assert_allclose(y, np.matmul(a, b), **TOL)
    assert y.flags.c_contiguous
    (y,) = ours("MatMul", [a, b], opset=13)
    np.testing.assert_allclose(y, np.matmul(a, b), **TOL)


def test_thresholds_are_consistent():
    assert linalg._SMALL_MACS == _blas.SMALL_MACS
    assert linalg._GEMV_MIN_WEIGHT <= linalg._GEMV_MAX_WEIGHT
    assert SIZES["gemv"][1] * SIZES["gemv"][2] >= linalg._GEMV_MIN_WEIGHT
    m, k, n = SIZES["column"]
    assert linalg._SMALL_MACS <= m * k * n < linalg._COLUMN_MAX_MACS and n == 1
    assert 4 * 10 < linalg._COLUMN_MIN_MACS <= 300 * 20
    m, k, n = SIZES["large"]
    assert m * k * n >= linalg._SMALL_MACS


# --------------------------------------------------------------------------------------------
# Quantized MatMul-family kernels: never threads=0 to the native GEMM
# --------------------------------------------------------------------------------------------


def test_native_threads_resolves_zero():
    from onnxplex.providers.cpu_mlas import _native
    assert _blas.native_threads(3) == 3
    assert _blas.native_threads(0) >= 1
    # (what the tree, linear and SVM kernels hand their native calls)
    assert _native.threads(0) == _blas.native_threads(0) and _native.threads(2) == 2


@pytest.mark.skipif(_blas._sgemm_module() is None, reason="the native module is not available")
def test_quantized_matmuls_pass_a_resolved_thread_count(monkeypatch):
    """The native pool resolves threads=0 per call by reading /sys (~17 us on a tiny GEMM)."""
    nat = _blas._sgemm_module()
    seen = []

    def spy(name):
        real = getattr(nat, name)

        def call(*args):
            seen.append((name, args[-1]))
            return real(*args)

        monkeypatch.setattr(nat, name, call)

    for name in ("qgemm_i32", "qgemm_f32", "dynamic_qgemm_f32"):
        spy(name)
    a = RNG.integers(0, 255, (2, 10)).astype(np.uint8)
    b = RNG.integers(-127, 127, (10, 6)).astype(np.int8)
    want = (a.astype(np.int64) - 3) @ b
    (y,) = ours("MatMulInteger", [a, b, np.uint8(3), np.int8(0)], opset=13,
                const_inputs=[1, 2, 3])
    np.testing.assert_array_equal(y, want)
    (y,) = ours("MatMulIntegerToFloat", [a, b, np.float32(0.5), np.float32(0.25), np.uint8(3),
                                         np.int8(0)], domain=MS, const_inputs=[1, 2, 3, 4, 5])
    np.testing.assert_allclose(y, want * 0.125, **TOL)
    x = rand(2, 10)
    (y,) = ours("DynamicQuantizeMatMul", [x, b, np.float32(0.02), np.int8(0)], domain=MS,
                const_inputs=[1, 2, 3])
    np.testing.assert_allclose(y, x @ (b * np.float32(0.02)), rtol=0.05, atol=0.05)
    assert [n for n, _ in seen] == ["qgemm_i32", "qgemm_f32", "dynamic_qgemm_f32"]
    assert all(t >= 1 for _, t in seen)
