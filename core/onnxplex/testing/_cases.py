"""The ONNX node conformance cases that ship with the installed onnx package, run through a
normal :class:`onnxplex.InferenceSession` and compared at each case's own tolerances.

``onnx.backend.test.case.node.collect_testcases(None)`` builds the ~1,900 cases in memory (a
few seconds, once per process: :func:`all_cases` caches them); no files are needed.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import onnxplex

__all__ = ["all_cases", "compare", "to_value", "run_case", "RANDOM_CASES", "SUPERSEDED",
           "superseded"]


@functools.cache
def all_cases() -> dict[str, Any]:
    """Every node case of the installed onnx package, by name."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def compare(expected: Any, got: Any, rtol: float, atol: float, where: str) -> None:
    """Element-wise comparison of tensors, sequences (lists) and optionals (None); raises
    AssertionError naming ``where``."""
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
    if expected.dtype.kind in "fc" or "float" in expected.dtype.name:
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, 2**-6)   # two bfloat16 ulps, as onnx's own backend runner allows
        elif expected.dtype == np.float16:
            # Two float16 ulps, by the same rule. Needed by one case: the expanded fp16
            # Attention graph, whose expected values numpy computed with float16 partial sums;
            # onnxplex accumulates in float32 and is closer to the float64 result (max error
            # 4.0e-4 vs the expected values' 4.9e-4), 2 elements of 192 differ by 2 ulps.
            rtol = max(rtol, 2**-9)
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


# Cases whose expected values come from an unseeded or implementation-defined random draw:
# the ONNX test generator itself says another implementation "may not produce the same
# values even if a seed is specified". They are checked by property (shape, dtype, values in
# {0, 1}) instead of by value.
RANDOM_CASES = {
    name: "Bernoulli draws are implementation-defined (see onnx's bernoulli.py)"
    for name in ("test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed",
                 "test_bernoulli_expanded", "test_bernoulli_double_expanded",
                 "test_bernoulli_seed_expanded")
}


# Cases whose expected values differ between onnx releases for the same model and inputs,
# the operator's spec text and version unchanged, so no implementation can match both. The
# tie-breaker is onnxruntime: under the onnx versions listed here (major, minor; "dev" builds
# count as their release) a case's own values are set aside and the outputs are compared with
# onnxruntime's instead. Strict: under those versions the case's values must still differ from
# onnxruntime's (else the entry is stale and fails, to be removed).
_ALIGN_CORNERS = ("Resize align_corners with scales: onnx 1.23 divided by the fractional "
                  "length scale * length_original (0.6 * 4 = 2.4), onnx 1.24 and onnxruntime by "
                  "the integer output length")
SUPERSEDED: dict[str, tuple[str, str]] = {
    "test_resize_downsample_scales_linear_align_corners": ("<1.24", _ALIGN_CORNERS),
    "test_resize_downsample_scales_cubic_align_corners": ("<1.24", _ALIGN_CORNERS),
    "test_maxunpool_export_with_output_shape": (
        "<1.24", "MaxUnpool with output_shape: onnx 1.23's indices address the shape inferred "
                 "from the attributes (4x4, then padded to 5x5), onnx 1.24's and onnxruntime's "
                 "the output_shape tensor (the MaxPool input the indices came from)"),
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True": (
        ">=1.24", "AveragePool ceil_mode + count_include_pad: onnx 1.24.0.dev divides a window "
                  "running past the input by the whole kernel size; onnx 1.23, onnxruntime "
                  "(#29629), PyTorch, OpenVINO and tract by the taps inside the padded input"),
}


def superseded(name: str) -> str | None:
    """Why ``name``'s expected values are set aside for onnxruntime's under the installed
    onnx (see :data:`SUPERSEDED`), or None when they are compared as they are."""
    import onnx

    entry = SUPERSEDED.get(name)
    if entry is None:
        return None
    when, reason = entry
    op, version = (when[:2], when[2:]) if when[:2] in ("<=", ">=") else (when[:1], when[1:])
    bound = tuple(int(v) for v in version.split("."))
    installed = tuple(int(v) for v in onnx.__version__.split(".")[:len(bound)])
    applies = {"<": installed < bound, ">=": installed >= bound}[op]
    return reason if applies else None


def _onnxruntime_outputs(case: Any, feed: Mapping[str, Any], outputs: Sequence[str],
                         reason: str) -> list[Any]:
    try:
        import onnxruntime
    except ImportError as e:
        raise AssertionError(f"{case.name}: its expected values are superseded ({reason}); "
                             "checking it needs onnxruntime, which is not installed") from e
    sess = onnxruntime.InferenceSession(case.model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
    return sess.run(list(outputs), dict(feed))


def _check_random(expected: Any, got: Any, where: str) -> None:
    expected = np.asarray(expected)
    assert isinstance(got, np.ndarray) and got.shape == expected.shape, where
    assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != {expected.dtype}"
    assert set(np.unique(got.astype(np.float64)).tolist()) <= {0.0, 1.0}, where


def _undefined_casts(case: Any, feed: Mapping[str, Any], expected: Any) -> np.ndarray | None:
    """Where ``expected`` is undefined because a Cast (or CastLike) from floating point to an
    integer type got a value outside that type's range: Cast's specification leaves it
    undefined ("fixed point: undefined if OOR"), and onnx's expected values there follow
    whichever ml_dtypes generated them (0.5 wraps around, 0.7 gives 0). A mask over
    ``expected``, for a case whose model is such a cast of its one input; None otherwise."""
    ops = {n.op_type for n in case.model.graph.node}
    if not ops & {"Cast", "CastLike"} or len(feed) < 1:
        return None
    x = np.asarray(next(iter(feed.values())))
    expected = np.asarray(expected)
    if x.shape != expected.shape or x.dtype.kind != "f" and "float" not in x.dtype.name:
        return None
    try:
        import ml_dtypes

        info = ml_dtypes.iinfo(expected.dtype)
    except (ImportError, ValueError, TypeError):
        return None
    t = np.trunc(x.astype(np.float64))
    with np.errstate(invalid="ignore"):
        return ~(np.isfinite(t) & (t >= info.min) & (t <= info.max))


def run_case(case: Any, providers: Sequence[Any] = ("cpu_mlas",),
             sess_options: onnxplex.SessionOptions | None = None,
             session: onnxplex.InferenceSession | None = None) -> None:
    """Run every data set of ``case`` (in ``session`` when given, else in a new session on
    ``providers``); raises AssertionError or an onnxplex error on failure."""
    sess = session or onnxplex.InferenceSession(case.model, sess_options,
                                                providers=list(providers))
    names = [a.name for a in sess.get_inputs()]
    graph_inputs = [i.name for i in case.model.graph.input
                    if i.name not in {t.name for t in case.model.graph.initializer}]
    outputs = [o.name for o in case.model.graph.output]
    reason = superseded(case.name)
    for inputs, expected in case.data_sets:
        feed = {name: to_value(value) for name, value in zip(graph_inputs, inputs)
                if name in names}
        got = sess.run(outputs, feed)
        if reason is not None:
            ort = _onnxruntime_outputs(case, feed, outputs, reason)
            try:
                for e, o in zip(map(to_value, expected), ort):
                    compare(e, o, case.rtol, case.atol, case.name)
            except AssertionError:
                expected = ort   # as listed: onnx's values differ, onnxruntime's are compared
            else:
                raise AssertionError(f"{case.name}: listed in SUPERSEDED, but its expected "
                                     "values agree with onnxruntime's: remove the entry")
        for name, e, g in zip(outputs, map(to_value, expected), got):
            where = f"{case.name}: output {name!r}"
            if case.name in RANDOM_CASES:
                _check_random(e, g, where)
                continue
            undefined = _undefined_casts(case, feed, e)
            if undefined is not None and undefined.any() and isinstance(g, np.ndarray) \
                    and g.shape == undefined.shape:
                g = g.copy()
                g[undefined] = np.asarray(e)[undefined]   # (not compared)
            compare(e, g, case.rtol, case.atol, where)
