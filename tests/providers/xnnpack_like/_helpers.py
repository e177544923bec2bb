"""Shared helpers of the xnnpack_like tests: small model building, paired sessions (the
delegate in front of cpu_mlas, and cpu_mlas alone) and report lookups."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel, SessionOptions

XP = "xnnpack_like"
F32 = np.float32
DISABLE = GraphOptimizationLevel.ORT_DISABLE_ALL


def vi(name: str, shape: Sequence, elem: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def model(nodes, inputs, outputs, inits: dict | None = None, opset: int = 17,
          ms: bool = False) -> bytes:
    g = helper.make_graph(nodes, "m", inputs, outputs,
                          initializer=[numpy_helper.from_array(np.asarray(a), n)
                                       for n, a in (inits or {}).items()])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)]
                                               if ms else [])
    return helper.make_model(g, opset_imports=ops, ir_version=9).SerializeToString()


def session(m, providers: Sequence = (XP, "cpu_mlas"), level=DISABLE,
            threads: int = 0, **opts) -> onnxplex.InferenceSession:
    so = SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = threads
    for k, v in opts.items():
        setattr(so, k, v)
    return onnxplex.InferenceSession(m, so, providers=list(providers))


def pair(m, level=DISABLE, providers: Sequence = (XP, "cpu_mlas")):
    """(delegate session, cpu_mlas-only session) on the same model and level."""
    return session(m, providers, level), session(m, ["cpu_mlas"], level)


def placements(sess) -> dict:
    return {p.name or f"{p.op_type}_{p.index}": p for p in
            sess.get_provider_assignment().placements}


def notes(sess) -> dict[str, str]:
    """Node name -> the delegate's per-node note ('' for nodes it does not run)."""
    plan = sess.get_provider_assignment()
    return {p.name or f"{p.op_type}_{p.index}": plan.partitions[p.partition].node_note(p.index)
            for p in plan.placements}


def declined(sess, node: str, provider: str = XP) -> str:
    return dict(placements(sess)[node].declined).get(provider, "")


def run_both(x, c, feed: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    return list(zip(x.run(None, feed), c.run(None, feed)))


def rel_err(a: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max |a - ref|, that relative to max |ref|), in float64."""
    a64, r64 = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    err = float(np.abs(a64 - r64).max()) if r64.size else 0.0
    return err, err / max(float(np.abs(r64).max()), 1e-30)


def assert_rel(a: np.ndarray, ref: np.ndarray, rel: float, what: str = "") -> float:
    assert a.shape == ref.shape and a.dtype == ref.dtype, (a.shape, ref.shape, a.dtype,
                                                          ref.dtype)
    err, r = rel_err(a, ref)
    assert r <= rel, f"{what}: max abs error {err:.3g} is {r:.3g} of the output scale (> {rel})"
    return r
