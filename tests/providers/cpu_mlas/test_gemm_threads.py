"""Gemm, MatMul, FusedMatMul and com.microsoft Attention with their GEMMs split over two
intra-op threads into many chunks (Gemm's constant C and Attention's QKV bias added per
chunk) must match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from ._oracle import check
from .test_conv_threads import MS, many_chunks, rand  # noqa: F401 - the shared fixture

pytestmark = pytest.mark.usefixtures("many_chunks")


@pytest.mark.parametrize("c_shape", [(40,), (1, 40), (70, 1), (70, 40), ()])
@pytest.mark.parametrize("trans_a,trans_b,alpha,beta", [
    (0, 0, 1.0, 1.0), (1, 1, 0.5, 2.0), (0, 1, 1.0, 0.5)])
def test_gemm_split_with_const_c(c_shape, trans_a, trans_b, alpha, beta):
    a = rand(*((30, 70) if trans_a else (70, 30)))
    b = rand(*((40, 30) if trans_b else (30, 40)))
    check("Gemm", [a, b, rand(*c_shape)], const_inputs=(1, 2), rtol=1e-5, atol=1e-5,
          transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 50, 24), (24, 36)), ((3, 50, 24), (3, 24, 36)), ((50, 24), (24, 80)), ((24,), (24, 8))])
def test_matmul_split(a_shape, b_shape):
    check("MatMul", [rand(*a_shape), rand(*b_shape)], const_inputs=(1,), rtol=1e-5, atol=1e-5)
    check("MatMul", [rand(*a_shape), rand(*b_shape)], rtol=1e-5, atol=1e-5)


def test_fused_matmul_split():
    check("FusedMatMul", [rand(2, 40, 16), rand(2, 48, 16)], domain=MS, rtol=1e-5, atol=1e-5,
          transB=1, alpha=0.25)


def test_attention_split():
    x, w, bias = rand(2, 48, 32), rand(32, 96) * 0.3, rand(96)
    mask = np.ones((2, 48), np.int32)
    mask[1, 40:] = 0
    check("Attention", [x, w, bias, mask], domain=MS, const_inputs=(1, 2), rtol=1e-5,
          atol=1e-5, num_heads=4)


def test_few_row_product_runs_transposed_and_still_applies_the_epilogue():
    from onnxplex.providers.cpu_mlas import _blas

    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    b = rng.standard_normal((64, 512)).astype(np.float32)
    bias = rng.standard_normal(512).astype(np.float32)
    seen = []

    def add_bias(o, rows, cols):
        seen.append((rows, cols))
        np.add(o, bias[cols], out=o)

    for bb in (b, np.ascontiguousarray(b.T).T):  # C-ordered, and a [K, N] view of [N, K] rows
        seen.clear()
        y = _blas.matmul(a, bb, epilogue=add_bias)
        np.testing.assert_allclose(y, a @ b + bias, rtol=1e-5, atol=1e-5)
        assert y.flags.c_contiguous and seen == [(slice(None), slice(None))]
