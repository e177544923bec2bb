"""cpu_mlas sequence and optional kernels, through sessions, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import onnxplex
from onnxplex import ProviderContext, load_model
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

RNG = np.random.default_rng(3)
FLOAT_SEQ = oh.make_tensor_sequence_value_info


def _model(nodes, inputs, outputs, opset=18) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", inputs, outputs)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _both(model: onnx.ModelProto, feeds: dict) -> tuple[list, list]:
    sess = onnxplex.InferenceSession(model.SerializeToString(), providers=["cpu_mlas"])
    got = sess.run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    return got, want


def _same(got, want) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert isinstance(got, np.ndarray)
    w = np.asarray(want)
    assert got.dtype == w.dtype and got.shape == w.shape
    np.testing.assert_array_equal(got, w)


def _kernel(model: onnx.ModelProto, index: int = 0):
    node = load_model(model).node_views[index]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    return config.factory(node, ProviderContext())


def _t(name, dtype=TP.FLOAT, shape=None):
    return oh.make_tensor_value_info(name, dtype, shape)


def test_construct_insert_erase_at_length_concat():
    nodes = [
        oh.make_node("SequenceConstruct", ["a", "b", "c"], ["s0"]),
        oh.make_node("SequenceInsert", ["s0", "b", "m1"], ["s1"]),   # before the last
        oh.make_node("SequenceErase", ["s1", "zero"], ["s2"]),
        oh.make_node("SequenceAt", ["s2", "m1"], ["last"]),
        oh.make_node("SequenceLength", ["s2"], ["n"]),
        oh.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=0),
        oh.make_node("ConcatFromSequence", ["s2"], ["stk"], axis=-1, new_axis=1),
        oh.make_node("SequenceErase", ["s2"], ["s3"]),                # default: the last
    ]
    m = _model(nodes, [_t("a", shape=[2, 3]), _t("b", shape=[2, 3]), _t("c", shape=[2, 3]),
                       _t("m1", TP.INT64, []), _t("zero", TP.INT32, [])],
               [_t("last"), _t("n", TP.INT64), _t("cat"), _t("stk"),
                FLOAT_SEQ("s3", TP.FLOAT, None)])
    feeds = {k: RNG.standard_normal((2, 3)).astype(np.float32) for k in "abc"}
    feeds |= {"m1": np.array(-1, np.int64), "zero": np.array(0, np.int32)}
    got, want = _both(m, feeds)
    for g, w in zip(got, want):
        _same(g, w)
    assert len(got[4]) == 2


@pytest.mark.parametrize("split,keepdims,axis", [
    (None, 1, 1), (None, 0, 1), (np.array(2, np.int64), 1, 1),
    (np.array([1, 4], np.int64), 1, -1), (np.array(5, np.int32), 1, 0)])
def test_split_to_sequence(split, keepdims, axis):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    ins = [_t("x", shape=[3, 5])] + ([] if split is None else
                                     [_t("s", oh.np_dtype_to_tensor_dtype(split.dtype),
                                         list(split.shape))])
    node = oh.make_node("SplitToSequence", ["x"] + ([] if split is None else ["s"]), ["y"],
                        axis=axis, keepdims=keepdims)
    m = _model([node], ins, [FLOAT_SEQ("y", TP.FLOAT, None)])
    feeds = {"x": x} | ({} if split is None else {"s": split})
    got, want = _both(m, feeds)
    _same(got[0], want[0])


def test_split_to_sequence_bad_lengths():
    node = oh.make_node("SplitToSequence", ["x", "s"], ["y"])
    m = _model([node], [_t("x", shape=[4]), _t("s", TP.INT64, [2])],
               [FLOAT_SEQ("y", TP.FLOAT, None)])
    k = _kernel(m)
    with pytest.raises(ValueError):
        k(np.zeros(4, np.float32), np.array([1, 2], np.int64))


def test_kernels_do_not_modify_input_lists():
    m = _model([oh.make_node("SequenceInsert", ["s", "t"], ["o"])],
               [FLOAT_SEQ("s", TP.FLOAT, None), _t("t")], [FLOAT_SEQ("o", TP.FLOAT, None)])
    seq = [np.zeros(2, np.float32), np.ones(2, np.float32)]
    out = _kernel(m)(seq, np.full(2, 7, np.float32))
    assert len(seq) == 2 and len(out) == 3 and out[-1][0] == 7
    m = _model([oh.make_node("SequenceErase", ["s"], ["o"])],
               [FLOAT_SEQ("s", TP.FLOAT, None)], [FLOAT_SEQ("o", TP.FLOAT, None)])
    out = _kernel(m)(seq)
    assert len(seq) == 2 and len(out) == 1


def test_out_of_range_positions_raise():
    m = _model([oh.make_node("SequenceAt", ["s", "i"], ["o"])],
               [FLOAT_SEQ("s", TP.FLOAT, None), _t("i", TP.INT64, [])], [_t("o")])
    k = _kernel(m)
    seq = [np.zeros(1, np.float32)] * 2
    assert k(seq, np.array(-2)) is seq[0]
    for bad in (2, -3):
        with pytest.raises(IndexError):
            k(seq, np.array(bad))
    m = _model([oh.make_node("SequenceErase", ["s"], ["o"])],
               [FLOAT_SEQ("s", TP.FLOAT, None)], [FLOAT_SEQ("o", TP.FLOAT, None)])
    with pytest.raises(IndexError):
        _kernel(m)([])


def test_sequence_empty_and_length():
    m = _model([oh.make_node("SequenceEmpty", [], ["s"], dtype=TP.INT64),
                oh.make_node("SequenceLength", ["s"], ["n"])], [], [_t("n", TP.INT64)])
    sess = onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"])
    (n,) = sess.run(None, {})
    assert n.dtype == np.int64 and n.shape == () and n == 0


def test_optional_ops():
    opt_t = oh.make_tensor_type_proto(TP.FLOAT, [2])
    m = _model([oh.make_node("Optional", ["x"], ["o"]),
                oh.make_node("OptionalHasElement", ["o"], ["h"]),
                oh.make_node("OptionalGetElement", ["o"], ["y"])],
               [_t("x", shape=[2])], [_t("h", TP.BOOL, []), _t("y", shape=[2])])
    x = np.array([1, 2], np.float32)
    sess = onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"])
    h, y = sess.run(None, {"x": x})
    _same(h, np.array(True))
    _same(y, x)
    empty = _model([oh.make_node("Optional", [], ["o"], type=opt_t)], [], [])
    assert _kernel(empty)() is None
    has = _model([oh.make_node("OptionalHasElement", [""], ["h"])], [], [_t("h", TP.BOOL)])
    _same(_kernel(has)(None), np.array(False))
    get = _model([oh.make_node("OptionalGetElement", ["x"], ["y"])], [_t("x", shape=[2])],
                 [_t("y", shape=[2])])
    k = _kernel(get)
    assert k(x) is x  # opset 18: a plain tensor passes through
    with pytest.raises(ValueError):
        k(None)
