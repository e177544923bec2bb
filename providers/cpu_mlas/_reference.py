"""The reference fallback: ops with no native cpu_mlas kernel run through onnx's reference
implementations (``onnx.reference``).

This is deliberately separate from the native kernels: nodes claimed this way are labelled in
the placement report ("onnx reference fallback"), the provider option
``reference_fallback=0`` turns it off, and the conformance tests count native and fallback
passes apart. The reference evaluator is slow (pure numpy, per call overhead) and is never used
for an op that has a native kernel.

The fallback is checked, not trusted: :data:`KNOWN_WRONG` lists the cases where onnx.reference
is known to give other answers than onnxruntime (or to fail), each with its reason; such a node
is declined with that reason (in the placement report and the partition error) rather than
run. tests/conformance/test_reference_fallback.py compares every op still placed on the
fallback with onnxruntime and shows each entry here still disagrees.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnxplex import NodeView

logger = logging.getLogger(__name__)

NOTE = "onnx reference fallback"


def _attr_proto(name: str, value: Any) -> onnx.AttributeProto:
    import onnx_ir as ir
    from onnx import numpy_helper

    if isinstance(value, ir.Graph):
        return helper.make_attribute(name, ir.serde.serialize_graph(value))
    if isinstance(value, tuple) and value and isinstance(value[0], ir.Graph):
        return helper.make_attribute(name, [ir.serde.serialize_graph(g) for g in value])
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, tuple) and value and isinstance(value[0], np.ndarray):
        return helper.make_attribute(name, [numpy_helper.from_array(v) for v in value])
    if isinstance(value, tuple) and not value:
        raise ValueError(f"attribute {name!r} is an empty list of unknown type")
    return helper.make_attribute(name, list(value) if isinstance(value, tuple) else value)


def _one_node_model(node: NodeView, opsets: dict[str, int]) -> onnx.ModelProto:
    ins = [v.name if v is not None else "" for v in node.inputs]
    outs = [v.name if v is not None else "" for v in node.outputs]
    proto = helper.make_node(node.op_type, ins, outs, domain=node.domain or None,
                             name=node.display_name)
    proto.attribute.extend(_attr_proto(k, v) for k, v in node.attrs.items())
    graph = helper.make_graph(
        [proto], "reference_fallback",
        [helper.make_value_info(n, onnx.TypeProto()) for n in ins if n]
        + [helper.make_value_info(v.name, onnx.TypeProto()) for v in node.implicit_inputs],
        [helper.make_value_info(n, onnx.TypeProto()) for n in outs if n])
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    return helper.make_model(graph, opset_imports=imports)


ML = "ai.onnx.ml"


@dataclass(frozen=True)
class KnownWrong:
    """A case onnx.reference gets wrong: ``op_type`` of ``domain`` at opsets ``since`` to
    ``until`` (None: any later one), for the nodes ``when`` is true of (None: every node;
    ``when`` is given the node and answers from its attributes and declared input types: an
    unknown type or rank counts as the wrong case). ``case`` names the case for the tests."""

    domain: str
    op_type: str
    since: int
    until: int | None
    reason: str
    case: str
    when: Callable[[NodeView], bool] | None = None

    def applies(self, node: NodeView) -> bool:
        if (node.domain, node.op_type) != (self.domain, self.op_type) or \
                node.opset < self.since or (self.until is not None and node.opset > self.until):
            return False
        return self.when is None or bool(self.when(node))


def _labels(node: NodeView) -> int:
    """How many class labels a classifier has (ints or strings)."""
    return max(len(node.attr("classlabels_ints") or node.attr("classlabels_int64s") or ()),
               len(node.attr("classlabels_strings") or ()))


def _not_float(node: NodeView, k: int = 0) -> bool:
    """Whether input ``k`` is not known to be float32 or float64."""
    v = node.input(k)
    return v is None or v.dtype is None or v.dtype.kind != "f" or v.dtype.itemsize < 4


def _rank_not(node: NodeView, *ranks: int) -> bool:
    """Whether some input's rank is not known to be one of ``ranks``."""
    return any(v is None or v.rank not in ranks for v in node.inputs)


def _rank_entry(op_type: str, how: str) -> KnownWrong:
    return KnownWrong(
        ML, op_type, 1, None,
        "an input of rank other than 2: onnxruntime reads a vector as one row (the tree "
        f"ensembles refuse it), onnx.reference {how}", "rank not 2",
        lambda n: _rank_not(n, 2))


def _post_transform_entry(op_type: str) -> KnownWrong:
    def transformed(node: NodeView) -> bool:
        value = node.attr("post_transform", "NONE")
        return (value.decode() if isinstance(value, bytes) else str(value)) != "NONE"

    return KnownWrong(
        ML, op_type, 1, None,
        "post_transform other than NONE is not implemented in onnx.reference (the run fails)",
        "post_transform", transformed)


KNOWN_WRONG: tuple[KnownWrong, ...] = (
    KnownWrong(
        ML, "SVMClassifier", 1, None,
        "multiclass probabilities (prob_a/prob_b with more than two classes) are coupled "
        "wrongly: onnx.reference's multiclass_probability fills each row of libsvm's Q matrix "
        "with one dot product (-R[t+1:, t] @ R[t, t+1:]) where the pairwise coupling needs "
        "the element-wise products -R[j, t] * R[t, j], so the probabilities differ from "
        "onnxruntime's (issue 24 saw up to 1.3 on a scikit-learn SVC, some negative); with "
        "string labels and probabilities it fails",
        "probabilities", lambda n: bool(n.attr("prob_a")) and (
            _labels(n) > 2 or bool(n.attr("classlabels_strings")))),
    *(KnownWrong(ML, op, 1, None,
                 f"an integer input: onnx.reference computes {what} in the input's integer "
                 "type (truncated), onnxruntime in float", "integer input", _not_float)
      for op, what in (("SVMClassifier", "the scores"), ("Scaler", "(x - offset) * scale"))),
    KnownWrong(
        ML, "TreeEnsembleClassifier", 1, None,
        "binary classification (two class labels): onnxruntime writes a single weighted "
        "class as scores [-s, s] (or [1 - s, s] when every weight is positive), leaves them "
        "untransformed for SOFTMAX and picks the label by the sign (or 0.5) of the second "
        "score; onnx.reference writes [1 - s, s] whatever the weights, applies SOFTMAX and "
        "takes the argmax: scores and labels differ", "two class labels",
        lambda n: _labels(n) == 2),
    *(_post_transform_entry(op) for op in ("TreeEnsembleRegressor", "LinearRegressor")),
    KnownWrong(
        ML, "LinearClassifier", 1, None,
        "binary classification with one coefficient row: onnx.reference writes the scores "
        "[-s, s] and applies SOFTMAX, SOFTMAX_ZERO or PROBIT to them, onnxruntime writes "
        "[1 - s, s] (only LOGISTIC agrees); with string labels it fails",
        "binary, one coefficient row",
        lambda n: _labels(n) == 2 and len(n.attr("intercepts") or (0, 0)) == 1),
    KnownWrong(
        ML, "Normalizer", 1, None,
        "norm MAX divides each row by its largest absolute value where onnxruntime divides by "
        "its largest value; an input of rank other than 2 fails",
        "MAX, or rank not 2", lambda n: n.attr("norm") in ("MAX", b"MAX") or _rank_not(n, 2)),
    KnownWrong(
        ML, "OneHotEncoder", 1, None,
        "inputs of rank above 2 fail in onnx.reference", "rank above 2",
        lambda n: _rank_not(n, 1, 2)),
    KnownWrong(
        ML, "DictVectorizer", 1, None,
        "a map input gives a 1-D float64 vector where onnxruntime returns [1, V] of the "
        "map's value type", "any"),
    KnownWrong(
        ML, "FeatureVectorizer", 1, None,
        "integer inputs are concatenated in their integer type where the output is float",
        "integer input", lambda n: any(_not_float(n, k) for k in range(len(n.inputs)))),
    *(_rank_entry(op, how) for op, how in (
        ("LinearClassifier", "fails"),
        ("LinearRegressor", "returns a vector"),
        ("SVMClassifier", "reads it as a column (one row per feature)"),
        ("SVMRegressor", "reads it as a column (one row per feature)"),
        ("TreeEnsembleClassifier", "reads it as a column"),
        ("TreeEnsembleRegressor", "reads it as a column"),
        ("Imputer", "fails (and fails for rank 3, which onnxruntime runs)"),
        ("FeatureVectorizer", "reads it as a column"))),
    KnownWrong(
        ML, "Scaler", 1, None,
        "an input of rank 3 or more is scaled along its last dimension, which onnxruntime "
        "refuses", "rank above 2", lambda n: _rank_not(n, 1, 2)),
    KnownWrong(
        "", "Upsample", 1, 6,
        "onnx.reference's Upsample reads the scales input of opset 7 and later: opset 1's "
        "height_scale/width_scale attributes fail", "any"),
)


def known_wrong(node: NodeView) -> KnownWrong | None:
    """The entry of :data:`KNOWN_WRONG` that applies to ``node``, if any."""
    for entry in _KNOWN_BY_OP.get((node.domain, node.op_type), ()):
        if entry.applies(node):
            return entry
    return None


_KNOWN_BY_OP: dict[tuple[str, str], list[KnownWrong]] = {}
for _entry in KNOWN_WRONG:
    _KNOWN_BY_OP.setdefault((_entry.domain, _entry.op_type), []).append(_entry)


# onnx.reference's op lists, by domain.
_OP_LISTS = {
    "": "onnx.reference.ops._op_list",
    "ai.onnx.ml": "onnx.reference.ops.aionnxml._op_list",
    "ai.onnx.preview": "onnx.reference.ops.aionnx_preview._op_list",
    "ai.onnx.preview.training": "onnx.reference.ops.aionnx_preview_training._op_list",
}
# Reference implementations that need a package onnxplex does not depend on.
_NEEDS = {("", "ImageDecoder"): "PIL"}


@functools.lru_cache(maxsize=1024)
def _supported(domain: str, op_type: str, opset: int) -> str | None:
    """None when onnx.reference implements the op at that opset, else why not."""
    import importlib
    import importlib.util

    module = _OP_LISTS.get("" if domain == "ai.onnx" else domain)
    if module is None:
        return f"onnx.reference has no ops in domain {domain!r}"
    need = _NEEDS.get((domain, op_type))
    if need is not None and importlib.util.find_spec(need) is None:
        return (f"onnx.reference's {op_type} needs the {need!r} package, which is not "
                "installed")
    try:
        importlib.import_module(module).load_op(domain, op_type, opset)
    except Exception:  # noqa: BLE001 - anything missing means "no reference implementation"
        return f"onnx.reference has no implementation of {op_type}-{opset}"
    return None


def reference_reason(node: NodeView) -> str | None:
    """None when the reference can run ``node``, else why not (no implementation, or one
    known to be wrong for this node: :data:`KNOWN_WRONG`)."""
    why = _supported(node.domain, node.op_type, node.opset)
    if why is not None:
        return why
    wrong = known_wrong(node)
    if wrong is not None:
        return (f"onnx.reference's {node.op_type}-{node.opset} is known to be wrong here, "
                f"so it is not run: {wrong.reason}")
    return None


def make_reference_kernel(node: NodeView, opsets: dict[str, int]):
    """A kernel running ``node`` with onnx's ReferenceEvaluator (built once, shared)."""
    from onnx.reference import ReferenceEvaluator

    model = _one_node_model(node, opsets)
    evaluator = ReferenceEvaluator(model)
    names = [v.name for v in node.inputs if v is not None]
    names += [v.name for v in node.implicit_inputs]
    outs = [v.name if v is not None else None for v in node.outputs]
    wanted = [n for n in outs if n]
    # The evaluator's op objects are not documented as thread-safe: one call at a time.
    lock = threading.Lock()

    n_explicit = len(node.inputs)

    def kernel(*args):
        present = [a for v, a in zip(node.inputs, args[:n_explicit]) if v is not None]
        feeds = dict(zip(names, [*present, *args[n_explicit:]]))
        with lock:
            results = evaluator.run(wanted, feeds)
        it = iter(results)
        out = tuple(_normalize(next(it), node.outputs[k]) if n else None
                    for k, n in enumerate(outs))
        return out if len(out) != 1 else out[0]

    return kernel


def _normalize(value: Any, info) -> Any:
    if isinstance(value, (list, type(None))):
        return value
    arr = np.asarray(value)
    if info is not None and info.dtype is not None and arr.dtype != info.dtype:
        if arr.dtype.kind in "SU" and info.dtype == np.dtype(object):
            arr = arr.astype(object)
        elif arr.dtype.kind == "f" and info.dtype.kind == "f":
            # onnx.reference's ai.onnx.ml ops compute in float64 (numpy's promotion) where
            # the output is declared float, as onnxruntime computes (in double for a double
            # input) and writes it: the declared type, rounded
            arr = arr.astype(info.dtype)
    return arr
