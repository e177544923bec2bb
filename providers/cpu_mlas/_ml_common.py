"""Helpers shared by the ai.onnx.ml kernels: attribute readers and the score post-transforms as
onnxruntime computes them (``ml_common.h``: ComputeLogistic, ComputeSoftmax, ComputeSoftmaxZero,
ComputeProbit with its ErfInv approximation, and ``batched_update_scores_inplace``'s handling of
one score per row).

Scores are float32 throughout, as in onnxruntime: every transform here computes in float32, so
results agree with onnxruntime's to a few float32 ulps (its vectorised MLAS logistic and softmax
are not bit-identical to its scalar ones either).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxplex import NodeView

NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT = range(5)
_POST = {"NONE": NONE, "LOGISTIC": LOGISTIC, "SOFTMAX": SOFTMAX, "SOFTMAX_ZERO": SOFTMAX_ZERO,
         "PROBIT": PROBIT}

F32 = np.float32
_PI_147 = F32(2.0 / (np.pi * 0.147))     # ErfInv's 2 / (pi * 0.147), in float
_INV_147 = F32(1.0 / 0.147)
_SQRT2 = F32(np.sqrt(2.0))


def text(v: object) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def enum_attr(node: NodeView, name: str, default: str, choices: Sequence[str]) -> str:
    """A string attribute that must be one of ``choices`` (ValueError naming it otherwise)."""
    value = text(node.attr(name, default))
    if value not in choices:
        raise ValueError(f"{node.op_type}: attribute {name!r} is {value!r}, expected one of "
                         f"{', '.join(choices)}")
    return value


def post_transform(node: NodeView) -> int:
    """The ``post_transform`` attribute as one of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO,
    PROBIT."""
    return _POST[enum_attr(node, "post_transform", "NONE", tuple(_POST))]


def floats(node: NodeView, name: str, *, required: bool = False) -> np.ndarray:
    """A FLOATS attribute as a float32 vector (empty when absent and not required)."""
    v = node.attr_array(name, F32)   # (a long list as loaded: no tuple of Python floats)
    if v is None or (required and v.size == 0):
        if required:
            raise ValueError(f"{node.op_type}: attribute {name!r} is required")
        return np.zeros(0, F32)
    return v.reshape(-1)


def ints(node: NodeView, name: str) -> np.ndarray:
    v = node.attr_array(name, np.int64)
    return np.zeros(0, np.int64) if v is None else v.reshape(-1)


def strings(node: NodeView, name: str) -> list[str]:
    v = node.attr(name)
    return [] if v is None else [text(s) for s in v]


def class_labels(node: NodeView, ints_name: str = "classlabels_ints",
                 strings_name: str = "classlabels_strings") -> tuple[np.ndarray, bool]:
    """The class labels (an int64 or object array) and whether they are strings."""
    labels_s = strings(node, strings_name)
    if labels_s:
        return obj_array(labels_s), True
    return ints(node, ints_name), False


def strings_or_ints(node: NodeView, strings_name: str, ints_name: str) -> list[Any]:
    """The one given of a STRINGS and an INTS attribute, as a list (ValueError when neither or
    both are)."""
    as_s = strings(node, strings_name)
    value = node.attr(ints_name) if ints_name not in node.arrays else None
    if type(value) is tuple and all(type(v) is int for v in value):
        as_i = list(value)   # (a short list as it is: numpy calls cost at session creation)
    else:
        as_i = ints(node, ints_name).tolist()
    if bool(as_s) == bool(as_i):
        raise ValueError(f"{node.op_type}: exactly one of {strings_name!r} and {ints_name!r} "
                         "must be given")
    return as_s or as_i


def obj_array(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def as_float32_2d(x: np.ndarray, op: str) -> np.ndarray:
    """The input as float32 [N, F] (a vector is one row), as onnxruntime's kernels cast it."""
    if x.ndim == 1:
        x = x.reshape(1, -1)
    elif x.ndim != 2:
        raise ValueError(f"{op}: input must be [N, F] or [F], got shape {x.shape}")
    return x if x.dtype == F32 else x.astype(F32)


# --------------------------------------------------------------------------------------------
# Transforms (float32, as onnxruntime's)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _ones(n: int) -> np.ndarray:
    return np.ones((n, 1), F32)


def row_sum(x: np.ndarray) -> np.ndarray:
    """Sums of the rows of a float32 [N, C] matrix, [N, 1], as one BLAS product: numpy's own
    reduction along a short last axis runs ~10x slower."""
    return x.dot(_ones(x.shape[1]))


def row_max(x: np.ndarray) -> np.ndarray:
    """Maxima of the rows of [N, C], [N, 1]; a few columns are compared column by column (a
    reduction along a short last axis is slow)."""
    n, c = x.shape
    if n <= 8 or c > 8 or c == 0:
        return x.max(axis=1, keepdims=True)
    m = x[:, :1].copy()
    for j in range(1, c):
        np.maximum(m, x[:, j:j + 1], out=m)
    return m


def logistic(x: np.ndarray) -> np.ndarray:
    """ComputeLogistic: 1 / (1 + exp(-|x|)), mirrored for negative x."""
    v = F32(1) / (F32(1) + np.exp(-np.abs(x)))
    return np.where(x < 0, F32(1) - v, v)


def softmax(x: np.ndarray) -> np.ndarray:
    """ComputeSoftmax over the rows of [N, C]."""
    e = np.exp(x - row_max(x))
    e /= row_sum(e)
    return e


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """ComputeSoftmaxZero: values within 1e-7 of zero are scaled by exp(-max) rather than
    exponentiated, so zeros stay zero (an all-zero row gives 0 / 0)."""
    vmax = np.maximum(row_max(x), F32(-np.finfo(F32).max))
    nz = np.abs(x) > F32(1e-7)
    e = np.where(nz, np.exp(x - vmax), x * np.exp(-vmax))
    s = row_sum(np.where(nz, e, F32(0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return e / s


def erfinv(x: np.ndarray) -> np.ndarray:
    """onnxruntime's ErfInv: Winitzki's approximation with a = 0.147, in float32 (not the
    exact inverse: |error| up to ~2e-3 near +-1)."""
    x = np.asarray(x, F32)
    sgn = np.where(x < 0, F32(-1), F32(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log((F32(1) - x) * (F32(1) + x))
        v = _PI_147 + F32(0.5) * lg
        v3 = -v + np.sqrt(v * v - _INV_147 * lg)
        return sgn * np.sqrt(v3)


def probit(x: np.ndarray) -> np.ndarray:
    """ComputeProbit: sqrt(2) * ErfInv(2x - 1)."""
    return _SQRT2 * erfinv(F32(2) * np.asarray(x, F32) - F32(1))


_TRANSFORMS = {LOGISTIC: logistic, SOFTMAX: softmax, SOFTMAX_ZERO: softmax_zero,
               PROBIT: probit}


def _logistic_1(v: float) -> float:
    e = math.exp(-abs(v))
    return e / (1.0 + e) if v < 0 else 1.0 / (1.0 + e)


def _softmax_1(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(v - m) for v in row]
    t = sum(e)
    return [v / t for v in e]


def transform_scores(scores: np.ndarray, post: int) -> np.ndarray:
    """``batched_update_scores_inplace`` for rows of two or more scores. One row of LOGISTIC
    or SOFTMAX is done in Python floats (rounded to float32 once): five numpy calls on a
    handful of values cost more than the arithmetic."""
    if post == NONE:
        return scores
    if scores.shape[0] == 1 and post in (LOGISTIC, SOFTMAX):
        row = scores[0].tolist()
        out = _softmax_1(row) if post == SOFTMAX else [_logistic_1(v) for v in row]
        return np.array([out], F32)
    return _TRANSFORMS[post](scores)


def one_score(score: np.ndarray, post: int, second: str | None) -> np.ndarray:
    """``batched_update_scores_inplace`` for one score per row (``score`` is [N]), as
    onnxruntime 1.32 does it: PROBIT is applied alone; otherwise ``second`` says how the two
    columns are made: None keeps one column untransformed, ``"complement"`` gives [1 - s, s]
    and ``"negate"`` [-s, s]; LOGISTIC applies to s first (``"negate"``: [logistic(-s),
    logistic(s)]), no other transform applies.

    With PROBIT and a second column onnxruntime transforms the N scores where they lie, at
    the start of the [N, 2] buffer, and leaves the rest: LinearClassifier's rows read
    [p0, p1], [p2, p3], ..., then zeros, and so do these (SVMClassifier's second column is
    uninitialised memory there)."""
    n = score.shape[0]
    if post == PROBIT:
        if second is None:
            return probit(score).reshape(n, 1)
        out = np.zeros(2 * n, F32)
        out[:n] = probit(score)
        return out.reshape(n, 2)
    if second is None:
        return score.reshape(n, 1)
    out = np.empty((n, 2), F32)
    if second == "complement":
        if post == LOGISTIC:
            score = logistic(score)
        out[:, 0] = F32(1) - score
        out[:, 1] = score
    elif post == LOGISTIC:
        out[:, 0] = logistic(-score)
        out[:, 1] = logistic(score)
    else:
        out[:, 0] = -score
        out[:, 1] = score
    return out
