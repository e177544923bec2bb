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


def _lstm_model(direction: str, t: int, b: int, i: int, h: int):
    """An LSTM with constant weights and bias, X and initial states fed."""
    from onnx import TensorProto, helper, numpy_helper

    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(3)
    consts = {"W": rng.standard_normal((dirs, 4 * h, i)) * 0.3,
              "R": rng.standard_normal((dirs, 4 * h, h)) * 0.3,
              "B": rng.standard_normal((dirs, 8 * h)) * 0.1}
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["Y", "Y_h", "Y_c"],
                            hidden_size=h, direction=direction)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "lstm",
        [helper.make_tensor_value_info("X", f, [t, b, i]),
         helper.make_tensor_value_info("h0", f, [dirs, b, h]),
         helper.make_tensor_value_info("c0", f, [dirs, b, h])],
        [helper.make_tensor_value_info(n, f, None) for n in ("Y", "Y_h", "Y_c")],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()])
    feeds = {"X": rng.standard_normal((t, b, i)).astype(np.float32),
             "h0": (rng.standard_normal((dirs, b, h)) * 0.5).astype(np.float32),
             "c0": (rng.standard_normal((dirs, b, h)) * 0.5).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_quantize_lstm_as_onnxruntime_quantizes_it(direction, per_channel, tmp_path):
    """onnxruntime's quantize_dynamic turns every LSTM into com.microsoft::DynamicQuantizeLSTM
    (8-bit W and R, transposed, a scale and zero point per direction or per column); no
    provider ran it. cpu_mlas dequantizes the weights once and runs the float LSTM, so it
    differs from onnxruntime only by onnxruntime's rounding of the activations: less than
    onnxruntime's own quantized model differs from the float one."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import onnxplex

    model, feeds = _lstm_model(direction, t=12, b=3, i=16, h=32)
    src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_q.onnx"
    onnx.save(model, src)
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=per_channel)
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in onnx.load(dst).graph.node)
    sess = onnxplex.InferenceSession(str(dst))
    assert [p.provider for p in sess.get_provider_assignment().partitions] == ["cpu_mlas"]
    ours = sess.run(None, feeds)
    theirs = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, feeds)
    exact = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)
    for mine, ref, flt in zip(ours, theirs, exact):
        assert mine.shape == ref.shape and mine.dtype == ref.dtype
        np.testing.assert_allclose(mine, ref, atol=5e-2)   # (measured: up to 0.026)
        # the 8-bit weights are what runs (not the float ones), and nothing else is rounded
        assert 1e-4 < np.abs(mine - flt).max() <= np.abs(ref - flt).max()
