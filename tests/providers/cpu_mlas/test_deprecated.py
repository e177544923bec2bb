"""ONNX's experimental ops of opsets 1 to 9 that onnxruntime still runs (ImageScaler, Crop,
Affine, Scale, ScaledTanh, ParametricSoftplus, DynamicSlice, the old ThresholdedRelu), against
onnxruntime (no provider ran them: onnx has no schema for them)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from kernel_harness import node_model, run_kernel

from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

RNG = np.random.default_rng(5)
IMAGE = (RNG.standard_normal((2, 3, 5, 6)) * 3).astype(np.float32)


def _check(op_type, inputs, *, opset=9, **attrs):
    m = node_model(op_type, inputs, 1, opset=opset, **attrs)
    m.ir_version = 7
    for o in m.graph.output:
        o.ClearField("type")
    feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, feeds)[0]
    got = run_kernel(CpuMlasProvider, op_type, inputs, 1, opset=opset, **attrs)[0]
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("op_type, attrs", [
    ("ImageScaler", {"bias": [1.0, -2.0, 0.5], "scale": 0.25}),
    ("ImageScaler", {"bias": [0.0, 0.0, 0.0]}),
    ("Affine", {"alpha": 2.0, "beta": -1.0}), ("Affine", {}),
    ("Scale", {"scale": 3.0}), ("Scale", {}),
    ("ScaledTanh", {"alpha": 2.0, "beta": 0.5}),
    ("ParametricSoftplus", {"alpha": 2.0, "beta": 0.5}),
    ("ParametricSoftplus", {"alpha": 1.5, "beta": 40.0}),   # exp(beta * x) overflows
    ("ThresholdedRelu", {"alpha": 0.5}), ("ThresholdedRelu", {}),
    ("Crop", {"border": [1, 2, 1, 1]}), ("Crop", {"border": [1, 1, 0, 0], "scale": [2, 3]}),
], ids=lambda v: str(v) if isinstance(v, str) else "-".join(map(str, v)) or "defaults")
def test_deprecated_ops(op_type, attrs, opset):
    _check(op_type, [IMAGE], opset=opset, **attrs)


@pytest.mark.parametrize("axes", [None, [0, 3], [-1]])
def test_dynamic_slice(axes):
    starts = np.array([1, 2] if axes != [-1] else [2], np.int64)
    ends = np.array([2, 100] if axes != [-1] else [-1], np.int64)
    _check("DynamicSlice", [IMAGE, starts, ends,
                            None if axes is None else np.array(axes, np.int64)])


def test_crop_outside_the_image_is_refused():
    with pytest.raises(Exception, match="fall outside the 5 x 6 image"):
        run_kernel(CpuMlasProvider, "Crop", [IMAGE], 1, opset=9, border=[0, 0, 0, 0],
                   scale=[6, 2])


@pytest.mark.parametrize("op_type", ["ScaledTanh", "ParametricSoftplus"])
def test_alpha_and_beta_are_required(op_type):
    """onnxruntime has no defaults for them and refuses the node; so does cpu_mlas, saying
    why."""
    from onnxplex import load_model

    view = load_model(node_model(op_type, [IMAGE], 1, opset=9, alpha=2.0)).node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(view)
    assert config is None and "needs its alpha and beta" in reason
