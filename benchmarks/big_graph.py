"""Loading very large graphs beside onnxruntime: creation time and peak memory.

    python benchmarks/big_graph.py [--nodes 100000] [--inputs 10000] [--rounds 3]

Two models, built here with onnx.helper: a chain of ``--nodes`` Neg/Relu nodes on a float[4],
and a Concat of ``--inputs`` graph inputs. Each creation runs in a fresh process (its peak
resident memory is the process's, so it must be alone in it), the two engines alternating,
``--rounds`` times each; the medians and their ratios are printed (peak memory: the child's
``VmHWM``, Linux only). A child process also
runs the session once, so a session that builds but cannot run does not pass.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time
import numpy as np


def peak_mib():
    # VmHWM: this process image's peak (getrusage's ru_maxrss keeps the parent's across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

engine, path = sys.argv[1], sys.argv[2]
if engine == "onnxruntime":
    import onnxruntime as rt
    kwargs = {"providers": ["CPUExecutionProvider"]}
else:
    import onnxplex as rt
    kwargs = {}
base = peak_mib()
t0 = time.perf_counter()
sess = rt.InferenceSession(path, **kwargs)
seconds = time.perf_counter() - t0
feed = {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
        for i in sess.get_inputs()}
sess.run(None, feed)
print(json.dumps({"seconds": seconds, "peak_mib": peak_mib(), "import_mib": base}))
"""


def chain_model(n: int):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"t{i}" if i else "x"],
                              [f"t{i + 1}" if i < n - 1 else "y"]) for i in range(n)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def concat_model(n: int):
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1]) for i in range(n)]
    graph = helper.make_graph(
        [helper.make_node("Concat", [v.name for v in inputs], ["y"], axis=0)], "concat",
        inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def measure(engine: str, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, engine, str(path)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    import onnx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--inputs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        models = {f"chain of {a.nodes} nodes": chain_model(a.nodes),
                  f"Concat of {a.inputs} inputs": concat_model(a.inputs)}
        print("| model | onnxplex s | onnxruntime s | time ratio | onnxplex peak MiB "
              "| onnxruntime peak MiB | memory ratio |")
        print("|---|---|---|---|---|---|---|")
        for name, model in models.items():
            path = Path(tmp) / "model.onnx"
            onnx.save(model, path)
            got: dict[str, list[dict[str, float]]] = {"onnxplex": [], "onnxruntime": []}
            for r in range(a.rounds):
                order = ("onnxplex", "onnxruntime") if r % 2 else ("onnxruntime", "onnxplex")
                for engine in order:
                    got[engine].append(measure(engine, path))
            med = {e: {k: statistics.median(x[k] for x in runs) for k in runs[0]}
                   for e, runs in got.items()}
            ours, theirs = med["onnxplex"], med["onnxruntime"]
            print(f"| {name} | {ours['seconds']:.2f} | {theirs['seconds']:.2f} "
                  f"| {ours['seconds'] / theirs['seconds']:.2f} | {ours['peak_mib']:.0f} "
                  f"| {theirs['peak_mib']:.0f} | {ours['peak_mib'] / theirs['peak_mib']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
