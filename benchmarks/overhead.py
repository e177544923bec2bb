"""Framework overhead: a chain of tiny nodes, time per node, beside onnxruntime.

    python benchmarks/overhead.py [--nodes 1000] [--runs 50]

The chain alternates Neg and Relu on a 4-element tensor, so the kernels cost next to nothing
and the time per node is the executor's dispatch cost. Both engines run in this process,
alternating, with graph optimizations off (otherwise onnxruntime removes nothing here either,
but the chain should be measured as written). Prints microseconds per node (median run).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxplex


def chain(n: int) -> bytes:
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"v{i}"], [f"v{i + 1}"])
             for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT,
                                                                         [4])],
                          [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [4])])
    # IR 10: what onnxruntime 1.31 reads
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=10).SerializeToString()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--runs", type=int, default=50)
    a = p.parse_args(argv)
    model = chain(a.nodes)
    feeds = {"v0": np.arange(4, dtype=np.float32)}
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    runs = {"onnxplex": onnxplex.InferenceSession(model, so).run}
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        oso = ort.SessionOptions()
        oso.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        oso.intra_op_num_threads = 1
        runs["onnxruntime"] = ort.InferenceSession(model, oso,
                                                   providers=["CPUExecutionProvider"]).run
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(a.runs + 3):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run(None, feeds)
            if i >= 3:
                times[name].append(time.perf_counter() - t0)
    per = {k: float(np.median(v)) / a.nodes * 1e6 for k, v in times.items()}
    for k, v in per.items():
        print(f"{k:12s} {v:7.2f} us per node ({a.nodes} nodes, median of {a.runs} runs)")
    if "onnxruntime" in per:
        print(f"ratio onnxplex / onnxruntime: {per['onnxplex'] / per['onnxruntime']:.2f}")
    return 0


if __name__ == "__main__":
    onnx.checker.check_model(onnx.load_from_string(chain(3)))
    sys.exit(main())
