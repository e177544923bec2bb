"""Batch inference on Ray Data, one onnxplex session per worker actor.

When one machine is not enough, Ray Data splits a dataset into blocks and streams them
through a pool of actors, on one machine or a cluster. Each actor builds its onnxplex
``InferenceSession`` once (in ``__init__``) and then scores batch after batch with it, so the
model is loaded, optimized, partitioned and its weights packed once per worker, not per batch.

    pip install 'onnxplex[ray]'
    python examples/ray_batch_inference.py                     # builds a small MLP, 20,000 rows
    python examples/ray_batch_inference.py model.onnx --rows 100000 --workers 3

``ray.init()`` starts a local Ray instance, or joins the cluster named by ``RAY_ADDRESS``.
A model given by path is opened by every worker, so on a cluster the path must exist on every
node (a shared file system); the built-in model travels as bytes. The rows here are features
computed from the row id (a stand-in for reading a real dataset with ``ray.data.read_*``); a
model given by path must have one float input whose dims after the batch dim are fixed.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxplex


def build_mlp(features: int = 32, hidden: int = 64, classes: int = 10, seed: int = 0) -> bytes:
    """A small classifier, x [N, features] -> probs [N, classes]: Gemm, Relu, Gemm, Softmax."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (rng.standard_normal(classes) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", classes])],
        initializer=[numpy_helper.from_array(a, n)
                     for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def input_signature(model: str | bytes) -> tuple[str, tuple[int, ...]]:
    """The model's one graph input: its name and the fixed dims after the batch dim."""
    proto = (onnx.load_from_string(model) if isinstance(model, bytes)
             else onnx.load(model, load_external_data=False))
    inits = {t.name for t in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise SystemExit(f"this example feeds models with one input; the model has "
                         f"{[i.name for i in inputs]}")
    dims = inputs[0].type.tensor_type.shape.dim[1:]
    if not all(d.HasField("dim_value") for d in dims):
        raise SystemExit(f"input {inputs[0].name!r} needs fixed dims after the batch dim")
    return inputs[0].name, tuple(d.dim_value for d in dims)


def features_for(ids: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Deterministic float32 features per row id (the same id gives the same row anywhere)."""
    size = int(np.prod(shape)) if len(shape) else 1
    j = np.arange(size, dtype=np.float64)
    x = np.sin(0.37 * ids.astype(np.float64)[:, None] + 0.11 * j[None, :] + 0.05 * j[None, :] ** 2)
    return x.astype(np.float32).reshape(len(ids), *shape)


def add_features(batch: dict[str, np.ndarray], column: str,
                 shape: Sequence[int]) -> dict[str, np.ndarray]:
    batch[column] = features_for(batch["id"], shape)
    return batch


class OnnxplexPredictor:
    """A Ray Data callable class: one session per actor, reused for every batch.

    Input columns are the model's input names; the outputs come back as columns named after
    the model's outputs, with the ``keep`` columns passed through and a ``worker`` column
    (process id and session) saying who scored each row.
    """

    def __init__(self, model: str | bytes, providers: Sequence[str] | None = None,
                 intra_op_threads: int = 1, keep: Sequence[str] = ("id",)) -> None:
        options = onnxplex.SessionOptions()
        # One actor per CPU (num_cpus=1 below): more intra-op threads would oversubscribe.
        options.intra_op_num_threads = intra_op_threads
        self.session = onnxplex.InferenceSession(model, options, providers=providers)
        self.inputs = [a.name for a in self.session.get_inputs()]
        self.outputs = [a.name for a in self.session.get_outputs()]
        self.keep = tuple(keep)
        self.worker = f"pid {os.getpid()} session {id(self.session):x}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {name: np.ascontiguousarray(batch[name]) for name in self.inputs}
        results = self.session.run(None, feeds)
        out = {k: batch[k] for k in self.keep if k in batch}
        out.update(zip(self.outputs, results))
        out["worker"] = np.full(len(batch[self.inputs[0]]), self.worker)
        return out


def batch_inference(model: str | bytes, rows: int, workers: int, batch_size: int = 512,
                    providers: Sequence[str] | None = None):
    """A lazy Ray Dataset of ``rows`` scored rows (``id``, the outputs, ``worker``).

    Each of the ``workers`` actors holds one CPU for its whole life, and the read tasks need
    CPUs of their own: with every CPU taken by actors the read never runs and the dataset
    waits forever, so this refuses that.
    """
    import ray
    import ray.data

    cpus = int(ray.cluster_resources().get("CPU", 0))
    if workers >= cpus:
        raise ValueError(f"{workers} worker(s) would take all {cpus} CPU(s) of the Ray "
                         "cluster and leave none for reading the data; use at most "
                         f"{max(1, cpus - 1)}")
    name, shape = input_signature(model)
    ds = ray.data.range(rows).map_batches(add_features, fn_kwargs={"column": name,
                                                                   "shape": shape},
                                          batch_format="numpy")
    return ds.map_batches(OnnxplexPredictor,
                          fn_constructor_kwargs={"model": model, "providers": providers},
                          compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=1,
                          batch_size=batch_size, batch_format="numpy")


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help=".onnx file (default: a small built-in MLP)")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--workers", type=int,
                        help="actors, one CPU each (default: the cluster's CPUs minus one)")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--providers", help="comma-separated, priority order")
    args = parser.parse_args(argv)

    import ray

    if not ray.is_initialized():
        ray.init()
    workers = args.workers or max(1, int(ray.cluster_resources().get("CPU", 2)) - 1)
    model: str | bytes = args.model or build_mlp()
    providers = args.providers.split(",") if args.providers else None
    t0 = time.perf_counter()
    ds = batch_inference(model, args.rows, workers, args.batch_size, providers)
    outputs = [a.name for a in onnxplex.InferenceSession(model).get_outputs()]
    ids, first, workers = [], [], set()
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        ids.append(batch["id"])
        first.append(batch[outputs[0]])
        workers.update(batch["worker"].tolist())
    elapsed = time.perf_counter() - t0
    ids_all, out_all = np.concatenate(ids), np.concatenate(first)
    # check a sample against a session in this process
    order = np.argsort(ids_all)
    sample = order[:256]
    local = onnxplex.InferenceSession(model, providers=providers)
    name, shape = input_signature(model)
    (want, *_) = local.run(None, {name: features_for(ids_all[sample], shape)})
    diff = float(np.max(np.abs(out_all[sample].astype(np.float64) - want)))
    print(f"{len(ids_all)} rows scored in {elapsed:.2f} s ({len(ids_all) / elapsed:.0f} rows/s, "
          f"Ray start-up and actor creation included) by {len(workers)} worker session(s):")
    for w in sorted(workers):
        print(f"  {w}")
    print(f"max |difference| from a local session on {len(sample)} rows: {diff:.3g}")
    return {"rows": len(ids_all), "unique_ids": len(np.unique(ids_all)), "workers": workers,
            "max_abs_diff": diff, "seconds": elapsed}


if __name__ == "__main__":
    main()
