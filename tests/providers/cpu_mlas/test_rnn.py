"""cpu_mlas RNN / GRU / LSTM against onnxruntime on configurations the ONNX node cases miss
(bidirectional with sequence_lens, batch > 1, initial states, peepholes, clip)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ._oracle import check

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(7)


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _inputs(op_type: str, t: int, b: int, i: int, h: int, dirs: int, *, lens: bool,
            init: bool, peep: bool = False, rng: np.random.Generator = RNG,
            dtype: type = np.float32) -> list:
    """X, W, R, B, sequence_lens, initial_h (, initial_c, P) of a recurrent node, trailing
    omitted ones dropped."""

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(dtype)

    g = GATES[op_type]
    xs = [rand(t, b, i), rand(dirs, g * h, i), rand(dirs, g * h, h), rand(dirs, 2 * g * h)]
    xs.append(rng.integers(1, t + 1, b).astype(np.int32) if lens else None)
    xs.append(rand(dirs, b, h) if init else None)
    if op_type == "LSTM":
        xs.append(rand(dirs, b, h) if init else None)
        xs.append(rand(dirs, 3 * h) if peep else None)
    while xs and xs[-1] is None:
        xs.pop()
    return xs


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lens", [False, True], ids=["full", "seq_lens"])
def test_recurrent_directions(op_type, direction, lens):
    dirs = 2 if direction == "bidirectional" else 1
    h = 5
    xs = _inputs(op_type, 6, 3, 4, h, dirs, lens=lens, init=True)
    n_out = 3 if op_type == "LSTM" else 2
    check(op_type, xs, n_out, opset=14, oracle="ort", rtol=1e-5, atol=1e-5,
          hidden_size=h, direction=direction, const_inputs=[1, 2, 3])


def test_lstm_peepholes_clip_input_forget():
    h = 4
    xs = _inputs("LSTM", 5, 2, 3, h, 2, lens=True, init=True, peep=True)
    check("LSTM", xs, 3, opset=14, oracle="ort", rtol=1e-5, atol=1e-5, hidden_size=h,
          direction="bidirectional", clip=0.7, input_forget=1)


def test_gru_linear_before_reset_runtime_weights():
    h = 6
    xs = _inputs("GRU", 4, 3, 5, h, 1, lens=False, init=False)
    check("GRU", xs, 2, opset=14, oracle="ort", rtol=1e-5, atol=1e-5, hidden_size=h,
          linear_before_reset=1)


def test_rnn_activations_with_alpha_beta():
    h = 3
    xs = _inputs("RNN", 4, 2, 3, h, 2, lens=False, init=False)
    check("RNN", xs, 2, opset=14, oracle="ort", rtol=1e-5, atol=1e-5, hidden_size=h,
          direction="bidirectional", activations=["LeakyRelu", "Affine"],
          activation_alpha=[0.1, 0.5], activation_beta=[0.2])


def test_lstm_layout_1_matches_layout_0():
    from ._oracle import ours

    h = 4
    xs = _inputs("LSTM", 5, 3, 2, h, 2, lens=True, init=True)
    ref = ours("LSTM", xs, 3, opset=14, hidden_size=h, direction="bidirectional")
    xs1 = list(xs)
    xs1[0] = np.ascontiguousarray(xs[0].transpose(1, 0, 2))
    xs1[5] = np.ascontiguousarray(xs[5].transpose(1, 0, 2))
    xs1[6] = np.ascontiguousarray(xs[6].transpose(1, 0, 2))
    got = ours("LSTM", xs1, 3, opset=14, hidden_size=h, direction="bidirectional", layout=1)
    np.testing.assert_allclose(got[0], ref[0].transpose(2, 0, 1, 3), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1], ref[1].transpose(1, 0, 2), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[2], ref[2].transpose(1, 0, 2), rtol=1e-6, atol=1e-6)
