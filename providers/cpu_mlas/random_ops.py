"""Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
Bernoulli, Multinomial.

With a ``seed`` attribute a kernel draws from ``numpy.random.RandomState(int(seed))`` created
afresh for each call, as the ONNX reference implementation does: a seeded node returns the
same values on every run and concurrent runs never share a generator. Without a seed each call
draws from a fresh ``numpy.random.default_rng()`` (OS entropy), or, after
``onnxplex.set_seed(s)``, from a generator drawn from one seeded with ``s``. Samples are drawn
in float64 and cast to the output type (the ml_dtypes floats through float32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex._dtypes import np_dtype
from onnxplex.session.ortcompat import seeded_draw

from ._np_helpers import LOW_PRECISION_FLOATS
from ._registry import op

Kernel = Callable[..., np.ndarray]

_FLOAT = 1  # TensorProto.FLOAT


class _Source:
    """Where one call's random numbers come from: a seeded legacy RandomState or a fresh
    Generator; both expose uniform / normal / binomial draws of a given shape."""

    def __init__(self, seed: float | None) -> None:
        self.seed = None if seed is None or np.isnan(seed) else int(seed)

    def new(self) -> Any:
        if self.seed is None:
            # after onnxruntime's set_seed (onnxplex.set_seed): a generator drawn from the
            # process-wide seeded one, so the sequence of runs repeats
            child = seeded_draw(lambda g: np.random.default_rng(g.integers(2**63)))
            return np.random.default_rng() if child is None else child
        return np.random.RandomState(self.seed)

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        g = self.new()
        r = g.random_sample(shape) if isinstance(g, np.random.RandomState) else g.random(shape)
        return np.asarray(r, dtype=np.float64)

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.asarray(self.new().standard_normal(shape), dtype=np.float64)


def _seed(node: NodeView) -> _Source:
    s = node.attr("seed")
    return _Source(None if s is None else float(s))


def _work(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype in LOW_PRECISION_FLOATS else dtype


def _finish(sample: np.ndarray, dtype: np.dtype, scale: float, shift: float) -> np.ndarray:
    # same operation order and precision as the ONNX reference: cast, *= scale, += shift
    work = _work(dtype)
    r = np.array(sample, dtype=work)
    r *= work.type(scale)
    r += work.type(shift)
    return r.astype(dtype, copy=False)


def _shape(node: NodeView) -> tuple[int, ...]:
    shape = node.attr("shape")
    if shape is None:
        raise ValueError(f"{node.op_type}: attribute 'shape' is required")
    return tuple(int(d) for d in shape)


def _float_dtype(node: NodeView, default: np.dtype | None) -> np.dtype | None:
    dt = node.attr("dtype")
    if dt is None:
        return default
    dtype = np_dtype(int(dt))
    if dtype.kind != "f" and dtype not in LOW_PRECISION_FLOATS:
        raise ValueError(f"{node.op_type}: dtype must be a float type, got {dtype}")
    return dtype


@op("RandomNormal", since=1)
@op("RandomNormal", since=22)
def make_random_normal(node: NodeView, ctx: ProviderContext) -> Kernel:
    src, shape = _seed(node), _shape(node)
    dtype = _float_dtype(node, np_dtype(_FLOAT))
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))

    def kernel() -> np.ndarray:
        return _finish(src.normal(shape), dtype, scale, mean)

    return kernel


@op("RandomUniform", since=1)
@op("RandomUniform", since=22)
def make_random_uniform(node: NodeView, ctx: ProviderContext) -> Kernel:
    src, shape = _seed(node), _shape(node)
    dtype = _float_dtype(node, np_dtype(_FLOAT))
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))

    def kernel() -> np.ndarray:
        return _finish(src.uniform(shape), dtype, high - low, low)

    return kernel


@op("RandomNormalLike", since=1)
@op("RandomNormalLike", since=22)
def make_random_normal_like(node: NodeView, ctx: ProviderContext) -> Kernel:
    src = _seed(node)
    dtype = _float_dtype(node, None)
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))

    def kernel(x: np.ndarray) -> np.ndarray:
        return _finish(src.normal(x.shape), dtype or x.dtype, scale, mean)

    return kernel


@op("RandomUniformLike", since=1)
@op("RandomUniformLike", since=22)
def make_random_uniform_like(node: NodeView, ctx: ProviderContext) -> Kernel:
    src = _seed(node)
    dtype = _float_dtype(node, None)
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))

    def kernel(x: np.ndarray) -> np.ndarray:
        return _finish(src.uniform(x.shape), dtype or x.dtype, high - low, low)

    return kernel


@op("Bernoulli", since=15)
@op("Bernoulli", since=22)
def make_bernoulli(node: NodeView, ctx: ProviderContext) -> Kernel:
    src = _seed(node)
    dt = node.attr("dtype")
    dtype = None if dt is None else np_dtype(int(dt))

    def kernel(x: np.ndarray) -> np.ndarray:
        p = x.astype(np.float64)
        if ((p < 0) | (p > 1) | np.isnan(p)).any():
            raise ValueError("Bernoulli: probabilities must lie in [0, 1]")
        draw = src.new().binomial(1, p)
        out = dtype or x.dtype
        return np.asarray(draw, dtype=bool if out == np.dtype(bool) else _work(out)).astype(out)

    return kernel


@op("Multinomial", since=7)
@op("Multinomial", since=22)
def make_multinomial(node: NodeView, ctx: ProviderContext) -> Kernel:
    src = _seed(node)
    n = int(node.attr("sample_size", 1))
    dtype = np_dtype(int(node.attr("dtype", 6)))  # int32 by default
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"Multinomial: dtype must be int32 or int64, got {dtype}")

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim != 2:
            raise ValueError(f"Multinomial: input must be [batch, classes], got {x.shape}")
        b, c = x.shape
        logits = x.astype(np.float64)
        # unnormalised log-probabilities -> per-row CDF in [0, 1]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        cdf = np.cumsum(p, axis=1)
        cdf /= cdf[:, -1:]
        # offset each row by its index so one searchsorted serves the whole batch
        rows = np.arange(b, dtype=np.float64)[:, None]
        u = src.uniform((b, n)) + rows
        flat = (np.minimum(cdf, 1.0) + rows).reshape(-1)
        flat[c - 1::c] = rows[:, 0] + 1.0 if c else flat[c - 1::c]
        idx = np.searchsorted(flat, u.reshape(-1), side="right").reshape(b, n)
        idx = np.minimum(idx - np.arange(b)[:, None] * c, c - 1)
        return idx.astype(dtype)

    return kernel
