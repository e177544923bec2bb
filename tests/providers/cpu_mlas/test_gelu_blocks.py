"""The float32 GELU paths (Gelu, BiasGelu, FastGelu), native (``_mlas_native.gelu_f32``) and
blocked numpy, against float64 formulas, on arrays that span several blocks and threads' chunks,
odd tails, views and degenerate shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxplex.providers.cpu_mlas import _native
from onnxplex.providers.cpu_mlas import elementwise as ew

from ._no_native import without_native

RNG = np.random.default_rng(7)
# 0.5 + 0.5 tanh(.) loses up to half an ulp of 0.5 to cancellation where GELU is tiny (as
# 1 + erf(.) does): an absolute error of about |x| * 3e-8, hence atol for |x| up to ~20.
TOL = {"rtol": 2e-6, "atol": 1e-6}


def _exact_gelu(x: np.ndarray) -> np.ndarray:
    xd = x.astype(np.float64)
    erf = np.vectorize(math.erf)(xd / math.sqrt(2.0))
    return 0.5 * xd * (1.0 + erf)


def _tanh_gelu(x: np.ndarray) -> np.ndarray:
    xd = x.astype(np.float64)
    return 0.5 * xd * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (xd + 0.044715 * xd ** 3)))


HAS_NATIVE = _native.native() is not None and hasattr(_native.native(), "gelu_f32")


@pytest.fixture(params=["native", "numpy"])
def path(request):
    if request.param == "native" and not HAS_NATIVE:
        pytest.skip("_mlas_native (with gelu_f32) is not built")
    if request.param == "numpy":
        with without_native():
            yield request.param
    else:
        yield request.param


@pytest.fixture(params=["erf", "tanh"])
def form(request, path):
    erf_form = request.param == "erf"
    return ew._gelu_kernel(erf_form), _exact_gelu if erf_form else _tanh_gelu


@pytest.mark.parametrize("shape", [(3, ew._GELU_BLOCK + 17), (1, 128, 3072), (5,), (),
                                   (70000, 3)])
def test_blocked_gelu_matches_float64(form, shape):
    kernel, want = form
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:4] = [0.0, -0.0, 30.0, -30.0][: x.size]
    got = kernel(x)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want(x), **TOL)


@pytest.mark.parametrize("shape", [(2, 7, 40), (40, 3001)])  # (chunks start mid-bias)
def test_bias_is_added_first_and_input_untouched(form, shape):
    kernel, want = form
    x = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape[-1]).astype(np.float32)
    x0 = x.copy()
    np.testing.assert_allclose(kernel(x, b), want(x + b), **TOL)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_allclose(kernel(x), want(x), **TOL)
    np.testing.assert_array_equal(x, x0)


def test_views_empty_and_special_values(form):
    kernel, want = form
    x = RNG.standard_normal((6, 9)).astype(np.float32)[:, ::2]  # a strided view
    np.testing.assert_allclose(kernel(x), want(x), **TOL)
    assert kernel(np.zeros((0, 4), np.float32)).shape == (0, 4)
    out = kernel(np.array([np.nan, np.inf], np.float32))
    assert np.isnan(out[0]) and out[1] == np.inf


def test_float16_keeps_its_dtype(form):
    kernel, want = form
    x = RNG.standard_normal(50).astype(np.float16)
    got = kernel(x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want(x), rtol=2e-3, atol=2e-3)
