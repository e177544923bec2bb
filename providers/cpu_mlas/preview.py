"""Preview-domain kernels for cpu_mlas: FlexAttention (ai.onnx.preview) and the optimizer
steps Adagrad, Adam and Momentum (ai.onnx.preview.training), in numpy.

The optimizer steps follow their specs' pseudo code, computed in float64 and cast back to
each tensor's type; a node updating several tensors applies the same step to each.
FlexAttention's ``score_mod`` and ``prob_mod`` subgraphs are compiled once per session through
``ctx.compile_graph`` (as control flow bodies are) and run on the whole score tensor.
"""

from __future__ import annotations

import logging
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext

from ._registry import op
from .control_flow import _outer_picker, _runner
from .nn import FLOATS

logger = logging.getLogger(__name__)

PREVIEW = "ai.onnx.preview"
TRAINING = "ai.onnx.preview.training"


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _scalar(v: Any) -> float:
    return float(np.asarray(v, dtype=np.float64).reshape(-1)[0])


def _groups(args: tuple, per_tensor: int, op_type: str) -> tuple[float, int, list[tuple]]:
    """``(R, T, [(X, G, ...) per optimized tensor])`` from ``R, T, X_1..X_n, G_1..G_n, ...``."""
    rest = args[2:]
    if not rest or len(rest) % per_tensor:
        raise ValueError(f"{op_type}: {len(rest)} tensor inputs is not a multiple of "
                         f"{per_tensor} (each optimized tensor comes with its state)")
    n = len(rest) // per_tensor
    return (_scalar(args[0]), int(np.asarray(args[1]).reshape(-1)[0]),
            [tuple(rest[k * n + i] for k in range(per_tensor)) for i in range(n)])


def _f64(v: Any) -> np.ndarray:
    return np.asarray(v, dtype=np.float64)


def _regroup(per_tensor: list[tuple], dtypes: list[tuple]) -> tuple[np.ndarray, ...]:
    """Outputs ordered as the specs list them: every tensor's first output, then every
    tensor's second, ...; each cast to its input's type."""
    return tuple(np.asarray(out[k]).astype(dt[k], copy=False)
                 for k in range(len(per_tensor[0]))
                 for out, dt in zip(per_tensor, dtypes))


# --------------------------------------------------------------------------------------------
# Adagrad / Adam / Momentum
# --------------------------------------------------------------------------------------------


@op("Adagrad", since=1, domain=TRAINING)
def make_adagrad(node: NodeView, ctx: ProviderContext):
    """Adagrad-1: ``X_new = X - r * G_reg / (sqrt(H_new) + epsilon)`` with ``r = R / (1 + T *
    decay_factor)``, ``G_reg = norm_coefficient * X + G``, ``H_new = H + G_reg^2``."""
    decay = float(node.attr("decay_factor", 0.0))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))

    def kernel(*args):
        r, t, tensors = _groups(args, 3, "Adagrad")
        r = r / (1 + t * decay)
        outs = []
        for x, g, h in tensors:
            g_reg = norm * _f64(x) + _f64(g)
            h_new = _f64(h) + g_reg * g_reg
            outs.append((_f64(x) - r * g_reg / (np.sqrt(h_new) + eps), h_new))
        return _regroup(outs, [(x.dtype, h.dtype) for x, _, h in tensors])

    return kernel


@op("Adam", since=1, domain=TRAINING)
def make_adam(node: NodeView, ctx: ProviderContext):
    """Adam-1: moment updates ``V_new = alpha V + (1 - alpha) G_reg``, ``H_new = beta H + (1 -
    beta) G_reg^2``, the step bias-corrected for ``T > 0``, then ``(1 -
    norm_coefficient_post)`` applied to the new value."""
    alpha = float(node.attr("alpha", 0.9))
    beta = float(node.attr("beta", 0.999))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    norm_post = float(node.attr("norm_coefficient_post", 0.0))

    def kernel(*args):
        r, t, tensors = _groups(args, 4, "Adam")
        if t > 0:
            r = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t)
        outs = []
        for x, g, v, h in tensors:
            g_reg = norm * _f64(x) + _f64(g)
            v_new = alpha * _f64(v) + (1 - alpha) * g_reg
            h_new = beta * _f64(h) + (1 - beta) * g_reg * g_reg
            x_new = _f64(x) - r * v_new / (np.sqrt(h_new) + eps)
            outs.append(((1 - norm_post) * x_new, v_new, h_new))
        return _regroup(outs, [(x.dtype, v.dtype, h.dtype) for x, _, v, h in tensors])

    return kernel


def _momentum_predicate(node: NodeView) -> str | None:
    mode = _s(node.attr("mode", "standard"))
    if mode not in ("standard", "nesterov"):
        return f"Momentum mode {mode!r} is neither 'standard' nor 'nesterov'"
    return None


@op("Momentum", since=1, domain=TRAINING, predicate=_momentum_predicate)
def make_momentum(node: NodeView, ctx: ProviderContext):
    """Momentum-1: ``V_new = alpha V + beta' G_reg`` (``beta' = 1`` at ``T = 0``), then ``X_new
    = X - R V_new`` (standard) or ``X - R (G_reg + alpha V_new)`` (nesterov)."""
    alpha = float(node.attr("alpha"))
    beta = float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient"))
    nesterov = _s(node.attr("mode", "standard")) == "nesterov"

    def kernel(*args):
        r, t, tensors = _groups(args, 3, "Momentum")
        b = beta if t > 0 else 1.0
        outs = []
        for x, g, v in tensors:
            g_reg = norm * _f64(x) + _f64(g)
            v_new = alpha * _f64(v) + b * g_reg
            step = g_reg + alpha * v_new if nesterov else v_new
            outs.append((_f64(x) - r * step, v_new))
        return _regroup(outs, [(x.dtype, v.dtype) for x, _, v in tensors])

    return kernel


# --------------------------------------------------------------------------------------------
# FlexAttention
# --------------------------------------------------------------------------------------------

_SOFTMAX_DTYPES = {TP.FLOAT: np.dtype(np.float32), TP.FLOAT16: np.dtype(np.float16),
                   TP.BFLOAT16: np.dtype(ml_dtypes.bfloat16), TP.DOUBLE: np.dtype(np.float64)}


def _flex_predicate(node: NodeView) -> str | None:
    precision = node.attr("softmax_precision")
    if precision is not None and int(precision) not in _SOFTMAX_DTYPES:
        return f"FlexAttention softmax_precision {precision} is not a float type"
    return None


@op("FlexAttention", since=1, domain=PREVIEW, dtypes={"T1": FLOATS}, predicate=_flex_predicate)
def make_flex_attention(node: NodeView, ctx: ProviderContext):
    """FlexAttention-1: ``softmax(score_mod((Q K^T) * scale))``, through ``prob_mod``, times V,
    over rank-4 ``[B, H, L, E]`` inputs; a K/V head serves ``Hq / Hkv`` consecutive query
    heads (GQA). Scores, softmax and the product with V run in the softmax precision (float32
    for half inputs, else the input's type, unless ``softmax_precision`` says otherwise)."""
    scale_attr = node.attr("scale")
    precision = node.attr("softmax_precision")
    mods = {}
    for name in ("score_mod", "prob_mod"):
        if node.attr(name) is not None:
            runner = _runner(node, ctx, name)
            mods[name] = (runner, _outer_picker(node, runner))

    def modify(name: str, t: np.ndarray, args: tuple) -> np.ndarray:
        if name not in mods:
            return t
        runner, outer = mods[name]
        out = runner(t, *outer(args))
        y = np.asarray(out[0])
        if len(out) != 1 or y.shape != t.shape:
            raise ValueError(f"FlexAttention: {name} must give one tensor of shape "
                             f"{list(t.shape)}, got {[list(np.shape(o)) for o in out]}")
        return y.astype(t.dtype, copy=False)

    def kernel(q, k, v, *implicit):
        args = (q, k, v, *implicit)
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise ValueError(f"FlexAttention needs rank-4 Q, K, V; got shapes {list(q.shape)}, "
                             f"{list(k.shape)}, {list(v.shape)}")
        hq, hkv = q.shape[1], k.shape[1]
        if k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0] \
                or hkv == 0 or hq % hkv:
            raise ValueError(f"FlexAttention: shapes Q {list(q.shape)}, K {list(k.shape)}, "
                             f"V {list(v.shape)} do not fit (q heads a multiple of kv heads)")
        if precision is not None:
            cd = _SOFTMAX_DTYPES[int(precision)]
        else:
            cd = np.dtype(np.float32) if q.dtype.itemsize < 4 else q.dtype
        scale = float(scale_attr) if scale_attr is not None else 1.0 / np.sqrt(q.shape[-1])
        if hq != hkv:
            k = np.repeat(k, hq // hkv, axis=1)
            v = np.repeat(v, hq // hkv, axis=1)
        mm = np.float64 if cd == np.float64 else np.float32   # matmul type for the scores
        scores = np.matmul(q.astype(mm), np.swapaxes(k.astype(mm), -1, -2)) * mm(scale)
        scores = modify("score_mod", scores.astype(cd), args)
        s = scores.astype(mm)
        with np.errstate(invalid="ignore"):
            e = np.exp(s - np.max(s, axis=-1, keepdims=True))
            probs = (e / np.sum(e, axis=-1, keepdims=True)).astype(cd)
        probs = modify("prob_mod", probs, args)
        return np.matmul(probs.astype(mm), v.astype(mm)).astype(v.dtype)

    return kernel
