"""Single ops in the forms old converters wrote (opsets 1 to 12), against onnxruntime.

Old model-zoo files and Caffe2/CNTK/CoreML conversions carry attribute forms later opsets
removed: legacy broadcasting (``broadcast``/``axis`` on Add, Mul, Gemm), Softmax's 2-D
coercion, Upsample with ``scales`` as an attribute or input, Pad-2's ``pads`` attribute,
Slice-1 and TopK-1 with attributes, BatchNormalization's ``spatial`` and ``is_test``,
Dropout's ``is_test``, Clip-6's bounds, Split-2, Squeeze/Unsqueeze-1 axes, pools without
``ceil_mode`` and with ``auto_pad``, MaxRoiPool, old Conv/ConvTranspose padding forms. Each
case is one node; where onnxruntime runs it, onnxplex must give its outputs (float32 rtol
1e-4, atol 1e-5; others exactly). onnxruntime has no kernel for some opset-6 forms
(broadcast Add/Gemm, Concat-1, Dropout-6, PRelu-6, AveragePool-1, BatchNormalization-6,
InstanceNormalization-1): onnxplex must still run them, giving the result of the same op at
the next opset it was defined at (the forms agree there).

Found by this sweep and fixed: MaxRoiPool rounded half-pixel corners to even where
onnxruntime (C's round) rounds them away from zero.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnxplex

ort.set_default_logger_severity(4)
R = np.random.default_rng(0)


def f(*s):
    return R.standard_normal(s).astype(np.float32)


X4 = f(2, 3, 5, 6)
X2 = f(3, 4)


def C(a):  # noqa: N802 - a constant input (an initializer)
    return ("const", a)


CASES = [
    ("Add", 6, dict(broadcast=1, axis=1), [X4, f(3)]),
    ("Add", 6, dict(broadcast=1), [X4, f(6)]),
    ("Add", 6, dict(broadcast=1, axis=0), [X4, f(2, 3)]),
    ("Mul", 6, dict(broadcast=1, axis=1), [X4, f(3, 1)]),
    ("Sub", 6, dict(broadcast=1, axis=2), [X4, f(5, 6)]),
    ("Div", 6, dict(broadcast=1, axis=1), [X4, f(3) + 3]),
    ("Add", 6, {}, [X4, f(2, 3, 5, 6)]),
    ("Gemm", 6, dict(broadcast=1, transB=1), [X2, f(5, 4), f(5)]),
    ("Gemm", 6, dict(broadcast=0), [X2, f(4, 5), f(3, 5)]),
    ("Gemm", 7, dict(alpha=0.5, beta=2.0), [X2, f(4, 5), f(5)]),
    ("Softmax", 11, dict(axis=1), [X4]),
    ("Softmax", 11, {}, [X4]),
    ("Softmax", 1, dict(axis=2), [X4]),
    ("LogSoftmax", 11, dict(axis=1), [X4]),
    ("Hardmax", 11, dict(axis=2), [X4]),
    ("Softmax", 11, dict(axis=-1), [X4]),
    ("Concat", 1, {}, [X4, X4]),
    ("Concat", 4, dict(axis=2), [X4, X4]),
    ("Reshape", 1, dict(shape=[2, -1]), [X4]),
    ("Reshape", 5, {}, [X4, C(np.array([6, 0, -1], np.int64))]),
    ("Pad", 2, dict(pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="reflect"), [X4]),
    ("Pad", 2, dict(pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="edge"), [X4]),
    ("Pad", 2, dict(pads=[0, 1, 1, 2, 0, 0, 2, 1], value=1.5), [X4]),
    ("Slice", 1, dict(starts=[1, 0], ends=[3, 100], axes=[2, 3]), [X4]),
    ("Slice", 1, dict(starts=[0, 1], ends=[1, -1]), [X4]),
    ("TopK", 1, dict(k=3), [X4]),
    ("TopK", 1, dict(k=2, axis=2), [X4]),
    ("Dropout", 6, dict(is_test=1), [X4]),
    ("Dropout", 7, dict(ratio=0.3), [X4]),
    ("Dropout", 10, {}, [X4]),
    ("Upsample", 7, dict(scales=[1.0, 1.0, 2.0, 3.0], mode="nearest"), [X4]),
    ("Upsample", 7, dict(scales=[1.0, 1.0, 2.0, 2.0], mode="linear"), [X4]),
    ("Upsample", 9, dict(mode="nearest"), [X4, C(np.array([1, 1, 2, 2], np.float32))]),
    ("Upsample", 9, dict(mode="linear"), [X4, C(np.array([1, 1, 1.5, 2], np.float32))]),
    ("Resize", 10, dict(mode="linear"), [X4, C(np.array([1, 1, 2, 2], np.float32))]),
    ("Resize", 10, dict(mode="nearest"), [X4, C(np.array([1, 1, 1.7, 2.4], np.float32))]),
    (
        "Resize",
        11,
        dict(mode="linear"),
        [X4, C(np.array([], np.float32)), C(np.array([1, 1, 2, 2], np.float32))],
    ),
    (
        "BatchNormalization",
        6,
        dict(is_test=1, spatial=1),
        [X4, f(3), f(3), f(3), np.abs(f(3)) + 0.5],
    ),
    ("BatchNormalization", 7, dict(spatial=1), [X4, f(3), f(3), f(3), np.abs(f(3)) + 0.5]),
    (
        "BatchNormalization",
        7,
        dict(spatial=0),
        [X4, f(3, 5, 6), f(3, 5, 6), f(3, 5, 6), np.abs(f(3, 5, 6)) + 0.5],
    ),
    ("BatchNormalization", 9, {}, [X4, f(3), f(3), f(3), np.abs(f(3)) + 0.5]),
    ("Clip", 6, dict(min=-0.5, max=0.7), [X4]),
    ("Clip", 6, {}, [X4]),
    ("Split", 2, dict(axis=1, split=[1, 2]), [X4]),
    ("Split", 2, dict(axis=3), [X4]),
    ("Split", 11, dict(axis=2, split=[2, 3]), [X4]),
    ("Squeeze", 1, dict(axes=[0]), [f(1, 3, 4)]),
    ("Unsqueeze", 1, dict(axes=[0, 3]), [X2]),
    ("ReduceMean", 1, dict(axes=[2, 3]), [X4]),
    ("ReduceSum", 11, dict(axes=[1], keepdims=0), [X4]),
    ("ReduceMax", 1, {}, [X4]),
    ("ArgMax", 1, dict(axis=2), [X4]),
    ("ArgMax", 12, dict(axis=2, select_last_index=1), [np.round(X4)]),
    ("Flatten", 1, dict(axis=2), [X4]),
    ("Flatten", 9, dict(axis=0), [X4]),
    ("MaxPool", 1, dict(kernel_shape=[2, 2], strides=[2, 2]), [X4]),
    ("MaxPool", 8, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [X4]),
    ("MaxPool", 10, dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), [X4]),
    ("AveragePool", 1, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [X4]),
    ("AveragePool", 7, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), [X4]),
    ("AveragePool", 1, dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER"), [X4]),
    ("Conv", 1, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [X4, C(f(4, 3, 3, 3)), C(f(4))]),
    ("Conv", 1, dict(auto_pad="SAME_UPPER", strides=[2, 2]), [X4, C(f(4, 3, 3, 3))]),
    ("Conv", 1, dict(auto_pad="SAME_LOWER", strides=[2, 2]), [X4, C(f(4, 3, 2, 2))]),
    ("Conv", 1, dict(auto_pad="VALID", dilations=[2, 1]), [X4, C(f(4, 3, 2, 2))]),
    ("ConvTranspose", 1, dict(strides=[2, 2], output_padding=[1, 0]), [X4, C(f(3, 2, 3, 3))]),
    ("ConvTranspose", 1, dict(strides=[2, 2], output_shape=[11, 13]), [X4, C(f(3, 2, 3, 3))]),
    ("ConvTranspose", 1, dict(strides=[2, 2], auto_pad="SAME_UPPER"), [X4, C(f(3, 2, 3, 3))]),
    ("LRN", 1, dict(size=3, alpha=0.001, beta=0.75, bias=1.0), [X4]),
    ("PRelu", 6, {}, [X4, C(f(3, 1, 1))]),
    ("PRelu", 7, {}, [X4, C(f(3, 1, 1))]),
    ("PRelu", 9, {}, [X4, C(f(3, 1, 1))]),
    ("LeakyRelu", 6, {}, [X4]),
    ("Elu", 6, {}, [X4]),
    ("Selu", 6, {}, [X4]),
    ("HardSigmoid", 6, {}, [X4]),
    ("Sum", 6, {}, [X4, X4, X4]),
    ("Sum", 8, {}, [X4, f(5, 6)]),
    ("Max", 6, {}, [X4, X4 * 2]),
    ("Mean", 8, {}, [X4, f(6)]),
    ("Gather", 1, dict(axis=1), [X4, np.array([2, 0], np.int64)]),
    ("Transpose", 1, {}, [X4]),
    ("Tile", 6, {}, [X2, C(np.array([2, 3], np.int64))]),
    ("Expand", 8, {}, [f(3, 1), C(np.array([2, 3, 4], np.int64))]),
    ("InstanceNormalization", 6, {}, [X4, f(3), f(3)]),
    ("MeanVarianceNormalization", 9, {}, [X4]),
    ("GlobalAveragePool", 1, {}, [X4]),
    ("GlobalMaxPool", 1, {}, [X4]),
    ("GlobalLpPool", 2, dict(p=3), [X4]),
    ("LpPool", 2, dict(kernel_shape=[2, 2], p=2), [X4]),
    ("LpNormalization", 1, dict(axis=1, p=1), [X4]),
    (
        "MaxRoiPool",
        1,
        dict(pooled_shape=[2, 2], spatial_scale=0.5),
        [X4, C(np.array([[0, 1, 1, 6, 8], [1, 0, 0, 4, 4]], np.float32))],
    ),
    ("DepthToSpace", 1, dict(blocksize=2), [f(1, 8, 2, 3)]),
    ("DepthToSpace", 11, dict(blocksize=2, mode="CRD"), [f(1, 8, 2, 3)]),
    ("SpaceToDepth", 1, dict(blocksize=2), [f(1, 2, 4, 6)]),
    ("Cast", 6, dict(to=TP.INT32), [X4 * 10]),
    ("Cast", 9, dict(to=TP.STRING), [X2]),
    ("Shrink", 9, dict(lambd=0.5, bias=0.2), [X4]),
    ("ThresholdedRelu", 10, dict(alpha=0.3), [X4]),
    ("Mod", 10, dict(fmod=1), [X4 * 5, np.full_like(X4, 1.5)]),
    ("Where", 9, {}, [X4 > 0, X4, -X4]),
    ("NonZero", 9, {}, [X2 > 0]),
    (
        "OneHot",
        9,
        dict(axis=-1),
        [
            np.array([0, 2, 1], np.int64),
            C(np.array(4, np.int64)),
            C(np.array([0.0, 1.0], np.float32)),
        ],
    ),
    ("Compress", 9, dict(axis=1), [X4, np.array([True, False, True])]),
    ("EyeLike", 9, dict(k=1), [X2]),
    (
        "ConstantOfShape",
        9,
        dict(value=numpy_helper.from_array(np.array([2.5], np.float32))),
        [C(np.array([2, 3], np.int64))],
    ),
    ("Erf", 9, {}, [X4]),
    ("Sign", 9, {}, [X4]),
    ("IsNaN", 9, {}, [X4]),
    ("Sinh", 9, {}, [X4]),
    ("MatMul", 1, {}, [f(2, 3, 4), f(4, 5)]),
    ("Identity", 1, {}, [X4]),
    ("Size", 1, {}, [X4]),
    ("Shape", 1, {}, [X4]),
    ("Pow", 7, {}, [np.abs(X4), f(6)]),
    ("Less", 7, {}, [X4, f(6)]),
    ("Equal", 7, {}, [np.array([1, 2, 3], np.int32), np.array([1, 0, 3], np.int32)]),
    ("Not", 1, {}, [X4 > 0]),
    ("And", 7, {}, [X4 > 0, X4 < 1]),
    ("Neg", 6, {}, [X4]),
    ("Abs", 6, {}, [X4]),
    ("Floor", 6, {}, [X4]),
    ("Sqrt", 6, {}, [np.abs(X4)]),
    ("Reciprocal", 6, {}, [X4]),
    ("Exp", 6, {}, [X4]),
    ("Log", 6, {}, [np.abs(X4) + 0.1]),
    ("Tanh", 6, {}, [X4]),
    ("Sigmoid", 6, {}, [X4]),
    ("Softplus", 1, {}, [X4]),
    ("Softsign", 1, {}, [X4]),
    ("Min", 8, {}, [X4, f(6)]),
    ("InstanceNormalization", 1, dict(epsilon=1e-3), [X4, f(3), f(3)]),
]


# opset-6 forms onnxruntime has no kernel for, and the later opset whose form they equal
_ONLY_ONNXPLEX = {
    ("Add", 6): 7,
    ("Mul", 6): 7,
    ("Sub", 6): 7,
    ("Div", 6): 7,
    ("Gemm", 6): 7,
    ("Concat", 1): 4,
    ("Dropout", 6): 7,
    ("PRelu", 6): 7,
    ("AveragePool", 1): 7,
    ("BatchNormalization", 6): 7,
    ("InstanceNormalization", 1): 6,
}


def _model(op, opset, attrs, inputs):
    ins, vis, inits, feeds = [], [], [], {}
    for k, a in enumerate(inputs):
        name = f"i{k}"
        ins.append(name)
        if isinstance(a, tuple):
            inits.append(numpy_helper.from_array(a[1], name))
        else:
            a = np.asarray(a)
            vis.append(
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
                )
            )
            feeds[name] = a
    if op == "Split":
        n_out = len(attrs["split"]) if "split" in attrs else 2
    else:
        n_out = 2 if op == "TopK" else 1
    outs = [f"o{k}" for k in range(n_out)]
    g = helper.make_graph(
        [helper.make_node(op, ins, outs, **attrs)],
        "g",
        vis,
        [helper.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outs],
        initializer=inits,
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", opset)], ir_version=3 if opset < 8 else 7
    )
    for o in m.graph.output:
        o.ClearField("type")
    return m.SerializeToString(), feeds


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


_LEGACY = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "Div": np.divide}


@pytest.mark.parametrize(
    "op, opset, attrs, inputs", CASES, ids=[f"{c[0]}-{c[1]}-{k}" for k, c in enumerate(CASES)]
)
def test_old_form_matches_onnxruntime(op, opset, attrs, inputs):
    m, feeds = _model(op, opset, attrs, inputs)
    got = onnxplex.InferenceSession(m).run(None, feeds)
    if op in _LEGACY and attrs.get("broadcast"):
        # legacy broadcasting: B's dims line up with A's from ``axis`` on (by default the
        # trailing ones), which later opsets' numpy rules do not do
        a, b = (np.asarray(x) for x in inputs)
        axis = attrs.get("axis", a.ndim - b.ndim)
        want = [_LEGACY[op](a, b.reshape((1,) * axis + b.shape + (1,) * (a.ndim - axis - b.ndim)))]
        _same(got, want)
        return
    later = _ONLY_ONNXPLEX.get((op, opset))
    if later is not None:  # onnxruntime has no kernel: compare with the later opset's form
        plain = {
            k: v
            for k, v in attrs.items()
            if k not in ("broadcast", "is_test", "spatial") or (k == "spatial" and v != 1)
        }
        if op == "Concat":
            plain.setdefault("axis", 1)  # (Concat-1's default)
        m, feeds = _model(op, later, plain, inputs)
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)
    _same(got, want)
