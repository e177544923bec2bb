"""Types and shapes of onnxruntime's contrib quantized ops (onnx's inference does not know
them), and what that unlocks downstream (_contrib_shapes)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import onnxplex
from onnxplex import load_model

MS = "com.microsoft"
U8 = TP.UINT8


def _scalars(prefix: str, scale: float, zp: int, dt=U8) -> list[onnx.TensorProto]:
    return [helper.make_tensor(f"{prefix}s", TP.FLOAT, [], [scale]),
            helper.make_tensor(f"{prefix}z", dt, [], [zp])]


def _shape(model: onnxplex.Model, name: str):
    info = model.value_info(name)
    return info.elem_type, info.shape


def _model(nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                               helper.make_opsetid(MS, 1)])


@pytest.mark.parametrize("channels_last", [0, 1])
def test_each_contrib_op_gets_onnxruntimes_output_shape(channels_last):
    x_shape = ["N", 8, 6, 5] if not channels_last else ["N", 6, 5, 8]
    nodes = [
        helper.make_node("QLinearAdd", ["x", "as", "az", "g", "as", "az", "cs", "cz"], ["add"],
                         domain=MS),
        helper.make_node("QLinearMul", ["add", "cs", "cz", "x", "as", "az", "cs", "cz"],
                         ["mul"], domain=MS),
        helper.make_node("QLinearSigmoid", ["mul", "cs", "cz", "cs", "cz"], ["sig"], domain=MS),
        helper.make_node("QLinearGlobalAveragePool", ["sig", "cs", "cz", "cs", "cz"], ["pool"],
                         domain=MS, channels_last=channels_last),
        helper.make_node("QLinearConcat", ["cs", "cz", "x", "as", "az", "sig", "cs", "cz"],
                         ["cat"], domain=MS, axis=-1 if channels_last else 1),
        # (graph outputs keep their declared types: the checked values are intermediates)
        helper.make_node("Identity", ["pool"], ["pool_out"]),
        helper.make_node("Identity", ["cat"], ["cat_out"]),
    ]
    g_shape = [1, 1, 1, 5] if not channels_last else [1, 1, 1, 8]
    model = _model(nodes, [helper.make_tensor_value_info("x", U8, x_shape),
                           helper.make_tensor_value_info("g", U8, g_shape)],
                   [helper.make_tensor_value_info(n, U8, None) for n in ("pool_out", "cat_out")],
                   _scalars("a", 0.02, 128) + _scalars("c", 0.03, 120))
    m = load_model(model)
    for name in ("add", "mul", "sig"):
        assert _shape(m, name) == (U8, tuple(x_shape))
    pooled = ("N", 1, 1, 8) if channels_last else ("N", 8, 1, 1)
    assert _shape(m, "pool") == (U8, pooled)
    cat = ("N", 6, 5, 16) if channels_last else ("N", 16, 6, 5)
    assert _shape(m, "cat") == (U8, cat)


def test_qgemm_where_and_matmul_to_float_shapes():
    nodes = [
        helper.make_node("QGemm", ["a", "as", "az", "b", "as", "az", "", "cs", "cz"], ["q"],
                         domain=MS, transB=1),
        helper.make_node("QGemm", ["a", "as", "az", "b", "as", "az"], ["f"], domain=MS,
                         transB=1),
        helper.make_node("QLinearWhere", ["cond", "q", "cs", "cz", "q", "cs", "cz", "cs", "cz"],
                         ["w"], domain=MS),
        helper.make_node("MatMulIntegerToFloat", ["a", "bt", "as", "as", "az", "az"], ["mf"],
                         domain=MS),
        helper.make_node("Concat", ["f", "mf"], ["fm"], axis=0),
        helper.make_node("Identity", ["w"], ["w_out"]),
    ]
    b = helper.make_tensor("b", TP.UINT8, [7, 4], list(range(28)))
    bt = helper.make_tensor("bt", TP.UINT8, [4, 7], list(range(28)))
    model = _model(nodes, [helper.make_tensor_value_info("a", U8, ["M", 4]),
                           helper.make_tensor_value_info("cond", TP.BOOL, [1, 7])],
                   [helper.make_tensor_value_info("fm", TP.FLOAT, None),
                    helper.make_tensor_value_info("w_out", U8, None)],
                   [b, bt] + _scalars("a", 0.02, 128) + _scalars("c", 0.03, 120))
    m = load_model(model)
    assert _shape(m, "q") == (U8, ("M", 7))
    assert _shape(m, "f") == (TP.FLOAT, ("M", 7))
    assert _shape(m, "w") == (U8, ("M", 7))
    assert _shape(m, "mf") == (TP.FLOAT, ("M", 7))


def test_a_qoperator_residual_chain_runs_channels_last_and_as_onnxruntime():
    """QLinearConv -> QLinearAdd (a residual) -> QLinearConv, as onnxruntime's quantizer
    writes a QOperator model: the second conv's input now has a shape, so the layout pass
    takes both convs channels-last (before, only the first), with onnxruntime's bytes."""
    rng = np.random.default_rng(0)
    c = 16

    def conv(x, w, y):
        return helper.make_node("QLinearConv", [x, "as", "az", w, "ws", "wz", "as", "az"], [y],
                                pads=[1, 1, 1, 1])

    w1 = helper.make_tensor("w1", TP.INT8, [c, c, 3, 3],
                            rng.integers(-100, 100, c * c * 9).tolist())
    w2 = helper.make_tensor("w2", TP.INT8, [c, c, 3, 3],
                            rng.integers(-100, 100, c * c * 9).tolist())
    ws = helper.make_tensor("ws", TP.FLOAT, [], [0.002])
    wz = helper.make_tensor("wz", TP.INT8, [], [0])
    nodes = [conv("x", "w1", "y1"),
             helper.make_node("QLinearAdd", ["y1", "as", "az", "x", "as", "az", "as", "az"],
                              ["r"], domain=MS),
             conv("r", "w2", "y")]
    model = _model(nodes, [helper.make_tensor_value_info("x", U8, [1, c, 9, 9])],
                   [helper.make_tensor_value_info("y", U8, [1, c, 9, 9])],
                   [w1, w2, ws, wz] + _scalars("a", 0.05, 128))
    sess = onnxplex.InferenceSession(model.SerializeToString())
    convs = [v for v in sess.model.node_views if v.op_type == "QLinearConv"]
    assert len(convs) == 2 and all(v.attrs.get("channels_last") == 1 for v in convs)
    feed = {"x": rng.integers(0, 255, (1, c, 9, 9)).astype(np.uint8)}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(sess.run(None, feed)[0], want)


def test_a_model_without_contrib_ops_is_not_inferred_again(monkeypatch):
    from onnxplex.graph import contrib_shapes as _contrib_shapes

    calls = []
    monkeypatch.setattr(_contrib_shapes, "_onnx_outputs",
                        lambda *args: calls.append(args) or {})
    model = _model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TP.FLOAT, [2])], [])
    load_model(model)
    assert calls == []
