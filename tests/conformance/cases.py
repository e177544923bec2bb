"""The ONNX node conformance cases that ship with the installed onnx package, run through a
normal InferenceSession, compared at each case's own tolerances."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

import onnxplex


@functools.cache
def all_cases() -> dict[str, Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def compare(expected: Any, got: Any, rtol: float, atol: float, where: str) -> None:
    """Element-wise comparison of tensors, sequences (lists) and optionals (None)."""
    if isinstance(expected, list):
        assert isinstance(got, list), f"{where}: expected a sequence, got {type(got).__name__}"
        assert len(expected) == len(got), f"{where}: sequence length {len(got)} != {len(expected)}"
        for k, (e, g) in enumerate(zip(expected, got)):
            compare(e, g, rtol, atol, f"{where}[{k}]")
        return
    if expected is None:
        assert got is None, f"{where}: expected an empty optional, got {type(got).__name__}"
        return
    expected = np.asarray(expected)
    assert isinstance(got, np.ndarray), f"{where}: expected an array, got {type(got).__name__}"
    assert got.shape == expected.shape, f"{where}: shape {got.shape} != {expected.shape}"
    if expected.dtype == object or expected.dtype.kind in "SU":
        assert got.dtype == object or got.dtype.kind in "SU", f"{where}: dtype {got.dtype}"
        assert [_text(v) for v in got.ravel()] == [_text(v) for v in expected.ravel()], where
        return
    assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != {expected.dtype}"
    if expected.dtype.kind in "fc" or expected.dtype.itemsize == 1 and "float" in expected.dtype.name:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=where, equal_nan=True)
    elif "float" in expected.dtype.name or expected.dtype.name == "bfloat16":
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=where, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=where)


def to_value(v: Any) -> Any:
    """Case data as onnxplex values: TensorProto -> array, sequences -> lists."""
    from onnx import TensorProto, numpy_helper

    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, (list, tuple)):
        return [to_value(x) for x in v]
    return v


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def run_case(case: Any, providers: Sequence[Any] = ("cpu_mlas",)) -> None:
    """Run every data set of ``case``; raises AssertionError or an onnxplex error on failure."""
    sess = onnxplex.InferenceSession(case.model, providers=list(providers))
    names = [a.name for a in sess.get_inputs()]
    graph_inputs = [i.name for i in case.model.graph.input
                    if i.name not in {t.name for t in case.model.graph.initializer}]
    outputs = [o.name for o in case.model.graph.output]
    for inputs, expected in case.data_sets:
        feed = {name: to_value(value) for name, value in zip(graph_inputs, inputs)
                if name in names}
        got = sess.run(outputs, feed)
        for name, e, g in zip(outputs, map(to_value, expected), got):
            compare(e, g, case.rtol, case.atol, f"{case.name}: output {name!r}")
