"""cpu_mlas DFT / STFT / windows / MelWeightMatrix against onnxruntime (or onnx's reference)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from ._oracle import check

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(5)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("inverse,onesided,complex_in", [
    (0, 0, False), (0, 1, False), (1, 0, False),
    (0, 0, True), (1, 0, True),          # onesided needs a real input
])
def test_dft_20_axis_and_length(inverse, onesided, complex_in):
    x = rand(2, 6, 5, 2 if complex_in else 1)
    check("DFT", [x, np.array(8, np.int64), np.array(1, np.int64)], opset=20, oracle="ort",
          rtol=1e-4, atol=1e-4, inverse=inverse, onesided=onesided)


def test_dft_17_double_axis2():
    x = rand(2, 3, 7, 1, dtype=np.float64)
    check("DFT", [x], opset=17, oracle="ort", rtol=1e-9, atol=1e-9, axis=2)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("rank", [2, 3])
def test_stft_batch_window(onesided, rank):
    """A real signal as the spec writes it, [B, L, 1], and as torch.stft's export gives it,
    [B, L] (the second raised an IndexError)."""
    sig = rand(2, 100, 1) if rank == 3 else rand(2, 100)
    window = np.hanning(16).astype(np.float32)
    check("STFT", [sig, np.array(6, np.int64), window, np.array(16, np.int64)], opset=17,
          oracle="ort", rtol=1e-4, atol=1e-4, onesided=onesided)


@pytest.mark.parametrize("op_type", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_double(op_type, periodic):
    check(op_type, [np.array(13, np.int64)], opset=17, oracle="ort", rtol=1e-6, atol=1e-6,
          periodic=periodic, output_datatype=TensorProto.DOUBLE)


def test_mel_weight_matrix():
    args = [np.array(10, np.int64), np.array(64, np.int64), np.array(16000, np.int64),
            np.array(100.0, np.float32), np.array(6000.0, np.float32)]
    check("MelWeightMatrix", args, opset=17, oracle="ref", rtol=1e-6, atol=1e-6)
