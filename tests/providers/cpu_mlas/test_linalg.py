"""cpu_mlas Gemm, MatMul and Einsum kernels against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ._oracle import check, ours

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(7)
TOL = dict(rtol=1e-4, atol=1e-5)
HALF_TOL = dict(rtol=1e-2, atol=1e-2)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def randint(*shape: int, dtype=np.int64) -> np.ndarray:
    return RNG.integers(-5, 5, shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Gemm
# --------------------------------------------------------------------------------------------

C_SHAPES = {"full": (5, 6), "row": (6,), "row2d": (1, 6), "col": (5, 1), "scalar": ()}


@pytest.mark.parametrize("const", [True, False], ids=["const_bc", "runtime_bc"])
@pytest.mark.parametrize("c_shape", list(C_SHAPES))
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("trans_a", [0, 1])
def test_gemm(trans_a, trans_b, c_shape, const):
    a = rand(4, 5) if trans_a else rand(5, 4)
    b = rand(6, 4) if trans_b else rand(4, 6)
    check("Gemm", [a, b, rand(*C_SHAPES[c_shape])], opset=13, transA=trans_a, transB=trans_b,
          alpha=0.5, beta=1.5, const_inputs=[1, 2] if const else [], oracle="ort", **TOL)


@pytest.mark.parametrize("opset", [6, 7, 9, 11, 13])
def test_gemm_opsets(opset):
    kw = dict(broadcast=1) if opset < 7 else {}
    check("Gemm", [rand(3, 4), rand(4, 5), rand(5)], opset=opset, alpha=2.0, beta=0.5, **kw,
          **TOL)


@pytest.mark.parametrize("const", [True, False])
def test_gemm_without_c(const):
    check("Gemm", [rand(3, 4), rand(5, 4)], opset=13, transB=1, alpha=2.0,
          const_inputs=[1] if const else [], oracle="ort", **TOL)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_beta(beta):
    check("Gemm", [rand(3, 4), rand(4, 5), rand(3, 5)], opset=13, beta=beta, oracle="ort", **TOL)


@pytest.mark.parametrize("dtype,tol", [(np.float16, HALF_TOL), (np.float64, TOL)])
def test_gemm_dtypes(dtype, tol):
    check("Gemm", [rand(3, 4, dtype=dtype), rand(4, 5, dtype=dtype), rand(5, dtype=dtype)],
          opset=13, beta=0.3, oracle="ort", **tol)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (2.0, 3.0)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_gemm_integer(dtype, alpha, beta):
    check("Gemm", [randint(3, 4, dtype=dtype), randint(4, 5, dtype=dtype),
                   randint(5, dtype=dtype)], opset=13, alpha=alpha, beta=beta, oracle="ref")


# --------------------------------------------------------------------------------------------
# MatMul
# --------------------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (7, 1, 4, 2)),
    ((4,), (2, 4, 5)), ((2, 3, 4), (4,)), ((0, 4), (4, 3)),
]


@pytest.mark.parametrize("const", [True, False], ids=["const_b", "runtime_b"])
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul(sa, sb, const):
    check("MatMul", [rand(*sa), rand(*sb)], opset=13, const_inputs=[1] if const else [],
          oracle="ort", **TOL)


@pytest.mark.parametrize("opset", [1, 9, 13])
def test_matmul_opsets(opset):
    check("MatMul", [rand(2, 3, 4), rand(4, 5)], opset=opset, **TOL)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_integer_types(dtype):
    a = RNG.integers(0, 5, (2, 3, 4)).astype(dtype)
    b = RNG.integers(0, 5, (4, 5)).astype(dtype)
    check("MatMul", [a, b], opset=13)


def test_matmul_float16_and_double():
    check("MatMul", [rand(3, 4, dtype=np.float16), rand(4, 5, dtype=np.float16)], opset=13,
          oracle="ort", **HALF_TOL)
    check("MatMul", [rand(3, 4, dtype=np.float64), rand(2, 4, 5, dtype=np.float64)], opset=13,
          oracle="ort", **TOL)


def test_matmul_1d_result_is_array():
    (got,) = ours("MatMul", [rand(4), rand(4)], opset=13)
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32


# --------------------------------------------------------------------------------------------
# Einsum
# --------------------------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]),
    ("bhid,bhjd->bhij", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij", [(3, 4)]),
    ("ba", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->ik", [(2, 3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES, ids=[e for e, _ in EINSUM_CASES])
def test_einsum(equation, shapes):
    inputs = [rand(*s) for s in shapes]
    copies = [a.copy() for a in inputs]
    got = check("Einsum", inputs, opset=12, equation=equation, oracle="ort", **TOL)
    for a, b in zip(inputs, copies):
        np.testing.assert_array_equal(a, b)
    assert not any(np.shares_memory(got[0], a) for a in inputs)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.float16])
def test_einsum_dtypes(dtype):
    tol = HALF_TOL if dtype == np.float16 else TOL
    a = RNG.integers(-3, 3, (3, 4)).astype(dtype)
    b = RNG.integers(-3, 3, (4, 5)).astype(dtype)
    check("Einsum", [a, b], opset=12, equation="ij,jk->ik", **tol)
