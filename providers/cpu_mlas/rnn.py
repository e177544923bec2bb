"""Recurrent kernels for cpu_mlas: RNN, GRU and LSTM (opsets 7, 14 and 22).

The input projection ``X @ W^T + Wb`` of every time step is one GEMM per direction, computed
before the time loop; the loop then does one ``H @ R^T`` GEMM and a few fused elementwise
updates per step. Reverse directions and ``sequence_lens`` are handled by gathering each batch
entry's steps in processing order (a reverse direction reads ``X[len_b - 1 - t]``), running
the loop forward with a per-step validity mask (a finished sequence keeps its state and
writes zeros to ``Y``), and scattering ``Y`` back. float16/bfloat16 run in float32.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from onnxplex import NodeView, ProviderContext

from . import _blas
from ._blas import intra_threads, parallel_for
from ._blas import matmul as _blas_matmul
from ._native import native
from ._registry import ConstInput, op
from .nn import FLOATS, compute_dtype

logger = logging.getLogger(__name__)

Act = Callable[[np.ndarray], np.ndarray]


# --------------------------------------------------------------------------------------------
# Activations (in place where possible: they only ever see kernel-owned temporaries)
# --------------------------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 0.5 * (1 + tanh(x / 2)): one transcendental, no overflow warnings
    x *= 0.5
    np.tanh(x, out=x)
    x += 1
    x *= 0.5
    return x


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


def _make_activation(name: str, alpha: float | None, beta: float | None) -> Act:
    n = name.lower()
    if n == "sigmoid":
        return _sigmoid
    if n == "tanh":
        return _tanh
    if n == "relu":
        return lambda x: np.maximum(x, 0, out=x)
    if n == "affine":
        a, b = (1.0 if alpha is None else alpha), (0.0 if beta is None else beta)
        return lambda x: np.add(np.multiply(x, a, out=x), b, out=x)
    if n == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, x * a).astype(x.dtype, copy=False)
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x > a, x, 0).astype(x.dtype, copy=False)
    if n == "scaledtanh":
        a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return lambda x: np.multiply(np.tanh(np.multiply(x, b, out=x), out=x), a, out=x)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: np.clip(np.add(np.multiply(x, a, out=x), b, out=x), 0, 1, out=x)
    if n == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))).astype(
            x.dtype, copy=False)
    if n == "softsign":
        return lambda x: np.divide(x, 1 + np.abs(x), out=x)
    if n == "softplus":
        return lambda x: np.logaddexp(x, 0, out=x)
    raise ValueError(f"unsupported RNN activation {name!r}")


_NEEDS_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_NEEDS_BETA = {"affine", "scaledtanh", "hardsigmoid"}
_KNOWN = _NEEDS_ALPHA | {"sigmoid", "tanh", "relu", "softsign", "softplus"}


def _activations(node: NodeView, defaults: Sequence[str], num_dirs: int) -> list[list[Act]]:
    """Per direction, the op's activation functions. ``activation_alpha``/``beta`` are
    consumed in list order by the functions that take them (as onnxruntime does)."""
    names = [str(a.decode() if isinstance(a, bytes) else a)
             for a in (node.attr("activations") or ())]
    per = len(defaults)
    if not names:
        names = list(defaults) * num_dirs
    elif len(names) == per and num_dirs == 2:
        names = names * 2
    alphas = list(node.attr("activation_alpha") or ())
    betas = list(node.attr("activation_beta") or ())
    ai = bi = 0
    funcs: list[Act] = []
    for name in names:
        n = name.lower()
        a = b = None
        if n in _NEEDS_ALPHA and ai < len(alphas):
            a = float(alphas[ai])
            ai += 1
        if n in _NEEDS_BETA and bi < len(betas):
            b = float(betas[bi])
            bi += 1
        funcs.append(_make_activation(name, a, b))
    return [funcs[d * per:(d + 1) * per] for d in range(num_dirs)]


def _rnn_predicate(node: NodeView) -> str | None:
    for a in node.attr("activations") or ():
        a = a.decode() if isinstance(a, bytes) else str(a)
        if a.lower() not in _KNOWN:
            return f"{node.op_type} activation {a!r} is not supported"
    direction = node.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        return f"{node.op_type} direction {direction!r} is not supported"
    return None


# --------------------------------------------------------------------------------------------
# Shared driver
# --------------------------------------------------------------------------------------------


class _Spec:
    """Attributes and prepacked weights common to the three ops."""

    def __init__(self, node: NodeView, n_gates: int) -> None:
        d = node.attr("direction", "forward")
        self.direction = d.decode() if isinstance(d, bytes) else str(d)
        self.num_dirs = 2 if self.direction == "bidirectional" else 1
        self.layout = int(node.attr("layout", 0))
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        self.n_gates = n_gates
        self.hidden = node.attr("hidden_size")
        # (constant bias, its projection part side by side, the rest per direction)
        self.split_cache: tuple | None = None
        w_info, r_info, b_info = node.input(1), node.input(2), node.input(3)
        self.w_c = self._pack_w(w_info.const) if w_info is not None and w_info.is_const else None
        self.r_c = self._pack_w(r_info.const) if r_info is not None and r_info.is_const else None
        self.b_c = (np.asarray(b_info.const).astype(compute_dtype(b_info.const.dtype))
                    if b_info is not None and b_info.is_const else None)
        # every direction's packed W side by side: [I, dirs * G*H] (one projection GEMM), and
        # packed for the native GEMM (numpy's single-threaded OpenBLAS ran the projections at
        # half its speed: a 2-layer bidirectional LSTM's were a third of its run)
        self.w_cat = None if self.w_c is None else self._side_by_side(self.w_c)
        self.w_packed = None if self.w_cat is None else _blas.pack_weight(self.w_cat)
        if self.w_packed is not None:
            self.w_cat = None   # (not kept twice)

    @staticmethod
    def _side_by_side(wt: np.ndarray) -> np.ndarray:
        """``[dirs, I, G*H]`` -> ``[I, dirs * G*H]``."""
        return np.ascontiguousarray(wt.transpose(1, 0, 2).reshape(wt.shape[1], -1))

    @staticmethod
    def _pack_w(w: np.ndarray) -> np.ndarray:
        """``[dirs, G*H, I]`` -> contiguous ``[dirs, I, G*H]`` in the compute dtype."""
        w = np.asarray(w)
        return np.ascontiguousarray(w.astype(compute_dtype(w.dtype), copy=False)
                                    .transpose(0, 2, 1))

    def directions(self) -> list[bool]:
        """For each direction index, whether it runs in reverse."""
        if self.direction == "bidirectional":
            return [False, True]
        return [self.direction == "reverse"]


def _order_index(seq_len: int, batch: int, lens: np.ndarray | None,
                 reverse: bool) -> np.ndarray | None:
    """``idx[t, b]``: the time step batch entry ``b`` processes at loop step ``t`` (``None``
    for the identity)."""
    if not reverse:
        return None
    t = np.arange(seq_len)[:, None]
    if lens is None:
        return np.broadcast_to(seq_len - 1 - t, (seq_len, batch))
    ln = lens.reshape(1, -1)
    return np.where(t < ln, ln - 1 - t, t)


def _run(node: NodeView, spec: _Spec, cell: Callable[..., Any], x: np.ndarray, w, r, b,
         lens, h0, extra_states: Sequence[np.ndarray | None],
         split_bias: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray | None]],
         native_seq: Callable[..., Any] | None = None):
    """Common driver: returns ``(Y, Y_h, *final extra states)`` in the op's layout.

    ``split_bias(b_dir, hidden)`` -> ``(bias folded into the input projection, the rest the
    cell adds itself or None)``. ``native_seq(d, xw, h, states, rt_d, bd, lens, y)``, when
    given, runs a float32 direction's whole time loop in place of ``cell`` step by step (see
    :func:`_native_seq`)."""
    out_dtype = x.dtype
    cd = compute_dtype(x.dtype)
    if spec.layout == 1:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        extra_states = [None if s is None else s.transpose(1, 0, 2) for s in extra_states]
    seq_len, batch, in_size = x.shape
    wt = spec.w_c if spec.w_c is not None else _Spec._pack_w(w)
    rt = spec.r_c if spec.r_c is not None else _Spec._pack_w(r)
    gh = wt.shape[2]
    hidden = gh // spec.n_gates
    if b is not None:
        bb = spec.b_c if spec.b_c is not None else np.asarray(b)
        bb = bb.astype(cd, copy=False)
    else:
        bb = None
    xc = x.astype(cd, copy=False)
    lens_a = None
    if lens is not None:
        lens_a = np.asarray(lens).astype(np.int64).reshape(-1)
        if lens_a.size and (lens_a >= seq_len).all():
            lens_a = None  # every sequence is full: no masking needed
    num_dirs = spec.num_dirs
    use_native = native_seq is not None and cd == _F32
    whole = use_native and lens_a is None
    # (the native loops over whole sequences write every step of y: no zeros first)
    y = (np.empty if whole else np.zeros)((seq_len, num_dirs, batch, hidden), dtype=cd)
    y_h = np.empty((num_dirs, batch, hidden), dtype=cd)
    finals = [np.empty((num_dirs, batch, hidden), dtype=cd) for _ in extra_states]
    if whole:
        _native_whole(spec, native_seq, xc, wt, rt, bb, split_bias, h0, extra_states, y, y_h,
                      finals)
        return _outputs(spec, y, y_h, finals, out_dtype)
    prepared = []
    for d, reverse in enumerate(spec.directions()):
        idx = _order_index(seq_len, batch, lens_a, reverse)
        if idx is None:
            xd = xc
        elif lens_a is None:
            xd = xc[::-1]
        else:
            xd = xc[idx, np.arange(batch)[None, :]]
        # input projection of every step in one GEMM: [T*B, I] @ [I, G*H]
        xw = _blas_matmul(xd.reshape(-1, in_size), wt[d]).reshape(seq_len, batch, gh)
        bd = None
        if bb is not None:
            pre, bd = split_bias(bb[d], hidden)
            xw += pre
        h = np.zeros((batch, hidden), dtype=cd) if h0 is None else \
            np.array(h0[d], dtype=cd)
        states = [np.zeros((batch, hidden), dtype=cd) if s is None else np.array(s[d], dtype=cd)
                  for s in extra_states]
        prepared.append([idx, xw, bd, h, states,
                         np.empty((seq_len, batch, hidden), _F32) if use_native else None])

    if use_native:
        def loop(d: int) -> None:   # (the native loop releases the GIL)
            _, xw, bd, h, states, y_seq = prepared[d]
            native_seq(d, xw, h, states, rt[d], bd, lens_a, y_seq)

        if num_dirs == 2 and intra_threads() > 1:
            parallel_for(2, loop)   # the two directions at once, as onnxruntime runs them
        else:
            for d in range(num_dirs):
                loop(d)

    for d, (idx, xw, bd, h, states, y_seq) in enumerate(prepared):
        yd = y[:, d]
        if use_native:
            yd[...] = y_seq
        for t in range(0 if use_native else seq_len):
            h_new, states_new = cell(d, xw[t], h, states, rt[d], bd, hidden)
            if lens_a is not None:
                valid = (t < lens_a)[:, None]
                h = np.where(valid, h_new, h)
                states = [np.where(valid, sn, so) for sn, so in zip(states_new, states)]
                yd[t] = np.where(valid, h_new, 0)
            else:
                h, states = h_new, states_new
                yd[t] = h_new
        y_h[d] = h
        for f, s in zip(finals, states):
            f[d] = s
        if idx is not None:
            if lens_a is None:
                y[:, d] = yd[::-1].copy()
            else:
                out = np.zeros_like(yd)
                out[idx, np.arange(batch)[None, :]] = yd
                valid = (np.arange(seq_len)[:, None] < lens_a[None, :])[..., None]
                y[:, d] = np.where(valid, out, 0)
    return _outputs(spec, y, y_h, finals, out_dtype)


def _outputs(spec: _Spec, y: np.ndarray, y_h: np.ndarray, finals: list[np.ndarray],
             out_dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """``(Y, Y_h, *final states)`` in the op's layout and type."""
    if spec.layout == 1:
        y = y.transpose(2, 0, 1, 3)
        y_h = y_h.transpose(1, 0, 2)
        finals = [f.transpose(1, 0, 2) for f in finals]
    outs = (y, y_h, *finals)
    return tuple(np.ascontiguousarray(o).astype(out_dtype, copy=False) for o in outs)


def _split_biases(spec: _Spec, bb: np.ndarray | None, split_bias, hidden: int
                  ) -> tuple[np.ndarray | None, list[np.ndarray | None]]:
    """The bias every direction folds into its input projection, side by side (``[dirs *
    G*H]``, the projection's columns), and each direction's rest (``split_bias``'s second
    part); worked out once for a constant bias."""
    cached = spec.split_cache
    if cached is not None and cached[0] is bb:
        return cached[1], cached[2]
    if bb is None:
        return None, [None] * spec.num_dirs
    parts = [split_bias(bb[d], hidden) for d in range(spec.num_dirs)]
    pre = np.ascontiguousarray(np.concatenate([p for p, _ in parts]), dtype=np.float32)
    rest = [r for _, r in parts]
    if bb is spec.b_c:
        spec.split_cache = (bb, pre, rest)
    return pre, rest


def _native_whole(spec: _Spec, native_seq: Callable[..., Any], xc: np.ndarray, wt, rt, bb,
                  split_bias, h0, extra_states, y: np.ndarray, y_h: np.ndarray,
                  finals: list[np.ndarray]) -> None:
    """Every direction's time loop natively, for whole sequences (no sequence lengths): one
    input projection for all directions (``[T*B, I] @ [I, dirs * G*H]``), each direction's
    loop reading its columns of it, stepping backwards for a reverse direction, and writing
    its slice of ``y`` and its final states (in ``y_h`` and ``finals``) in place; both
    directions at once on two threads. (Per direction, the reversed input, a GEMM, the
    states and the reversed output each cost a copy and a call: most of a small
    bidirectional GRU's time.)"""
    seq_len, batch, in_size = xc.shape
    dirs = spec.num_dirs
    gh = wt.shape[2]
    hidden = gh // spec.n_gates
    x2 = xc.reshape(-1, in_size)
    pre, bds = _split_biases(spec, bb, split_bias, hidden)
    if spec.w_packed is not None and x2.dtype == np.float32:
        # the projection's bias added by the GEMM as it stores (a pass over the [T, B, dirs,
        # G*H] projection per direction was ~6% of a 2-layer bidirectional LSTM's run)
        xw = _blas.gemm(x2, spec.w_packed, bias=pre).reshape(seq_len, batch, dirs, gh)
    else:
        w_cat = spec.w_cat if spec.w_cat is not None else _Spec._side_by_side(wt)
        xw = _blas_matmul(x2, w_cat)
        if pre is not None:
            xw += pre
        xw = xw.reshape(seq_len, batch, dirs, gh)
    y_h[...] = 0 if h0 is None else h0
    for f, s0 in zip(finals, extra_states):
        f[...] = 0 if s0 is None else s0
    reverse = spec.directions()

    def loop(d: int) -> None:   # (the native loop releases the GIL)
        native_seq(d, xw[:, :, d], y_h[d], [f[d] for f in finals], rt[d], bds[d], None,
                   y[:, d], reverse=reverse[d])

    if dirs == 2 and intra_threads() > 1:   # the two directions at once, as onnxruntime runs them
        if getattr(native_seq, "can_run_together", False):
            native_seq.together([(d, xw[:, :, d], y_h[d], [f[d] for f in finals], rt[d], bds[d],
                                  y[:, d], reverse[d]) for d in range(dirs)], intra_threads())
        else:
            parallel_for(2, loop)
    else:
        for d in range(dirs):
            loop(d)


_F32 = np.dtype(np.float32)
_DEFAULT_ACTS = {"RNN": ("tanh",), "GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}
_CELL_CODES = {"RNN": 0, "GRU": 1, "LSTM": 2}


class _NativeSeq:
    """A node's native time loop (``_mlas_native.rnn_seq_f32``, rnn.h), called like
    ``run(d, xw, h, states, rt_d, bd, lens, y, reverse=False)`` for one direction;
    :meth:`together` runs several directions' whole sequences in one native call, on the
    native pool's threads (handing the second direction to a Python worker cost more than it
    saved: a bidirectional GRU of 64, batch 2, 110 us sequential, 128 so, 61 natively). An
    LSTM's call binds its peephole weights ``[dirs, 3H]`` with :meth:`with_peepholes`."""

    __slots__ = ("_one", "_many", "_code", "_clip", "_lbr", "_pp", "_caches")

    def __init__(self, one, many, code: int, clip: float, linear_before_reset: bool,
                 pp: np.ndarray | None = None, caches: list | None = None) -> None:
        self._one, self._many, self._code = one, many, code
        self._clip, self._lbr, self._pp = clip, linear_before_reset, pp
        # per direction, the native RnnPackCache of R^T's packed panels when R is a constant
        # (else None: R^T packed anew each call)
        self._caches = caches

    def with_peepholes(self, pp: np.ndarray | None) -> _NativeSeq:
        return _NativeSeq(self._one, self._many, self._code, self._clip, self._lbr, pp,
                          self._caches)

    def _cache(self, d: int):
        return None if self._caches is None else self._caches[d]

    @property
    def can_run_together(self) -> bool:
        return self._many is not None

    def _args(self, d, xw, h, states, rt_d, bd, y):
        c = states[0] if self._code == 2 else None
        peep = None if self._pp is None else np.ascontiguousarray(self._pp[d], _F32)
        rbh = None if bd is None else np.ascontiguousarray(bd, _F32)
        if xw.strides[-1] != 4:
            xw = np.ascontiguousarray(xw)
        return xw, np.ascontiguousarray(rt_d), h, c, y, rbh, peep

    def __call__(self, d, xw, h, states, rt_d, bd, lens, y, reverse=False) -> None:
        xw, rt, h, c, y, rbh, peep = self._args(d, xw, h, states, rt_d, bd, y)
        self._one(self._code, xw, rt, h, c, y, rbh, peep, lens, self._clip, self._lbr,
                  reverse=reverse, cache=self._cache(d))

    def together(self, dirs, threads: int) -> None:
        """``dirs``: ``(d, xw, h, states, rt_d, bd, y, reverse)`` per direction, whole
        sequences, writing disjoint arrays."""
        jobs = [(*self._args(d, xw, h, states, rt_d, bd, y), reverse, self._cache(d))
                for d, xw, h, states, rt_d, bd, y, reverse in dirs]
        self._many(self._code, jobs, self._clip, self._lbr, threads)


def _native_seq(node: NodeView, spec: _Spec,
                linear_before_reset: bool = False) -> _NativeSeq | None:
    """The native time loop for ``node`` when it applies: the module is built, every
    activation is the op's default (named or not, no alpha/beta) and, for LSTM,
    ``input_forget`` is 0; else None (the numpy cell runs each step).
    The native loop's sigmoid and tanh are its own vector functions (within ~1e-7 of
    numpy's), its sums run in another order than numpy's GEMM: the results agree with the
    numpy loop to float32 rounding, not to the bit."""
    mod = native()
    fn = getattr(mod, "rnn_seq_f32", None) if mod is not None else None
    if fn is None:
        return None
    names = [str(a.decode() if isinstance(a, bytes) else a).lower()
             for a in (node.attr("activations") or ())]
    default = _DEFAULT_ACTS[node.op_type]
    if names and names != list(default) * (len(names) // len(default)):
        return None
    if node.op_type == "LSTM" and int(node.attr("input_forget", 0)) == 1:
        return None
    clip = 0.0 if spec.clip is None else float(spec.clip)
    # R^T packed once per direction and batch size for a constant R (spec.r_c: then every
    # call's rt is that array); an R fed at run time is packed at each call
    cache_type = getattr(mod, "RnnPackCache", None)
    caches = ([cache_type() for _ in range(spec.num_dirs)]
              if spec.r_c is not None and cache_type is not None else None)
    return _NativeSeq(fn, getattr(mod, "rnn_seqs_f32", None), _CELL_CODES[node.op_type], clip,
                      linear_before_reset, caches=caches)


def _clip(x: np.ndarray, c: float | None) -> np.ndarray:
    if c is not None:
        np.clip(x, -c, c, out=x)
    return x


# --------------------------------------------------------------------------------------------
# RNN
# --------------------------------------------------------------------------------------------


def _make_rnn(node: NodeView, ctx: ProviderContext):
    """RNN: ``H = f(X W^T + H R^T + Wb + Rb)``."""
    spec = _Spec(node, 1)
    acts = _activations(node, ("Tanh",), spec.num_dirs)

    def cell(d, xw_t, h, states, rt, bd, hidden):
        g = np.matmul(h, rt)
        g += xw_t
        return acts[d][0](_clip(g, spec.clip)), []

    def split(bd, hidden):
        return bd[:hidden] + bd[hidden:], None

    seq = _native_seq(node, spec)

    def kernel(x, w, r, b=None, sequence_lens=None, initial_h=None):
        return _run(node, spec, cell, x, w, r, b, sequence_lens, initial_h, [], split, seq)

    return kernel


# --------------------------------------------------------------------------------------------
# GRU
# --------------------------------------------------------------------------------------------


def _make_gru(node: NodeView, ctx: ProviderContext):
    """GRU (gates z, r, h), ``linear_before_reset`` 0 or 1."""
    spec = _Spec(node, 3)
    acts = _activations(node, ("Sigmoid", "Tanh"), spec.num_dirs)
    lbr = int(node.attr("linear_before_reset", 0)) == 1

    def cell(d, xw_t, h, states, rt, bd, hidden):
        f, g = acts[d]
        h2 = 2 * hidden
        zr = np.matmul(h, rt[:, :h2])
        zr += xw_t[:, :h2]
        zr = f(_clip(zr, spec.clip))
        z, rg = zr[:, :hidden], zr[:, hidden:]
        rh = rt[:, h2:]
        if lbr:
            hh = np.matmul(h, rh)
            if bd is not None:
                hh += bd
            hh *= rg
        else:
            hh = np.matmul(rg * h, rh)
            if bd is not None:
                hh += bd
        hh += xw_t[:, h2:]
        hh = g(_clip(hh, spec.clip))
        # H = (1 - z) * hh + z * H = hh + z * (H - hh)
        h_new = h - hh
        h_new *= z
        h_new += hh
        return h_new, []

    def split(bd, hidden):
        # Wb (all gates) and Rb of z, r go into the projection; Rb of h stays in the cell
        pre = bd[:3 * hidden].copy()
        pre[:2 * hidden] += bd[3 * hidden:5 * hidden]
        return pre, bd[5 * hidden:]

    seq = _native_seq(node, spec, linear_before_reset=lbr)

    def kernel(x, w, r, b=None, sequence_lens=None, initial_h=None):
        return _run(node, spec, cell, x, w, r, b, sequence_lens, initial_h, [], split, seq)

    return kernel


# --------------------------------------------------------------------------------------------
# LSTM
# --------------------------------------------------------------------------------------------


def _split_lstm(bd: np.ndarray, hidden: int):
    return bd[:4 * hidden] + bd[4 * hidden:], None


def _make_lstm(node: NodeView, ctx: ProviderContext):
    """LSTM (gates i, o, f, c): peepholes, input_forget, clip, all three outputs."""
    spec = _Spec(node, 4)
    acts = _activations(node, ("Sigmoid", "Tanh", "Tanh"), spec.num_dirs)
    input_forget = int(node.attr("input_forget", 0)) == 1
    p_info = node.input(7)
    p_c = None if p_info is None or not p_info.is_const else \
        np.asarray(p_info.const).astype(np.float32 if p_info.const.dtype.itemsize < 4
                                        else p_info.const.dtype)

    seq = _native_seq(node, spec)

    def kernel(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        pp = p_c if p_c is not None else (None if p is None else
                                          np.asarray(p).astype(compute_dtype(p.dtype)))
        def cell(d, xw_t, h, states, rt, bd, hidden):
            f, g, hf = acts[d]
            (c,) = states
            gates = np.matmul(h, rt)
            gates += xw_t
            gi, go, gf, gc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
            if pp is not None:  # peepholes go in before the clip, as in onnxruntime
                pd = pp[d]
                gi += pd[:hidden] * c
                gf += pd[2 * hidden:] * c
                _clip(gi, spec.clip)
                _clip(gf, spec.clip)
                _clip(gc, spec.clip)
            else:
                _clip(gates, spec.clip)
            if pp is None and f is _sigmoid and not input_forget:
                f(gates[:, :3 * hidden])  # i, o, f in one pass (in place)
                i, go, ft = gi, None, gf
            else:
                i = f(gi)
                ft = 1 - i if input_forget else f(gf)
            ct = g(gc)
            c_new = ft * c
            c_new += i * ct
            if go is None:
                o = gates[:, hidden:2 * hidden]
            else:
                if pp is not None:
                    go += pp[d][hidden:2 * hidden] * c_new
                    _clip(go, spec.clip)
                o = f(go)
            h_new = hf(c_new.copy())
            h_new *= o
            return h_new, [c_new]

        y, y_h, y_c = _run(node, spec, cell, x, w, r, b, sequence_lens, initial_h,
                           [initial_c], _split_lstm,
                           None if seq is None else seq.with_peepholes(pp))
        return y, y_h, y_c

    return kernel


for _v in (7, 14, 22):
    op("RNN", since=_v, dtypes={"T": FLOATS}, predicate=_rnn_predicate)(_make_rnn)
    op("GRU", since=_v, dtypes={"T": FLOATS}, predicate=_rnn_predicate)(_make_gru)
    op("LSTM", since=_v, dtypes={"T": FLOATS}, predicate=_rnn_predicate)(_make_lstm)


# --------------------------------------------------------------------------------------------
# com.microsoft DynamicQuantizeLSTM (what onnxruntime's quantize_dynamic makes of an LSTM)
# --------------------------------------------------------------------------------------------


class _AsFloatLstm:
    """A DynamicQuantizeLSTM node seen as the float LSTM it quantizes: the same attributes
    and inputs 0-7, with W and R dequantized and in the ONNX layout ``[dirs, 4H, I]``."""

    op_type = "LSTM"

    def __init__(self, node: NodeView, w: np.ndarray, r: np.ndarray) -> None:
        self._node, self._w, self._r = node, ConstInput(w), ConstInput(r)

    def attr(self, name: str, default: Any = None) -> Any:
        return self._node.attr(name, default)

    def input(self, k: int) -> Any:
        return self._w if k == 1 else self._r if k == 2 else self._node.input(k)


def _dequantized_weight(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``[dirs, K, 4H]`` 8-bit weights with a scale and zero point per direction ``[dirs]`` or
    per direction and column ``[dirs, 4H]`` -> float32 ``[dirs, 4H, K]``."""
    dirs = q.shape[0]
    s = np.asarray(scale, np.float32).reshape(dirs, 1, -1)
    z = np.asarray(zero_point).astype(np.float32).reshape(dirs, 1, -1)
    return np.ascontiguousarray(((q.astype(np.float32) - z) * s).transpose(0, 2, 1))


_QUANT_PARAMS = (8, 9, 10, 11)   # W_scale, W_zero_point, R_scale, R_zero_point


def _dq_lstm_predicate(node: NodeView) -> str | None:
    why = _rnn_predicate(node)
    if why is not None:
        return why
    for k in (1, 2, *_QUANT_PARAMS):
        v = node.input(k)
        if v is None or not v.is_const:
            return ("DynamicQuantizeLSTM needs constant weights, scales and zero points "
                    f"(input {k} is not)")
    return None


@op("DynamicQuantizeLSTM", domain="com.microsoft", since=1,
    dtypes={0: {TensorProto.FLOAT}}, predicate=_dq_lstm_predicate)
def _make_dynamic_quantize_lstm(node: NodeView, ctx: ProviderContext):
    """com.microsoft DynamicQuantizeLSTM: an LSTM whose W ``[dirs, I, 4H]`` and R
    ``[dirs, H, 4H]`` are 8-bit with per-direction or per-column scales and zero points. The
    weights are dequantized once, here, and the float LSTM runs (its native time loop):
    onnxruntime also quantizes X and H at each step, so the two differ by that rounding of
    the activations (~1/255 of their range), not by the weights."""
    q = [np.asarray(node.input(k).const) for k in (1, 2, *_QUANT_PARAMS)]
    w = _dequantized_weight(q[0], q[2], q[3])
    r = _dequantized_weight(q[1], q[4], q[5])
    lstm = _make_lstm(_AsFloatLstm(node, w, r), ctx)

    def kernel(x, w_q, r_q, b=None, sequence_lens=None, initial_h=None, initial_c=None,
               p=None, *quant_params):
        return lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p)

    return kernel
