"""What every op of a compiled partition shares: its label (for reports and profiles), the
per-thread workspace, activation epilogues, layout permutations and small numeric helpers.

An :class:`Op` is built once per session by ``compile``; ``run(args, ws)`` is called once per
run with the op's inputs (numpy arrays, in the layouts the planner chose) and the calling
thread's :class:`Workspace`. Ops keep no per-run state, so one op runs on many threads at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
FLOATS = (F32, F16)

EXACT_F32 = float(1 << 24)
"""Integers up to 2**24 are exact in float32: integer GEMMs run on float32 BLAS below it."""

# Rank-4 layouts: "L" is ONNX's logical order (NCHW for images), "C" is channels-last, the
# physical array being ``logical.transpose(TO_C)``.
LOGICAL, CHANNELS_LAST = "L", "C"
TO_C = (0, 2, 3, 1)
TO_L = (0, 3, 1, 2)
AXIS_IN_C = (0, 3, 1, 2)
"""Where logical axis ``a`` of a rank-4 tensor sits in its channels-last array."""


def phys_axis(axis: int, rank: int, layout: str) -> int:
    """The physical position of (normalized) logical ``axis`` in a tensor of ``layout``."""
    return AXIS_IN_C[axis] if layout == CHANNELS_LAST and rank == 4 else axis


@dataclass(frozen=True)
class Label:
    """What an op is, for the placement report and profiling events.

    ``op_class`` groups ops as XNNPACK does (fully_connected, conv2d, batch_matmul,
    elementwise, ...); ``variant`` is the matched table entry, ``"none: <why>"``, or ``""`` for
    classes without a table; ``kernel`` is ``kleidi:<family>/<variant>`` or ``own:<impl>``.
    """

    name: str
    op_type: str
    nodes: tuple[int, ...]
    op_class: str
    variant: str = ""
    kernel: str = ""

    def note(self) -> str:
        v = f": {self.variant}" if self.variant else ""
        return f"{self.op_class}{v} -> {self.kernel}"

    @property
    def kernel_name(self) -> str:
        """The kernel without the bracketed remark (why Kleidi did not run, ...)."""
        return self.kernel.split(" [")[0]

    @property
    def remark(self) -> str:
        return self.kernel[len(self.kernel_name):].strip().removeprefix("[").removesuffix("]")


class Workspace:
    """Scratch buffers of one thread, reused across runs (padded inputs, im2col columns).

    A buffer created with ``fill`` keeps that value wherever its users never write (the
    border of a padded input), so it is filled once, not per run. Never returned as an output.
    """

    def __init__(self) -> None:
        self._bufs: dict[Any, np.ndarray] = {}

    def get(self, key: Any, shape: tuple[int, ...], dtype: np.dtype,
            fill: float | None = None) -> np.ndarray:
        buf = self._bufs.get(key)
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
            self._bufs[key] = buf
        return buf


class Op:
    """One operation of a compiled partition (possibly several ONNX nodes fused)."""

    n_out = 1
    fresh = True
    """Outputs are new arrays (not views of inputs or constants): they may be reused in place."""
    inplace_ok: tuple[int, ...] = ()
    """Inputs whose buffer the op can write its output into, when the planner allows it."""

    def __init__(self, label: Label) -> None:
        self.label = label
        self.donate: int | None = None   # set by the planner: an input that dies here, owned

    def run(self, args: Sequence[Any], ws: Workspace) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def out_buffer(self, args: Sequence[Any], shape: tuple[int, ...],
                   dtype: np.dtype) -> np.ndarray | None:
        """The donated input when it can hold the result, else None."""
        if self.donate is None:
            return None
        a = args[self.donate]
        if isinstance(a, np.ndarray) and a.shape == shape and a.dtype == dtype \
                and a.flags.writeable:
            return a
        return None


def as_f32(x: np.ndarray) -> np.ndarray:
    """float32 view or copy (float16 and integer tensors are converted)."""
    return x if x.dtype == F32 else x.astype(F32)


# --------------------------------------------------------------------------------------------
# Activations (epilogues of conv / gemm, and the unary elementwise ops)
# --------------------------------------------------------------------------------------------

# erf for float32: Eigen's rational approximation on [-4, 4] (|error| < 5e-7 against math.erf;
# erf is +-1 to float32 precision beyond).
_ERF_P = tuple(np.float32(c) for c in (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
    -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
    -1.60960333262415e-02))
_ERF_Q = tuple(np.float32(c) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
    -7.37332916720468e-03, -1.42647390514189e-02))


def erf_f32(x: np.ndarray) -> np.ndarray:
    xc = np.clip(x, np.float32(-4), np.float32(4)).astype(F32, copy=False)
    x2 = xc * xc
    p = np.full_like(x2, _ERF_P[0])
    for c in _ERF_P[1:]:
        p *= x2
        p += c
    q = np.full_like(x2, _ERF_Q[0])
    for c in _ERF_Q[1:]:
        q *= x2
        q += c
    p *= xc
    p /= q
    return p


_SQRT_HALF = np.float32(1 / math.sqrt(2))
_TANH_GELU = np.float32(math.sqrt(2 / math.pi))


def _apply(kind: str, p: tuple[float, ...], x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out = kind(x)`` for float32 arrays (``out`` may be ``x``)."""
    f = np.float32
    if kind == "Relu":
        return np.maximum(x, f(0), out=out)
    if kind == "Clip":
        return np.clip(x, f(p[0]), f(p[1]), out=out)
    if kind == "Sigmoid":  # tanh form: no overflow warnings, stays float32
        np.multiply(x, f(0.5), out=out)
        np.tanh(out, out=out)
        out += f(1)
        out *= f(0.5)
        return out
    if kind == "Tanh":
        return np.tanh(x, out=out)
    if kind == "Swish":  # x * sigmoid(x) (SiLU: a Sigmoid and a Mul fused into an epilogue)
        t = _apply("Sigmoid", p, x, np.empty_like(x))
        return np.multiply(x, t, out=out)
    if kind == "LeakyRelu":
        neg = x < 0
        np.copyto(out, x)
        np.multiply(out, f(p[0]), out=out, where=neg)
        return out
    if kind == "HardSigmoid":
        np.multiply(x, f(p[0]), out=out)
        out += f(p[1])
        return np.clip(out, f(0), f(1), out=out)
    if kind == "HardSwish":
        t = x * f(1 / 6)
        t += f(0.5)
        np.clip(t, f(0), f(1), out=t)
        return np.multiply(x, t, out=out)
    if kind == "Elu":
        neg = x < 0
        e = np.expm1(np.minimum(x, f(0)))
        e *= f(p[0])
        np.copyto(out, x)
        np.copyto(out, e, where=neg)
        return out
    if kind in ("Gelu", "GeluTanh"):
        if kind == "Gelu":
            t = erf_f32(x * _SQRT_HALF)
        else:
            t = x * x
            t *= f(0.044715)
            t += f(1)
            t *= x
            t *= _TANH_GELU
            np.tanh(t, out=t)
        t += f(1)
        t *= f(0.5)
        return np.multiply(x, t, out=out)
    if kind == "Erf":
        np.copyto(out, erf_f32(x))
        return out
    if kind == "Softplus":
        # log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))
        t = np.exp(-np.abs(x))
        np.log1p(t, out=t)
        np.maximum(x, f(0), out=out)
        out += t
        return out
    if kind == "Softsign":
        t = np.abs(x)
        t += f(1)
        return np.divide(x, t, out=out)
    simple = {"Sqrt": np.sqrt, "Neg": np.negative, "Abs": np.abs, "Exp": np.exp,
              "Reciprocal": np.reciprocal}
    return simple[kind](x, out=out)


UNARY_KINDS = frozenset({"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid",
                         "HardSwish", "Elu", "Gelu", "GeluTanh", "Erf", "Softplus", "Softsign",
                         "Sqrt", "Neg", "Abs", "Exp", "Reciprocal"})


@dataclass(frozen=True)
class Activation:
    """An epilogue applied in place to a fresh float32 result (``kind`` ``""``: none)."""

    kind: str = ""
    params: tuple[float, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.kind)

    def clamp(self) -> tuple[float, float] | None:
        """(lo, hi) when the activation is a clamp a Kleidi kernel applies itself."""
        if self.kind == "Relu":
            return 0.0, math.inf
        if self.kind == "Clip":
            return self.params[0], self.params[1]
        return None

    def apply_(self, y: np.ndarray) -> np.ndarray:
        return _apply(self.kind, self.params, y, y) if self.kind else y

    def describe(self) -> str:
        if not self.kind:
            return ""
        if self.kind == "Clip":
            return f"Clip[{self.params[0]:g}, {self.params[1]:g}]"
        return self.kind


NO_ACTIVATION = Activation()


def unary(kind: str, params: tuple[float, ...], x: np.ndarray,
          out: np.ndarray | None = None) -> np.ndarray:
    """``kind(x)`` in x's float dtype; float16 computes in float32 and rounds once."""
    if x.dtype == F32:
        return _apply(kind, params, x, out if out is not None else np.empty_like(x))
    y = x.astype(F32)
    _apply(kind, params, y, y)
    if out is not None:
        np.copyto(out, y, casting="same_kind")
        return out
    return y.astype(x.dtype)


def clamp_kwargs(lo: float, hi: float) -> dict[str, float]:
    """Kleidi's clamp_min / clamp_max arguments for the bounds (infinite bounds omitted)."""
    big = float(np.finfo(np.float32).max)
    kw = {}
    if lo > -math.inf:
        kw["clamp_min"] = max(lo, -big)
    if hi < math.inf:
        kw["clamp_max"] = min(hi, big)
    return kw


def same_pads(size: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], upper: bool) -> tuple[list[int], list[int]]:
    """Begin and end pads of ``auto_pad`` SAME_UPPER / SAME_LOWER."""
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begin.append(small if upper else big)
        end.append(big if upper else small)
    return begin, end


def quant_range(dt: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


class Requantizer:
    """The output stage of a quantized conv / fully-connected op:
    ``saturate(round_half_even((acc + bias_q) * multiplier + bias_f) + y_zero_point)``.

    ``acc``: the exact integer accumulator (as floats) of centered activations
    (``x - x_zero_point``) and weights; ``multiplier``: ``x_scale * w_scale / y_scale`` per
    output channel (or one); ``bias_q``: an int32 bias in the accumulator's scale; ``bias_f``: a
    float bias already divided by the output scale (a bias in another scale). As XNNPACK's fp32
    requantization and onnxruntime's (MLAS): the exact integer sum rounded to float32, the
    product and the float bias in float32, rounded half to even (cpu_mlas's integer kernels
    give the same bytes). ``relu``: a Relu before the QuantizeLinear, which raises the lower
    bound to the zero point.
    """

    def __init__(self, x_zero_point: float, multiplier: np.ndarray, bias_q: np.ndarray | None,
                 bias_f: np.ndarray | None, y_zero_point: int, out_dtype: np.dtype,
                 relu: bool) -> None:
        def vec(v):
            return None if v is None else np.asarray(v, np.float64).reshape(-1)

        self.x_zero_point = float(x_zero_point)
        self.multiplier, self.bias_q, self.bias_f = vec(multiplier), vec(bias_q), vec(bias_f)
        self.y_zero_point, self.out_dtype = int(y_zero_point), np.dtype(out_dtype)
        lo, self.hi = quant_range(self.out_dtype)
        self.lo = max(lo, self.y_zero_point) if relu else lo

    def centered(self, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """``x - x_zero_point`` in ``dtype`` (exact: |values| <= 255)."""
        xc = x.astype(dtype)
        if self.x_zero_point:
            xc -= dtype.type(self.x_zero_point)
        return xc

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        if self.bias_q is not None:
            acc = acc.astype(np.float64) + self.bias_q   # (exact: integers below 2^53)
        f = acc.astype(F32)
        f *= self.multiplier.astype(F32)
        if self.bias_f is not None:
            f += self.bias_f.astype(F32)
        np.rint(f, out=f)
        f += np.float32(self.y_zero_point)
        np.clip(f, self.lo, self.hi, out=f)
        return f.astype(self.out_dtype)


def scale_multiplier(x_scale: float, w_scale: np.ndarray, y_scale: float) -> np.ndarray:
    """``x_scale * w_scale / y_scale`` in float32 (the graph's own precision), widened."""
    m = (np.float32(x_scale) * np.asarray(w_scale, F32)) / np.float32(y_scale)
    return np.asarray(m, F32).astype(np.float64)
