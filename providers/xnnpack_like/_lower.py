"""Lowering, op type by op type: each function turns one claimed node (with the nodes a
pattern folded into it) into an op of the plan, choosing layouts, the matched variant and the
kernel (Kleidi where it runs, else the own implementation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ValueInfo

from . import _mlas
from . import _tables as T
from ._ops_base import (
    CHANNELS_LAST,
    F16,
    F32,
    LOGICAL,
    TO_L,
    Activation,
    Label,
    Op,
    Requantizer,
    phys_axis,
    scale_multiplier,
)
from ._ops_conv import ConvGeometry, ConvOwn, KleidiPointwiseConv, QConvOwn, conv_strategy
from ._ops_elementwise import (
    AffineChannelOp,
    BiasActivationOp,
    BinaryOp,
    CastOp,
    LayerNormOp,
    SoftmaxOp,
    UnaryOp,
)
from ._ops_matmul import (
    BatchMatMulOwn,
    DynQuantFCOwn,
    FCOwn,
    KleidiBatchMatMul,
    KleidiDynQuantFC,
    KleidiFC,
    KleidiNBits,
    MatMulIntegerOwn,
    MatMulIntegerToFloatOwn,
    QFCOwn,
    dequantize_nbits,
)
from ._ops_pool import AveragePoolOp, ConcatOp, MaxPoolOp, ReduceOp, ReshapeOp, ViewOp
from ._ops_quant import DequantizeOp, DynamicQuantizeOp, QuantizeOp
from ._patterns import QdqMatch, act_of
from ._plan import Planner, Val, lowers, np_dtype
from ._support import MS, s_attr

CONV_IMPL = {"pointwise": "own:gemm_nhwc", "im2col": "own:im2col_gemm",
             "depthwise": "own:depthwise_taps", "grouped": "own:grouped_im2col_gemm"}
QCONV_IMPL = {k: v.replace("own:", "own:int8_") for k, v in CONV_IMPL.items()}

def _label(node: NodeView, op_class: str, variant: str, kernel: str,
           members: Sequence[NodeView] = ()) -> Label:
    return Label(node.display_name, node.op_type,
                 (node.index, *(m.index for m in members)), op_class, variant, kernel)


def _why(st: T.KleidiStatus) -> str:
    return f" [Kleidi: {st.why}]" if not st.available else ""


def _act_text(act: Activation) -> str:
    return f" + {act.describe()}" if act else ""


# ---- convolution -----------------------------------------------------------------------------


def _geometry(node: NodeView, kernel: Sequence[int]) -> ConvGeometry:
    return ConvGeometry(kernel, node.attr("strides", None), node.attr("dilations", None),
                        node.attr("pads", None), s_attr(node, "auto_pad", "NOTSET"))


def _conv_variant(node: NodeView, w_shape: Sequence[int], group: int, geom: ConvGeometry,
                  dtype: np.dtype) -> str | None:
    """The conv2d table entry the node matches, else the reason (a string starting 'none')."""
    m, cg, kh, kw = w_shape
    if dtype != F32:
        return "none: fp16 convolution (the conv2d table has no pf16 variant)"
    if group > 1:
        kind = "depthwise" if cg == 1 and m == group else "grouped"
        return (f"none: {kind} (group={group}); pf32_gemm is for pointwise convolutions with "
                "group=1")
    if (kh, kw) != (1, 1):
        return f"none: {kh}x{kw} kernel; pf32_gemm is for pointwise (1x1) convolutions"
    if geom.pads_1x1:
        return "none: 1x1 kernel with padding; pf32_gemm needs an unpadded pointwise conv"
    return "pf32_gemm"


@lowers("Conv")
@lowers("FusedConv", domain=MS)
def _lower_conv(p: Planner, node: NodeView) -> None:
    m = p.pat.qdq.get(node.index)
    if isinstance(m, QdqMatch):
        return _lower_qconv(p, node, m)
    x, w, b = node.input(0), node.input(1), node.input(2)
    ep = p.pat.epilogue(node)
    act, members, out = ep.act, ep.members, ep.out
    z = node.input(3) if node.op_type == "FusedConv" else ep.residual
    w_shape = tuple(int(d) for d in w.shape)
    group = int(node.attr("group", 1))
    geom = _geometry(node, w_shape[2:])
    dtype = np_dtype(x.elem_type) or F32
    variant = _conv_variant(node, w_shape, group, geom, dtype)
    if isinstance(m, str):
        variant = f"none: QDQ conv but not pqs8_qc8w_gemm: {m}"
    st = p.kleidi(T.CONV2D, variant) if not variant.startswith("none") else None
    runtime_w = not (p.is_const(w.name) and p.is_const(None if b is None else b.name))
    epilogue = (" + BatchNorm folded" if ep.bn is not None else "") + \
        (" + residual Add" if z is not None else "") + _act_text(act)
    own_kernel = CONV_IMPL[conv_strategy(w_shape, group, geom)] + epilogue + \
        (" [weights packed per run: not constant here]" if runtime_w else "")
    own = _label(node, T.CONV2D, variant, own_kernel + (_why(st) if st else ""), members)
    xin = p.use(x.name, CHANNELS_LAST)
    zin = [p.use(z.name, CHANNELS_LAST)] if z is not None else []

    def weights() -> tuple[np.ndarray, np.ndarray | None]:
        wv, bv = p.const(w.name), p.const(None if b is None else b.name)
        if ep.bn is None:
            return wv, bv
        gamma, beta, mean, var = (np.asarray(ep.bn.input(i).const, np.float64)
                                  for i in (1, 2, 3, 4))
        scale = gamma / np.sqrt(var + float(ep.bn.attr("epsilon", 1e-5)))
        wf = np.asarray(wv, np.float64) * scale.reshape(-1, 1, 1, 1)
        bf = (0.0 if bv is None else np.asarray(bv, np.float64)) - mean
        return wf.astype(F32), (bf * scale + beta).astype(F32)

    def make_own(label: Label) -> Op:
        if runtime_w:
            return ConvOwn(label, None, None, group, geom, act, dtype, z is not None,
                           runtime_weights=True, runtime_bias=b is not None)
        return ConvOwn(label, *weights(), group, geom, act, dtype, z is not None)

    if runtime_w:
        ins = [xin, w.name] + ([b.name] if b is not None else []) + zin
        p.emit(node, own, lambda: make_own(own), ins, [(out, CHANNELS_LAST)], members)
        return
    if st is not None and st.available:
        k_label = _label(node, T.CONV2D, variant, f"kleidi:{st.kernel}" + epilogue, members)
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiPointwiseConv(
                k_label, mod, var, *weights(), geom.strides, act, z is not None,
                p.opt.threads), own, make_own)
    elif p.mlas():
        label = _label(node, T.CONV2D, variant, _mlas.conv_kernel(w_shape, group) + epilogue +
                       (_why(st) if st else ""), members)

        def make() -> Op:
            return _mlas.MlasConv(label, *weights(), group, geom, act, dtype, z is not None)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [xin, *zin], [(out, CHANNELS_LAST)], members)


def _zero_point(v: ValueInfo | None) -> int:
    return 0 if v is None else int(np.asarray(v.const).reshape(-1)[0])


def _qdq_requantizer(m: QdqMatch) -> Requantizer:
    """The output stage of a QDQ group: zero points, multiplier, int32 / float bias."""
    xs = float(np.asarray(m.dq_x.input(1).const).reshape(-1)[0])
    xz = _zero_point(m.dq_x.input(2))
    wsc = np.asarray(m.dq_w.input(1).const, F32).reshape(-1)
    ys = float(np.asarray(m.q.input(1).const).reshape(-1)[0])
    yz = _zero_point(m.q.input(2))
    out_dtype = np_dtype(m.q.outputs[0].elem_type)
    mult = scale_multiplier(xs, wsc, ys)
    alpha = float(m.node.attr("alpha", 1.0)) if m.node.op_type == "Gemm" else 1.0
    beta = float(m.node.attr("beta", 1.0)) if m.node.op_type == "Gemm" else 1.0
    mult = mult * alpha
    bias_q = bias_f = None
    if m.dq_b is not None:
        bq = np.asarray(m.dq_b.input(0).const, np.float64).reshape(-1)
        bs = np.asarray(m.dq_b.input(1).const, F32).reshape(-1)
        acc_scale = (np.float32(xs) * wsc).astype(F32) * np.float32(alpha)
        if beta == 1.0 and bs.shape == acc_scale.shape and np.allclose(bs, acc_scale,
                                                                       rtol=1e-6, atol=0):
            bias_q = bq
        else:
            bias_f = bq * bs.astype(np.float64) * beta / ys
    elif m.bias is not None:
        bias_f = np.asarray(m.bias.const, np.float64).reshape(-1) * beta / ys
    return Requantizer(xz, mult, bias_q, bias_f, yz, out_dtype, m.relu is not None)


def _pqs8(p: Planner, op_class: str) -> T.KleidiStatus:
    return p.kleidi(op_class, "pqs8_qc8w_gemm")


def _lower_qconv(p: Planner, node: NodeView, m: QdqMatch) -> None:
    w = m.dq_w.input(0)
    w_shape = tuple(int(d) for d in w.shape)
    group = int(node.attr("group", 1))
    geom = _geometry(node, w_shape[2:])
    st = _pqs8(p, T.CONV2D)
    members = [n for n in (m.q, m.relu) if n is not None]
    impl = QCONV_IMPL[conv_strategy(w_shape, group, geom)] + (" + Relu" if m.relu else "")
    label = _label(node, T.CONV2D, "pqs8_qc8w_gemm", impl + _why(st), members)

    def make() -> Op:
        return QConvOwn(label, w.const, None, group, geom, _qdq_requantizer(m))

    xq = p.use(m.dq_x.input(0).name, CHANNELS_LAST)
    p.emit(node, label, make, [xq], [(m.q.outputs[0].name, CHANNELS_LAST)], members)


def _qlinear_parts(p: Planner, node: NodeView, op_class: str):
    """QLinearConv / QLinearMatMul: (variant, Kleidi note, requantizer factory, weight zero
    point)."""
    wz = node.input(5)
    symmetric = node.input(3).elem_type == TP.INT8 and (wz is None or not np.any(wz.const))
    variant = "pqs8_qc8w_gemm" if symmetric else \
        "none: uint8 or asymmetric weights (pqs8_qc8w needs int8 weights symmetric per channel)"
    why = _why(_pqs8(p, op_class)) if symmetric else ""

    def requantizer() -> Requantizer:
        mult = scale_multiplier(float(node.input(1).const), node.input(4).const,
                                float(node.input(6).const))
        bias = node.input(8) if node.op_type == "QLinearConv" else None
        return Requantizer(_zero_point(node.input(2)), mult, None if bias is None else
                           bias.const, None, _zero_point(node.input(7)),
                           np_dtype(node.outputs[0].elem_type), False)

    return variant, why, requantizer, None if wz is None else wz.const


@lowers("QLinearConv")
def _lower_qlinear_conv(p: Planner, node: NodeView) -> None:
    w = node.input(3)
    w_shape = tuple(int(d) for d in w.shape)
    group = int(node.attr("group", 1))
    geom = _geometry(node, w_shape[2:])
    variant, why, rq, wz = _qlinear_parts(p, node, T.CONV2D)
    label = _label(node, T.CONV2D, variant, QCONV_IMPL[conv_strategy(w_shape, group, geom)] +
                   why)
    p.emit(node, label, lambda: QConvOwn(label, w.const, wz, group, geom, rq()),
           [p.use(node.input(0).name, CHANNELS_LAST)], [(node.outputs[0].name, CHANNELS_LAST)])


# ---- fully connected ---------------------------------------------------------------------------


@lowers("Gemm", "MatMul")
@lowers("FusedGemm", domain=MS)
def _lower_gemm(p: Planner, node: NodeView) -> None:
    a, b = node.input(0), node.input(1)
    if node.op_type == "MatMul" and not (p.is_const(b.name) and p.vals[b.name].rank == 2):
        return _lower_batch_matmul(p, node)
    m = p.pat.qdq.get(node.index)
    if isinstance(m, QdqMatch):
        return _lower_qfc(p, node, m)
    gemm = node.op_type != "MatMul"
    c = node.input(2) if gemm else None
    trans_a = gemm and bool(int(node.attr("transA", 0)))
    trans_b = gemm and bool(int(node.attr("transB", 0)))
    alpha = float(node.attr("alpha", 1.0)) if gemm else 1.0
    beta = float(node.attr("beta", 1.0)) if gemm else 1.0
    dtype = np_dtype(a.elem_type) or F32
    ep = p.pat.epilogue(node)
    act, members, out = ep.act, ep.members, ep.out
    variant = "pf16_gemm" if dtype == F16 else "pf32_gemm"
    if isinstance(m, str):
        variant = f"none: QDQ {node.op_type} but not pqs8_qc8w_gemm: {m}"
    st = p.kleidi(T.FULLY_CONNECTED, variant) if not variant.startswith("none") else None
    own = _label(node, T.FULLY_CONNECTED, variant,
                 "own:gemm_blas" + _act_text(act) + (_why(st) if st else ""), members)

    def weights():
        w = np.asarray(p.const(b.name), F32)
        w = w.T if trans_b else w
        if alpha != 1.0:
            w = w * np.float32(alpha)
        n = w.shape[1]
        bias = c_post = None
        if c is not None:
            cv = np.asarray(p.const(c.name), F32) * np.float32(beta)
            if cv.ndim <= 1 or (cv.ndim == 2 and cv.shape[0] == 1):
                bias = np.ascontiguousarray(np.broadcast_to(cv.reshape(-1), (n,)))
            else:
                c_post = cv
        return w, bias, c_post

    def make_own(label: Label) -> Op:
        w, bias, c_post = weights()
        return FCOwn(label, w, bias, act, dtype, trans_a, c_post)

    if st is not None and st.available:
        k_label = _label(node, T.FULLY_CONNECTED, variant, f"kleidi:{st.kernel}" +
                         _act_text(act), members)

        def make_k(mod, var):
            w, bias, c_post = weights()
            return KleidiFC(k_label, mod, st.kernel.split("/")[0], var, w, bias, act, dtype,
                            p.opt.threads, trans_a, c_post)

        label, make = p.try_kleidi(st, k_label, make_k, own, make_own)
    elif p.mlas():
        label = _label(node, T.FULLY_CONNECTED, variant, "mlas:sgemm" + _act_text(act) +
                       (_why(st) if st else ""), members)

        def make() -> Op:
            w, bias, c_post = weights()
            return _mlas.MlasFC(label, w, bias, act, dtype, trans_a, c_post)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [p.use(a.name, LOGICAL)], [(out, LOGICAL)], members)


def _lower_qfc(p: Planner, node: NodeView, m: QdqMatch) -> None:
    st = _pqs8(p, T.FULLY_CONNECTED)
    members = [n for n in (m.q, m.relu) if n is not None]
    label = _label(node, T.FULLY_CONNECTED, "pqs8_qc8w_gemm",
                   "own:int8_gemm" + (" + Relu" if m.relu else "") + _why(st), members)
    trans_b = node.op_type == "Gemm" and int(node.attr("transB", 0))

    def make() -> Op:
        w = np.asarray(m.dq_w.input(0).const)
        return QFCOwn(label, w.T if trans_b else w, None, _qdq_requantizer(m))

    p.emit(node, label, make, [p.use(m.dq_x.input(0).name, LOGICAL)],
           [(m.q.outputs[0].name, LOGICAL)], members)


@lowers("QLinearMatMul")
def _lower_qlinear_matmul(p: Planner, node: NodeView) -> None:
    variant, why, rq, wz = _qlinear_parts(p, node, T.FULLY_CONNECTED)
    label = _label(node, T.FULLY_CONNECTED, variant, "own:int8_gemm" + why)
    p.emit(node, label, lambda: QFCOwn(label, node.input(3).const, wz, rq()),
           [p.use(node.input(0).name, LOGICAL)], [(node.outputs[0].name, LOGICAL)])


def _lower_batch_matmul(p: Planner, node: NodeView) -> None:
    a, b = node.input(0), node.input(1)
    dtype = np_dtype(a.elem_type) or F32
    ep = p.pat.epilogue(node)
    variant = "pf16_gemm" if dtype == F16 else "pf32_gemm"
    st = p.kleidi(T.BATCH_MATMUL, variant)
    own = _label(node, T.BATCH_MATMUL, variant, "own:matmul_blas" + _act_text(ep.act) +
                 _why(st), ep.members)
    if st.available:
        k_label = _label(node, T.BATCH_MATMUL, variant, f"kleidi:{st.kernel}" +
                         _act_text(ep.act), ep.members)
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiBatchMatMul(
                k_label, mod, st.kernel.split("/")[0], var, dtype, p.opt.threads, ep.act),
            own, lambda lab: BatchMatMulOwn(lab, dtype, ep.act))
    elif p.mlas():
        label = _label(node, T.BATCH_MATMUL, variant, "mlas:matmul_pool" + _act_text(ep.act) +
                       _why(st), ep.members)

        def make() -> Op:
            return _mlas.MlasBatchMatMul(label, dtype, ep.act)
    else:
        label, make = own, (lambda: BatchMatMulOwn(own, dtype, ep.act))
    p.emit(node, label, make, [p.use(a.name, LOGICAL), p.use(b.name, LOGICAL)],
           [(ep.out, LOGICAL)], ep.members)


def _qc8w_problem(w: ValueInfo, z: ValueInfo | None, s: ValueInfo) -> str | None:
    if w.elem_type != TP.INT8:
        return "the weights are uint8 (qc8w needs int8 weights symmetric per channel)"
    if z is not None and np.any(z.const != 0):
        return "the weight zero point is not 0 (asymmetric weights)"
    n = w.const.shape[1]
    if s.const.size not in (1, n):
        return "the weight scale is neither per tensor nor per output channel"
    return None


@lowers("DynamicQuantizeMatMul", domain=MS)
def _lower_dynamic_quantize_matmul(p: Planner, node: NodeView) -> None:
    a, w, s, z, bias = (node.input(i) for i in range(5))
    why = _qc8w_problem(w, z, s)
    variant = "qp8_f32_qc8w_gemm" if why is None else f"none: {why}"
    st = p.kleidi(T.FULLY_CONNECTED, variant) if why is None else None
    ep = p.pat.epilogue(node)
    act, out = ep.act, ep.out
    own = _label(node, T.FULLY_CONNECTED, variant,
                 "own:uint8_dynamic_gemm (ONNX per-tensor uint8 semantics)" + (_why(st) if st
                                                                                else ""))

    def make_own(label: Label) -> Op:
        return DynQuantFCOwn(label, w.const, s.const, None if z is None else z.const,
                             None if bias is None else bias.const, act)

    if st is not None and st.available:
        k_label = _label(node, T.FULLY_CONNECTED, variant, f"kleidi:{st.kernel} (per-row "
                         "int8 activations)")
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiDynQuantFC(
                k_label, mod, var, w.const, s.const, None if bias is None else bias.const,
                act, p.opt.threads), own, make_own)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [p.use(a.name, LOGICAL)], [(out, LOGICAL)])


def _nbits_problem(node: NodeView) -> str | None:
    k, bs = int(node.attr("K")), int(node.attr("block_size"))
    if bs < 32 or bs % 32:
        return f"block_size={bs}: qb4w needs a multiple of 32"
    if k % bs:
        return f"block_size={bs} does not divide K={k}"
    z = node.input(3)
    if z is not None:
        if z.elem_type != TP.UINT8:
            return "float zero points (qb4w needs symmetric weights)"
        if np.any(np.asarray(z.const) != 0x88):
            return "zero points other than 8 (asymmetric int4)"
    return None


@lowers("MatMulNBits", domain=MS)
def _lower_matmul_nbits(p: Planner, node: NodeView) -> None:
    k, n, bs = int(node.attr("K")), int(node.attr("N")), int(node.attr("block_size"))
    b, scales, z, bias = node.input(1), node.input(2), node.input(3), node.input(5)
    why = _nbits_problem(node)
    variant = "qp8_f32_qb4w_gemm" if why is None else f"none: {why}"
    st = p.kleidi(T.FULLY_CONNECTED, variant) if why is None else None
    own = _label(node, T.FULLY_CONNECTED, variant,
                 "own:gemm_blas (int4 dequantized at compile time)" + (_why(st) if st else ""))

    def make_own(label: Label) -> Op:
        w = dequantize_nbits(b.const, scales.const, None if z is None else z.const, k, n, bs)
        return FCOwn(label, w, None if bias is None else bias.const, Activation(), F32)

    if st is not None and st.available:
        k_label = _label(node, T.FULLY_CONNECTED, variant, f"kleidi:{st.kernel}")
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiNBits(
                k_label, mod, var, b.const, scales.const, None if z is None else z.const,
                None if bias is None else bias.const, k, n, bs, p.opt.threads), own, make_own)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [p.use(node.input(0).name, LOGICAL)],
           [(node.outputs[0].name, LOGICAL)])


@lowers("MatMulInteger")
@lowers("MatMulIntegerToFloat", domain=MS)
def _lower_matmul_integer(p: Planner, node: NodeView) -> None:
    """MatMulInteger / MatMulIntegerToFloat: one Kleidi call for a whole dynamic int8 chain
    when its kernel runs here, else the ONNX op itself (exact integer product)."""
    chain = p.pat.dyn.get(node.index)
    st = p.kleidi(T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm") if chain is not None else None
    if st is not None and st.available:
        members = chain.nodes[1:]
        label = _label(node, T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm",
                       f"kleidi:{st.kernel} (per-row int8 activations)", members)

        def make() -> Op:
            mod, _ = T.native()
            return KleidiDynQuantFC(label, mod, st.kernel.split("/")[-1], chain.weight,
                                    chain.w_scale, chain.bias, Activation(), p.opt.threads)

        p.emit(node, label, make, [p.use(chain.dql.input(0).name, LOGICAL)],
               [(chain.output, LOGICAL)], members)
        return
    integer = node.op_type == "MatMulInteger"
    impl = "own:int_gemm" if integer else "own:int_gemm_to_float"
    if st is not None:
        variant, kernel = "qp8_f32_qc8w_gemm", f"{impl} (unfused ONNX ops, exact){_why(st)}"
    else:
        variant, kernel = ("none: not fed by a DynamicQuantizeLinear in the partition, or the "
                           "weights are not int8 symmetric per channel"), impl
    label = _label(node, T.FULLY_CONNECTED, variant, kernel)
    op = MatMulIntegerOwn if integer else MatMulIntegerToFloatOwn
    ins = [p.use(v.name, LOGICAL) if v is not None else None for v in node.inputs]
    p.emit(node, label, lambda: op(label), ins, [(node.outputs[0].name, LOGICAL)])


# ---- elementwise -------------------------------------------------------------------------------


def _out_layout(p: Planner, node: NodeView, names: Sequence[str]) -> str:
    """Channels-last when the (rank-4) result has a computed channels-last rank-4 operand."""
    if p.rank_of(node.outputs[0]) != 4:
        return LOGICAL
    for n in names:
        v = p.vals[n]
        if v.rank == 4 and not v.is_const and v.layout == CHANNELS_LAST:
            return CHANNELS_LAST
    return LOGICAL


@lowers("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")
def _lower_binary(p: Planner, node: NodeView) -> None:
    names = [node.input(0).name, node.input(1).name]
    layout = _out_layout(p, node, names)
    dtype = np_dtype(node.outputs[0].elem_type) or F32
    ins, lift = [], []
    for n in names:
        v = p.vals[n]
        if v.rank == 4:
            ins.append(p.use(n, layout))
            lift.append(False)
        elif layout == CHANNELS_LAST and v.is_const:
            ins.append(p.lifted_const(n))
            lift.append(False)
        else:
            ins.append(n)
            lift.append(layout == CHANNELS_LAST)
    for k, n in enumerate(ins):   # constants take the op's dtype once, here
        v = p.vals[n]
        if v.const is not None and v.const.dtype != dtype:
            cast = f"{n}@{dtype}"
            if cast not in p.vals:
                p.vals[cast] = Val(v.rank, dtype, v.layout, v.const.astype(dtype), True)
            ins[k] = cast
    impl = "own:binary_nhwc" if layout == CHANNELS_LAST else "own:binary"
    label = _label(node, "elementwise", "", impl)
    p.emit(node, label, lambda: BinaryOp(label, node.op_type, tuple(lift), dtype), ins,
           [(node.outputs[0].name, layout)])


def _same_layout(p: Planner, node: NodeView) -> str:
    return p.vals[node.input(0).name].layout


@lowers("Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Erf",
        "Sqrt", "Neg", "Abs", "Exp", "Reciprocal", "Softplus", "Softsign", "Clip", "Gelu")
@lowers("Gelu", domain=MS)
def _lower_unary(p: Planner, node: NodeView) -> None:
    act = act_of(node) or Activation(node.op_type)
    layout = _same_layout(p, node)
    label = _label(node, "elementwise", "", f"own:unary_{act.kind.lower()}")
    p.emit(node, label, lambda: UnaryOp(label, act.kind, act.params), [node.input(0).name],
           [(node.outputs[0].name, layout)])


@lowers("BiasGelu", "FastGelu", domain=MS)
def _lower_bias_gelu(p: Planner, node: NodeView) -> None:
    kind = "GeluTanh" if node.op_type == "FastGelu" else "Gelu"
    x, b = node.input(0), node.input(1)
    layout = LOGICAL if p.vals[x.name].rank == 4 else p.vals[x.name].layout
    label = _label(node, "elementwise", "", f"own:bias_{kind.lower()}")
    ins = [p.use(x.name, layout)] + ([b.name] if b is not None else [])
    p.emit(node, label, lambda: BiasActivationOp(label, kind), ins,
           [(node.outputs[0].name, layout)])


@lowers("BatchNormalization")
def _lower_batchnorm(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    layout = _same_layout(p, node)
    rank = p.vals[x.name].rank
    ep = p.pat.epilogue(node)
    act, members, out = ep.act, ep.members, ep.out
    label = _label(node, "elementwise", "", "own:affine_channels" + _act_text(act), members)

    def make() -> Op:
        sc, b, mean, var = (np.asarray(p.const(node.input(i).name), np.float64)
                            for i in (1, 2, 3, 4))
        eps = float(node.attr("epsilon", 1e-5))
        scale = sc / np.sqrt(var + eps)
        shift = b - mean * scale
        shape = [1] * rank
        shape[phys_axis(1, rank, layout)] = scale.size
        return AffineChannelOp(label, scale.astype(F32).reshape(shape),
                               shift.astype(F32).reshape(shape), act)

    p.emit(node, label, make, [x.name], [(out, layout)], members)


@lowers("LayerNormalization")
def _lower_layernorm(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    rank = p.vals[x.name].rank
    axis = int(node.attr("axis", -1)) % rank
    label = _label(node, "normalization", "", "own:layer_norm")
    ins = [p.use(x.name, LOGICAL)] + [v.name for v in node.inputs[1:3] if v is not None]
    p.emit(node, label, lambda: LayerNormOp(label, axis, float(node.attr("epsilon", 1e-5))),
           ins, [(node.outputs[0].name, LOGICAL)])


@lowers("Softmax")
def _lower_softmax(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    rank = p.vals[x.name].rank
    coerced = node.opset < 13
    axis = int(node.attr("axis", 1 if coerced else -1)) % max(rank, 1)
    layout = LOGICAL if coerced else _same_layout(p, node)
    label = _label(node, "softmax", "", "own:softmax" + ("_2d" if coerced else ""))
    xin = p.use(x.name, layout)
    pax = axis if coerced else phys_axis(axis, rank, layout)
    p.emit(node, label, lambda: SoftmaxOp(label, pax, coerced), [xin],
           [(node.outputs[0].name, layout)])


@lowers("Cast")
def _lower_cast(p: Planner, node: NodeView) -> None:
    to = np_dtype(int(node.attr("to")))
    label = _label(node, "elementwise", "", f"own:cast_{to}")
    p.emit(node, label, lambda: CastOp(label, to), [node.input(0).name],
           [(node.outputs[0].name, _same_layout(p, node))])


# ---- quantization ------------------------------------------------------------------------------


def _q_axis(p: Planner, node: NodeView) -> tuple[int, str]:
    x = node.input(0)
    rank = max(p.vals[x.name].rank or 0, 1)
    layout = _same_layout(p, node)
    axis = int(node.attr("axis", 1)) % rank
    return phys_axis(axis, rank, layout), layout


@lowers("QuantizeLinear", "DequantizeLinear")
def _lower_quantize(p: Planner, node: NodeView) -> None:
    """Q / DQ on the value's own layout, the per-channel axis mapped to it."""
    axis, layout = _q_axis(p, node)
    out_dtype = np_dtype(node.outputs[0].elem_type) or F32
    quantize = node.op_type == "QuantizeLinear"
    label = _label(node, "quantization", "", "own:quantize" if quantize else "own:dequantize")
    op = QuantizeOp if quantize else DequantizeOp
    ins = [v.name if v is not None else None for v in node.inputs[:3]]
    p.emit(node, label, lambda: op(label, axis, out_dtype), ins,
           [(node.outputs[0].name, layout)])


@lowers("DynamicQuantizeLinear")
def _lower_dynamic_quantize_linear(p: Planner, node: NodeView) -> None:
    layout = _same_layout(p, node)
    label = _label(node, "quantization", "", "own:dynamic_quantize_uint8")
    outs = [(o.name if o is not None else "", layout if k == 0 else LOGICAL)
            for k, o in enumerate(node.outputs)]
    p.emit(node, label, lambda: DynamicQuantizeOp(label), [node.input(0).name], outs)


# ---- pooling and reductions ------------------------------------------------------------------


@lowers("MaxPool", "AveragePool")
def _lower_pool(p: Planner, node: NodeView) -> None:
    geom = ConvGeometry(node.attr("kernel_shape"), node.attr("strides", None),
                        node.attr("dilations", None), node.attr("pads", None),
                        s_attr(node, "auto_pad", "NOTSET"), bool(int(node.attr("ceil_mode", 0))))
    kh, kw = geom.kernel
    if node.op_type == "MaxPool" and node.input(0).elem_type == TP.FLOAT and p.mlas():
        label = _label(node, "pooling", "", "mlas:maxpool_nhwc")

        def make() -> Op:
            return _mlas.MlasMaxPool(label, geom)
    elif node.op_type == "MaxPool":
        label = _label(node, "pooling", "", f"own:max_pool_{kh}x{kw}_taps")

        def make() -> Op:
            return MaxPoolOp(label, geom)
    else:
        include = bool(int(node.attr("count_include_pad", 0)))
        label = _label(node, "pooling", "", f"own:avg_pool_{kh}x{kw}_taps")

        def make() -> Op:
            return AveragePoolOp(label, geom, include)
    p.emit(node, label, make, [p.use(node.input(0).name, CHANNELS_LAST)],
           [(node.outputs[0].name, CHANNELS_LAST)])


@lowers("GlobalAveragePool", "GlobalMaxPool")
def _lower_global_pool(p: Planner, node: NodeView) -> None:
    kind = "mean" if node.op_type == "GlobalAveragePool" else "max"
    fast = p.mlas()
    label = _label(node, "pooling", "", f"{'mlas' if fast else 'own'}:global_{kind}_nhwc")
    p.emit(node, label, lambda: ReduceOp(label, kind, (1, 2), None, False,
                                         _mlas.reduce_kernel(kind, (1, 2)) if fast else None),
           [p.use(node.input(0).name, CHANNELS_LAST)],
           [(node.outputs[0].name, CHANNELS_LAST)])


@lowers("ReduceMean", "ReduceMax", "ReduceSum")
def _lower_reduce(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    v = p.vals[x.name]
    rank = v.rank
    if node.input(1) is not None:
        axes = [int(a) for a in np.asarray(node.input(1).const).reshape(-1)]
    else:
        axes = [int(a) for a in (node.attr("axes", None) or ())]
    keep = bool(int(node.attr("keepdims", 1)))
    kind = node.op_type[len("Reduce"):].lower()
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            label = _label(node, "reduction", "", "own:identity")
            p.emit(node, label, lambda: ViewOp(label, None), [x.name],
                   [(node.outputs[0].name, v.layout)])
            return
        axes = list(range(rank))
    axes = sorted({a % rank for a in axes})
    layout = v.layout if rank == 4 else LOGICAL
    phys = tuple(sorted(phys_axis(a, rank, layout) for a in axes))
    squeeze = None if keep else tuple(axes)
    to_logical = not keep and layout == CHANNELS_LAST
    out_layout = layout if keep else LOGICAL
    fast = p.mlas() and kind in ("mean", "max", "sum")
    label = _label(node, "reduction", "", f"{'mlas' if fast else 'own'}:reduce_{kind}" +
                   ("_nhwc" if layout == CHANNELS_LAST else ""))
    p.emit(node, label, lambda: ReduceOp(label, kind, phys, squeeze, to_logical,
                                         _mlas.reduce_kernel(kind, phys) if fast else None),
           [x.name],
           [(node.outputs[0].name, out_layout)])


# ---- shape ops ---------------------------------------------------------------------------------


@lowers("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _lower_reshape(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    op = node.op_type
    rank = p.vals[x.name].rank
    kw: dict[str, Any] = {}
    ins = [p.use(x.name, LOGICAL)]
    if op == "Reshape":
        shape = p.const(node.input(1).name)
        kw = {"shape": None if shape is None else np.asarray(shape).reshape(-1).tolist(),
              "allowzero": bool(int(node.attr("allowzero", 0)))}
        if shape is None:          # computed at run time (by another partition)
            ins.append(node.input(1).name)
    elif op == "Flatten":
        axis = int(node.attr("axis", 1))
        kw = {"flatten_axis": axis + rank if axis < 0 else axis}
    else:
        if node.opset >= 13:
            a = node.input(1)
            axes = () if a is None else tuple(int(v) for v in np.asarray(a.const).reshape(-1))
        else:
            axes = tuple(int(v) for v in (node.attr("axes", None) or ()))
        kw = {"squeeze" if op == "Squeeze" else "unsqueeze": axes}
    label = _label(node, "shape", "", f"own:{op.lower()}_view")
    p.emit(node, label, lambda: ReshapeOp(label, **kw), ins, [(node.outputs[0].name, LOGICAL)])


@lowers("Transpose")
def _lower_transpose(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    v = p.vals[x.name]
    rank = v.rank
    perm = tuple(int(a) for a in (node.attr("perm", None) or range(rank - 1, -1, -1)))
    if rank == 4 and v.layout == CHANNELS_LAST:
        perm = tuple(TO_L[a] for a in perm)     # logical = physical.transpose(TO_L)
    label = _label(node, "shape", "", "own:transpose_view")
    p.emit(node, label, lambda: ViewOp(label, perm), [x.name],
           [(node.outputs[0].name, LOGICAL)])


@lowers("Identity")
def _lower_identity(p: Planner, node: NodeView) -> None:
    label = _label(node, "shape", "", "own:identity")
    p.emit(node, label, lambda: ViewOp(label, None), [node.input(0).name],
           [(node.outputs[0].name, _same_layout(p, node))])


@lowers("Concat")
def _lower_concat(p: Planner, node: NodeView) -> None:
    names = [v.name for v in node.inputs if v is not None]
    layout = _out_layout(p, node, names)
    rank = p.rank_of(node.outputs[0])
    axis = phys_axis(int(node.attr("axis")) % rank, rank, layout)
    label = _label(node, "shape", "", "own:concat" + ("_nhwc" if layout == CHANNELS_LAST
                                                      else ""))
    p.emit(node, label, lambda: ConcatOp(label, axis), [p.use(n, layout) for n in names],
           [(node.outputs[0].name, layout)])
