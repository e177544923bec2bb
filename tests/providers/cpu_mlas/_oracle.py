"""Test oracles for cpu_mlas kernels: onnxruntime, or onnx's reference evaluator where ORT lacks
the op, opset or dtype. Used by the kernel tests only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from kernel_harness import node_model
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import op_conv, op_qlinear_conv, op_qlinear_matmul

from onnxplex import ProviderContext, load_model
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

ORT_MAX_OPSET = 26

_SESSION_OPTIONS = ort.SessionOptions()
_SESSION_OPTIONS.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
_SESSION_OPTIONS.intra_op_num_threads = 1
_SESSION_OPTIONS.inter_op_num_threads = 1


def typed_model(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1,
                **kw) -> onnx.ModelProto:
    """``node_model`` with its outputs' types filled in by shape inference (ORT needs them)."""
    m = node_model(op_type, inputs, n_outputs, **kw)
    for o in m.graph.output:
        o.ClearField("type")
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in m.graph.output:
        if o.name in types and types[o.name].tensor_type.elem_type:
            o.type.CopyFrom(types[o.name])
    return m


def _feeds(inputs: Sequence[np.ndarray | None], const_inputs: Sequence[int]) -> dict:
    return {f"in{i}": a for i, a in enumerate(inputs)
            if a is not None and i not in const_inputs}


def ort_run(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1,
            **kw) -> list[np.ndarray]:
    m = typed_model(op_type, inputs, n_outputs, **kw)
    sess = ort.InferenceSession(m.SerializeToString(), _SESSION_OPTIONS,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, _feeds(inputs, kw.get("const_inputs", ())))


def requantize_f32(acc: np.ndarray, multiplier: np.ndarray, y_zero_point: np.ndarray | None,
                   dtype: np.dtype) -> np.ndarray:
    """onnxruntime's (MLAS's) requantization of exact integer sums, written out here: the sum
    and the product by the float32 multiplier each rounded to float32, clamped to the range
    less the zero point, rounded half to even, the zero point added."""
    zp = np.float32(0) if y_zero_point is None else np.asarray(y_zero_point).astype(np.float32)
    info = np.iinfo(dtype)
    f = acc.astype(np.float32) * np.asarray(multiplier, np.float32)
    f = np.minimum(np.maximum(f, info.min - zp), info.max - zp)
    return (np.rint(f) + zp).astype(dtype)


class QLinearConv(op_qlinear_conv.QLinearConv):
    """onnx's QLinearConv with onnxruntime's float32 requantization (onnx's multiplies the
    int32 sums in float64, which rounds a value within a float32 rounding of a half the other
    way: one step apart)."""

    op_domain = ""   # (the evaluator takes a new op by its class name)

    def _run(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
             B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None, pads=None,
             strides=None):
        X = x.astype(np.int32) - (0 if x_zero_point is None else x_zero_point.astype(np.int32))
        W = w.astype(np.int32)
        if w_zero_point is not None:
            zp = w_zero_point.astype(np.int32)
            W -= zp.reshape((-1,) + (1,) * (W.ndim - 1)) if zp.ndim == 1 else zp
        acc = op_conv._conv_implementation(
            X, W, B, auto_pad or self.auto_pad, dilations or self.dilations,
            group or self.group, kernel_shape or self.kernel_shape, pads or self.pads,
            strides or self.strides).astype(np.int32)
        m = (np.float32(x_scale) * np.asarray(w_scale, np.float32)) / np.float32(y_scale)
        m = m.reshape((1, -1) + (1,) * (acc.ndim - 2)) if m.size > 1 else m
        out = y_zero_point.dtype if y_zero_point is not None else x.dtype
        return (requantize_f32(acc, m, y_zero_point, out),)


class QLinearMatMul(op_qlinear_matmul.QLinearMatMul):
    """onnx's QLinearMatMul with onnxruntime's float32 requantization (see above)."""

    op_domain = ""

    def _run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        A = a.astype(np.int32) - (0 if a_zero_point is None else a_zero_point.astype(np.int32))
        B = b.astype(np.int32) - (0 if b_zero_point is None else b_zero_point.astype(np.int32))
        m = (np.asarray(a_scale, np.float32) * np.asarray(b_scale, np.float32)) \
            / np.asarray(y_scale, np.float32)
        out = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return (requantize_f32(np.matmul(A, B), m, y_zero_point, out),)


def ref_run(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1,
            **kw) -> list[np.ndarray]:
    """onnx's reference evaluator; its QLinearConv and QLinearMatMul requantize as onnxruntime
    does (float32), as cpu_mlas does."""
    m = node_model(op_type, inputs, n_outputs, **kw)
    ev = ReferenceEvaluator(m, new_ops=[QLinearConv, QLinearMatMul])
    return [np.asarray(r) for r in ev.run(None, _feeds(inputs, kw.get("const_inputs", ())))]


def oracle_run(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1, *,
               oracle: str = "auto", **kw) -> list[np.ndarray]:
    """ORT when it can run the node, else the reference evaluator (``oracle`` forces one)."""
    if oracle == "ref" or (oracle == "auto" and kw.get("opset", 21) > ORT_MAX_OPSET):
        return ref_run(op_type, inputs, n_outputs, **kw)
    try:
        m = typed_model(op_type, inputs, n_outputs, **kw)
        sess = ort.InferenceSession(m.SerializeToString(), _SESSION_OPTIONS,
                                providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - ORT has no kernel for this op/opset/dtype
        if oracle == "ort":
            raise
        return ref_run(op_type, inputs, n_outputs, **kw)
    return sess.run(None, _feeds(inputs, kw.get("const_inputs", ())))


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: kernels must not write into their inputs."""
    if not isinstance(a, np.ndarray):
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def ours(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1,
         **kw) -> tuple[np.ndarray, ...]:
    """Like ``kernel_harness.run_kernel``, but constant inputs are passed as the executor passes
    them: the initializer's read-only array as loaded (numpy bytes for strings)."""
    model = load_model(node_model(op_type, inputs, n_outputs, **kw))
    node = model.node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    kernel = config.factory(node, ProviderContext())
    args = [None if a is None else (node.inputs[i].const if node.inputs[i].const is not None
                                    else _readonly(a)) for i, a in enumerate(inputs)]
    with np.errstate(all="ignore"):   # as a session runs its kernels
        out = kernel(*args)
    return out if isinstance(out, tuple) else (out,)


def assert_same(got: Sequence[np.ndarray], want: Sequence[np.ndarray], *, rtol: float = 1e-6,
                atol: float = 1e-6, check_dtype: bool = True) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), f"output {k} is {type(g).__name__}, not ndarray"
        if check_dtype:
            assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"output {k}: shape {g.shape} != {w.shape}"
        if g.dtype == object or g.dtype.kind in "biuSU":
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=f"output {k}")


def check(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1, *,
          oracle: str = "auto", rtol: float = 1e-6, atol: float = 1e-6,
          check_dtype: bool = True, **kw) -> tuple[np.ndarray, ...]:
    """Run the node through cpu_mlas and the oracle and compare outputs (dtype exactly)."""
    got = ours(op_type, inputs, n_outputs, **kw)
    want = oracle_run(op_type, inputs, n_outputs, oracle=oracle, **kw)
    assert_same(got, want, rtol=rtol, atol=atol, check_dtype=check_dtype)
    return got
