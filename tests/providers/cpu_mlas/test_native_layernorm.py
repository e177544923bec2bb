"""The native row layer norm (``_mlas_native.layer_norm_f32``) that LayerNormalization and the
Skip/Simplified contrib forms use for float32: against float64, across thread counts, and its
argument checks. (The ops themselves are checked against onnxruntime in test_normalization.py
and test_contrib_transformer.py; those run this kernel for their float32 cases.)"""

from __future__ import annotations

import numpy as np
import pytest

from onnxplex.providers.cpu_mlas import _native
from onnxplex.providers.cpu_mlas.normalization import native_layer_norm

NAT = _native.native()
pytestmark = pytest.mark.skipif(NAT is None or not hasattr(NAT, "layer_norm_f32"),
                                reason="_mlas_native (with layer_norm_f32) is not built")


def _r(rng, *shape, shift=0.0):
    return (rng.standard_normal(shape) + shift).astype(np.float32)


def _reference(x, skip, bias, gamma, beta, eps, rms):
    s = x + np.tile(skip, (x.shape[0] // skip.shape[0], 1)) if skip is not None else x.copy()
    if bias is not None:
        s = s + bias  # float32 adds in the kernel's order
    s64 = s.astype(np.float64)
    if rms:
        inv = 1.0 / np.sqrt((s64 * s64).mean(1, keepdims=True) + eps)
        return s, None, inv, s64 * inv * gamma
    mean = s64.mean(1, keepdims=True)
    inv = 1.0 / np.sqrt(((s64 - mean) ** 2).mean(1, keepdims=True) + eps)
    y = (s64 - mean) * inv * gamma
    return s, mean, inv, y if beta is None else y + beta


@pytest.mark.parametrize("rows,d", [(1, 1), (3, 15), (4, 16), (64, 768), (130, 1030)])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("parts", ["plain", "skip_bias_beta", "repeating_skip"])
def test_matches_float64(rows, d, rms, parts):
    rng = np.random.default_rng(rows * 7 + d)
    x, gamma = _r(rng, rows, d, shift=4.0), _r(rng, d)  # a mean far from 0
    skip = bias = beta = None
    if parts == "skip_bias_beta":
        skip, bias, beta = _r(rng, rows, d), _r(rng, d), _r(rng, d)
    elif parts == "repeating_skip":
        skip = _r(rng, 1, d)
    if rms:
        beta = None
    y, total, mean, inv = native_layer_norm(x, 1e-5, gamma, beta, skip=skip, bias=bias,
                                            rms=rms, want_sum=True, want_stats=True)
    s, want_mean, want_inv, want_y = _reference(x, skip, bias, gamma, beta, 1e-5, rms)
    np.testing.assert_array_equal(total, s)
    np.testing.assert_allclose(inv[:, 0], want_inv[:, 0], rtol=1e-6)
    if rms:
        assert mean is None
    else:
        np.testing.assert_allclose(mean[:, 0], want_mean[:, 0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)


def test_rows_of_any_rank():
    """A [B, S, D] activation and a [S, D] skip go in as they are: the same bits as their
    [B * S, D] and [S, D] matrices, the statistics in [B, S, 1]."""
    rng = np.random.default_rng(9)
    x, skip, gamma, beta = _r(rng, 3, 5, 16), _r(rng, 5, 16), _r(rng, 16), _r(rng, 16)
    y3, t3, m3, i3 = native_layer_norm(x, 1e-5, gamma, beta, skip=skip, want_sum=True,
                                       want_stats=True)
    y2, t2, m2, i2 = native_layer_norm(x.reshape(15, 16), 1e-5, gamma, beta, skip=skip,
                                       want_sum=True, want_stats=True)
    assert y3.shape == t3.shape == (3, 5, 16) and m3.shape == i3.shape == (3, 5, 1)
    for a, b in ((y3, y2), (t3, t2), (m3, m2), (i3, i2)):
        np.testing.assert_array_equal(a.reshape(-1), b.reshape(-1))
    assert native_layer_norm(x, 1e-5, gamma, beta, skip=_r(rng, 4, 16)) is None  # 15 % 4


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_give_the_same_bits(threads):
    rng = np.random.default_rng(5)
    x, skip, gamma, beta = _r(rng, 200, 300), _r(rng, 200, 300), _r(rng, 300), _r(rng, 300)
    outs = []
    for t in (1, threads):
        y = np.empty_like(x)
        NAT.layer_norm_f32(x, skip, None, gamma, beta, y, eps=1e-5, threads=t)
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_declines_what_it_cannot_do():
    rng = np.random.default_rng(0)
    x, gamma = _r(rng, 6, 8), _r(rng, 8)
    assert native_layer_norm(x.astype(np.float64), 1e-5, gamma, None) is None
    assert native_layer_norm(x, 1e-5, _r(rng, 7), None) is None          # gamma's size
    assert native_layer_norm(x, 1e-5, gamma, None, skip=_r(rng, 4, 8)) is None  # 6 % 4


def test_bad_arguments_are_clear_errors():
    rng = np.random.default_rng(0)
    x, y, gamma = _r(rng, 6, 8), np.empty((6, 8), np.float32), _r(rng, 8)
    with pytest.raises(ValueError, match="skip"):
        NAT.layer_norm_f32(x, _r(rng, 4, 8), None, gamma, None, y)
    with pytest.raises(ValueError, match="gamma"):
        NAT.layer_norm_f32(x, None, None, _r(rng, 7), None, y)
    with pytest.raises(ValueError, match="y must have x's shape"):
        NAT.layer_norm_f32(x, None, None, gamma, None, np.empty((6, 9), np.float32))
    with pytest.raises(ValueError, match="beta"):
        NAT.layer_norm_f32(x, None, None, gamma, gamma, y, rms=True)
    with pytest.raises(TypeError, match="x must be"):
        NAT.layer_norm_f32(x.astype(np.float64), None, None, gamma, None, y)
