"""Sliding-window helpers shared by the convolution and pooling kernels of cpu_mlas.

numpy runs an elementwise op on a ``[N, C, H, W]`` window view as ``N * C * H`` short inner
loops of ``W`` elements; for the 7..112-wide rows of CNNs the per-row overhead dominates.
:class:`TapGrid` instead flattens the padded spatial grid so that each kernel tap reads one
long contiguous run per ``(n, c)`` plane: output rows carry a few garbage columns (the width
of the padding) that :meth:`TapGrid.crop` drops at the end. Strided windows first split the
grid into its stride phases (one contiguous copy each), after which every tap is again a
unit-stride run of one phase.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = ["TapGrid", "auto_pads", "ints", "pad_constant", "window_view"]


def ints(value: Any, n: int, default: int) -> tuple[int, ...]:
    """An ints attribute as a tuple of ``n`` values, ``default`` when absent or empty."""
    if value is None or len(value) == 0:
        return (default,) * n
    return tuple(int(v) for v in value)


def pad_constant(x: np.ndarray, begins: Sequence[int], ends: Sequence[int],
                 value: Any = 0, first_axis: int = 2) -> np.ndarray:
    """``x`` padded with ``value`` on the axes from ``first_axis`` on (non-negative pads)."""
    if not any(begins) and not any(ends):
        return x
    shape = list(x.shape)
    inner = [slice(None)] * x.ndim
    for i, (b, e) in enumerate(zip(begins, ends)):
        ax = first_axis + i
        inner[ax] = slice(b, b + shape[ax])
        shape[ax] += b + e
    out = np.full(shape, value, dtype=x.dtype) if value != 0 else np.zeros(shape, dtype=x.dtype)
    out[tuple(inner)] = x
    return out


def auto_pads(auto_pad: str, in_sp: Sequence[int], k_eff: Sequence[int],
              strides: Sequence[int], pads: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """Begin/end pads of a Conv or pool from ``auto_pad`` (effective, dilated kernel sizes)."""
    nd = len(in_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for n, k, s in zip(in_sp, k_eff, strides):
            out = -(-n // s)
            need = max(0, (out - 1) * s + k - n)
            head = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
            begins.append(head)
            ends.append(need - head)
        return begins, ends
    if auto_pad == "VALID" or not pads:
        return [0] * nd, [0] * nd
    return [int(p) for p in pads[:nd]], [int(p) for p in pads[nd:2 * nd]]


def window_view(xp: np.ndarray, kshape: Sequence[int], dil: Sequence[int],
                strides: Sequence[int], out_sp: Sequence[int]) -> np.ndarray:
    """``[N, C, *kernel, *out]`` strided view of the padded input: the im2col source."""
    st = xp.strides
    nd = len(kshape)
    shape = xp.shape[:2] + tuple(kshape) + tuple(out_sp)
    strides_ = st[:2] + tuple(st[2 + i] * dil[i] for i in range(nd)) \
        + tuple(st[2 + i] * strides[i] for i in range(nd))
    return as_strided(xp, shape=shape, strides=strides_, writeable=False)


class TapGrid:
    """The kernel taps of a padded ``[N, C, *spatial]`` input as long contiguous runs.

    ``run(tap)`` is an ``[N, C, L]`` view: for every output position (plus the garbage
    columns) the input element that kernel tap ``tap`` reads. Build a ``[N, C', L]`` result
    from these runs, then ``crop`` it to ``[N, C', *out]``. One instance serves one call.
    """

    def __init__(self, x: np.ndarray, begins: Sequence[int], ends: Sequence[int],
                 kshape: Sequence[int], dil: Sequence[int], strides: Sequence[int],
                 out_sp: Sequence[int], fill: Any = 0) -> None:
        nd = len(kshape)
        self.kshape = tuple(kshape)
        self.dil = tuple(dil)
        self.strides = tuple(strides)
        self.out_sp = tuple(out_sp)
        q_max = [(k - 1) * d // s for k, d, s in zip(kshape, dil, strides)]
        grid = []
        for i in range(nd):
            padded = x.shape[2 + i] + begins[i] + ends[i]
            grid.append(max(-(-padded // strides[i]), out_sp[i] + q_max[i]))
        grid[0] += 1  # a spill row keeps the last tap's run inside the buffer
        self.grid = tuple(grid)
        full = [g * s for g, s in zip(grid, strides)]
        tails = [f - n - b for f, n, b in zip(full, x.shape[2:], begins)]
        self._xp = pad_constant(x, begins, tails, fill)
        self._lead = x.shape[:2]
        self._gstrides = tuple(math.prod(grid[i + 1:]) for i in range(nd))
        self.length = out_sp[0] * self._gstrides[0]
        self._phases: dict[tuple[int, ...], np.ndarray] = {}

    def taps(self) -> Iterator[tuple[int, ...]]:
        return iter(np.ndindex(*self.kshape))

    def _phase(self, a: tuple[int, ...]) -> np.ndarray:
        flat = self._phases.get(a)
        if flat is None:
            if all(s == 1 for s in self.strides):
                src = self._xp
            else:
                src = np.ascontiguousarray(self._xp[(slice(None), slice(None)) + tuple(
                    slice(ai, None, s) for ai, s in zip(a, self.strides))])
            flat = self._phases[a] = src.reshape(self._lead + (-1,))
        return flat

    def run(self, tap: Sequence[int]) -> np.ndarray:
        """``[N, C, L]`` view of the elements kernel tap ``tap`` reads."""
        a, off = [], 0
        for t, d, s, gs in zip(tap, self.dil, self.strides, self._gstrides):
            e = t * d
            a.append(e % s)
            off += (e // s) * gs
        return self._phase(tuple(a))[..., off:off + self.length]

    def crop(self, buf: np.ndarray) -> np.ndarray:
        """``[N, C', L]`` -> contiguous ``[N, C', *out]``."""
        shaped = buf.reshape(buf.shape[:2] + (self.out_sp[0],) + self.grid[1:])
        sl = (slice(None),) * 3 + tuple(slice(0, o) for o in self.out_sp[1:])
        return np.ascontiguousarray(shaped[sl])
