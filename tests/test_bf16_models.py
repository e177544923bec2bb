"""bfloat16 models: benchmarks/build_models.py's converter (onnxruntime's float16 tool, the
ops whose schema takes no bfloat16 left in float32, the half type changed) writes valid ONNX
that onnxplex runs close to the float32 model, and benchmarks/half.py times it against
onnxruntime's float32 model where onnxruntime cannot run it."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

pytest.importorskip("onnxruntime.transformers.float16")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.build_models import convert_bf16  # noqa: E402


def _cnn(path: Path) -> None:
    """Conv -> HardSwish -> Conv -> Relu -> GlobalAveragePool -> Flatten -> MatMul -> Add ->
    Softmax, float32."""
    rng = np.random.default_rng(0)
    w = {"w1": rng.standard_normal((8, 3, 3, 3)), "w2": rng.standard_normal((8, 8, 1, 1)) * 0.3,
         "fc": rng.standard_normal((8, 5)), "b": rng.standard_normal(5)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["h"]),
             helper.make_node("Conv", ["h", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_converted_model_is_valid_bfloat16_onnx(tmp_path):
    src, dst = tmp_path / "cnn.onnx", tmp_path / "cnn_bf16.onnx"
    _cnn(src)
    convert_bf16(src, dst)
    model = onnx.load(dst)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)}
    stored = {t.name: t for t in model.graph.initializer}
    assert TensorProto.FLOAT16 not in types.values()
    assert all(t.data_type != TensorProto.FLOAT16 for t in stored.values())
    assert types["x"] == types["y"] == TensorProto.FLOAT   # (keep_io_types)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Cast"] > 0
    # bfloat16 where the schema takes it (the classifier), float32 where it does not (Conv,
    # HardSwish, pooling), the weights rounded from their float32 values
    assert stored["fc"].data_type == TensorProto.BFLOAT16
    src_fc = numpy_helper.to_array(onnx.load(src).graph.initializer[2])
    np.testing.assert_array_equal(numpy_helper.to_array(stored["fc"]),
                                  src_fc.astype(ml_dtypes.bfloat16))
    for node in model.graph.node:
        if node.op_type in ("Conv", "HardSwish", "GlobalAveragePool"):
            assert all(types.get(i, stored[i].data_type if i in stored else None)
                       in (TensorProto.FLOAT, None) for i in node.input), node
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    (want,) = onnxplex.InferenceSession(str(src)).run(None, {"x": x})
    (got,) = onnxplex.InferenceSession(str(dst)).run(None, {"x": x})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-2)   # (bfloat16: 8 bits)


def test_half_benchmark_times_onnxruntime_float32_when_it_cannot_run_bf16(tmp_path):
    from benchmarks import half

    src, dst = tmp_path / "cnn.onnx", tmp_path / "cnn_bf16.onnx"
    _cnn(src)
    convert_bf16(src, dst)
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    r = half.bench(dst, src, feeds, 1, 3)
    assert r["ours_ms"] > 0 and r["theirs_ms"] > 0 and r["ours_err"] < 3e-2
    if r["theirs_why"]:   # (onnxruntime 1.32's CPU provider: no bfloat16 kernels)
        assert r["theirs_err"] is None and r["vs_ort"] is None
    else:
        assert r["theirs_err"] is not None
