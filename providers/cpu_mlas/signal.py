"""Signal-processing kernels for cpu_mlas: DFT (opsets 17, 20), STFT, the Hann, Hamming and
Blackman windows, and MelWeightMatrix.

Transforms run on numpy's pocketfft (``np.fft``), in float64 for double inputs and complex64
otherwise (numpy >= 2 keeps single precision); results are returned in the input's dtype as
the ``[..., 2]`` real/imaginary layout ONNX uses.
"""

from __future__ import annotations

import logging

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext
from onnxplex._dtypes import np_dtype

from ._registry import op
from .nn import compute_dtype

logger = logging.getLogger(__name__)

_FLOATS = frozenset({TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.BFLOAT16})


def _to_complex(x: np.ndarray) -> np.ndarray:
    """``[..., 1]`` real or ``[..., 2]`` real/imag -> complex (or real) array without the
    last axis."""
    cd = compute_dtype(x.dtype)
    if x.shape[-1] == 1:
        return x[..., 0].astype(cd, copy=False)
    xc = x.astype(cd, copy=False)
    return xc[..., 0] + 1j * xc[..., 1]


def _pack(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(z.shape + (2,), dtype=dtype)
    out[..., 0] = z.real
    out[..., 1] = z.imag
    return out


def _dft(x: np.ndarray, length: int | None, axis: int, inverse: bool,
         onesided: bool) -> np.ndarray:
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        raise ValueError("DFT axis must not be the last (real/imaginary) axis")
    sig = _to_complex(x)
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if inverse:
        if onesided:
            y = np.fft.irfft(sig, n=length, axis=axis)
            return y[..., None].astype(x.dtype, copy=False)
        return _pack(np.fft.ifft(sig, n=length, axis=axis), x.dtype)
    if onesided:
        if np.iscomplexobj(sig):
            y = np.fft.fft(sig, n=length, axis=axis)
            y = np.take(y, np.arange(length // 2 + 1), axis=axis)
        else:
            y = np.fft.rfft(sig, n=length, axis=axis)
        return _pack(y, x.dtype)
    return _pack(np.fft.fft(sig, n=length, axis=axis), x.dtype)


@op("DFT", since=17, dtypes={"T1": _FLOATS})
def make_dft_17(node: NodeView, ctx: ProviderContext):
    """DFT-17: ``axis`` attribute (default 1), optional ``dft_length`` input."""
    axis = int(node.attr("axis", 1))
    inverse = int(node.attr("inverse", 0)) == 1
    onesided = int(node.attr("onesided", 0)) == 1

    def kernel(x, dft_length=None):
        n = None if dft_length is None else int(np.asarray(dft_length).reshape(-1)[0])
        return _dft(x, n, axis, inverse, onesided)

    return kernel


@op("DFT", since=20, dtypes={"T1": _FLOATS})
def make_dft_20(node: NodeView, ctx: ProviderContext):
    """DFT-20: ``axis`` as an optional input (default -2)."""
    inverse = int(node.attr("inverse", 0)) == 1
    onesided = int(node.attr("onesided", 0)) == 1

    def kernel(x, dft_length=None, axis=None):
        n = None if dft_length is None else int(np.asarray(dft_length).reshape(-1)[0])
        ax = -2 if axis is None else int(np.asarray(axis).reshape(-1)[0])
        return _dft(x, n, ax, inverse, onesided)

    return kernel


@op("STFT", since=17, dtypes={"T1": _FLOATS})
def make_stft(node: NodeView, ctx: ProviderContext):
    """STFT-17: frames ``[B, n_frames, frame_length]`` as a strided view, windowed, one FFT.
    The signal is ``[B, L, 1]`` or ``[B, L, 2]`` as the spec writes it, or ``[B, L]`` (real),
    as torch.stft's export gives it and onnxruntime takes it."""
    onesided = int(node.attr("onesided", 1)) == 1

    def kernel(signal, frame_step, window=None, frame_length=None):
        step = int(np.asarray(frame_step).reshape(-1)[0])
        if frame_length is not None:
            flen = int(np.asarray(frame_length).reshape(-1)[0])
        elif window is not None:
            flen = window.shape[0]
        else:
            raise ValueError("STFT needs a window or a frame_length")
        # [B, L, 1] real, [B, L, 2] complex, or [B, L] real (torch's export writes that;
        # onnxruntime takes it as real)
        sig = signal.astype(compute_dtype(signal.dtype), copy=False) if signal.ndim == 2 \
            else _to_complex(signal)  # [B, L]
        n_frames = 1 + (sig.shape[1] - flen) // step
        frames = np.lib.stride_tricks.sliding_window_view(sig, flen, axis=1)[:, ::step]
        frames = frames[:, :n_frames]
        if window is not None:
            frames = frames * np.asarray(window).astype(compute_dtype(signal.dtype))
        if onesided and not np.iscomplexobj(frames):
            y = np.fft.rfft(frames, n=flen, axis=-1)
        else:
            y = np.fft.fft(frames, n=flen, axis=-1)
            if onesided:
                y = y[..., :flen // 2 + 1]
        return _pack(y, signal.dtype)

    return kernel


# --------------------------------------------------------------------------------------------
# Windows and MelWeightMatrix
# --------------------------------------------------------------------------------------------


def _window_factory(coeffs: tuple[float, ...]):
    """``sum_k (-1)^k a_k cos(2 pi k n / N)`` windows (N = size if periodic else size - 1)."""

    def make(node: NodeView, ctx: ProviderContext):
        periodic = int(node.attr("periodic", 1)) == 1
        out_dt = np_dtype(int(node.attr("output_datatype", TP.FLOAT)))

        def kernel(size):
            n = int(np.asarray(size).reshape(-1)[0])
            denom = n if periodic else n - 1
            ni = np.arange(n, dtype=np.float64)
            res = np.full(n, coeffs[0], dtype=np.float64)
            for k, a in enumerate(coeffs[1:], start=1):
                res += (-1) ** k * a * np.cos(2 * np.pi * k * ni / denom)
            return res.astype(out_dt)

        return kernel

    return make


op("HannWindow", since=17)(_window_factory((0.5, 0.5)))
op("HammingWindow", since=17)(_window_factory((25.0 / 46.0, 21.0 / 46.0)))
op("BlackmanWindow", since=17)(_window_factory((0.42, 0.5, 0.08)))


@op("MelWeightMatrix", since=17)
def make_mel_weight_matrix(node: NodeView, ctx: ProviderContext):
    """MelWeightMatrix-17: triangular filters on the HTK mel scale, ``[dft_length // 2 + 1,
    num_mel_bins]``, bin edges rounded down to DFT bins."""
    out_dt = np_dtype(int(node.attr("output_datatype", TP.FLOAT)))

    def kernel(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        n_mel = int(np.asarray(num_mel_bins).reshape(-1)[0])
        n_dft = int(np.asarray(dft_length).reshape(-1)[0])
        rate = np.asarray(sample_rate).reshape(-1)[0]
        lo = np.asarray(lower_edge_hertz).reshape(-1)[0]
        hi = np.asarray(upper_edge_hertz).reshape(-1)[0]
        n_spec = n_dft // 2 + 1
        lo_mel = 2595 * np.log1p(lo / 700) / np.log(10)
        hi_mel = 2595 * np.log1p(hi / 700) / np.log(10)
        step = (hi_mel - lo_mel) / (n_mel + 2)
        edges = np.arange(n_mel + 2) * step + lo_mel
        edges = 700 * np.expm1(edges / 2595 * np.log(10))
        edges = (((n_dft + 1) * edges) // rate).astype(np.int64)
        left, center, right = edges[:-2], edges[1:-1], edges[2:]
        j = np.arange(n_spec)[:, None]
        up_w = np.maximum(center - left, 1)
        up = np.where((j >= left) & (j <= center),
                      (j - left) / up_w, 0.0)
        up = np.where((center - left == 0) & (j == center), 1.0, up)
        down_w = np.maximum(right - center, 1)
        down = np.where((j >= center) & (j < right) & (right > center),
                        (right - j) / down_w, np.nan)
        out = np.where(np.isnan(down), up, down)
        return out.astype(out_dt)

    return kernel
