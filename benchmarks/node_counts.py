"""Node counts after optimization: onnxruntime ORT_ENABLE_ALL vs onnxplex DISABLE_ALL / ALL.

    python benchmarks/build_models.py --out DIR
    python benchmarks/node_counts.py DIR

Prints a markdown table (the README's optimizer table comes from here). Layout conversions
count on neither side: onnxruntime's NCHWc ReorderInput/ReorderOutput nodes, onnxplex's
channels-last Transposes (the layout level's NhwcTransformer); the table compares what the
fusions leave.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

import onnxplex
from onnxplex.optimizer._layout import LAYOUT_TRANSPOSE_SUFFIXES

MODELS = ("resnet50", "mobilenetv2", "bert_base", "gpt2_small", "bert_base_int8", "mlp")


def onnxruntime_count(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
        so.log_severity_level = 3
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        nodes = onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node
        return sum(1 for n in nodes if n.op_type not in ("ReorderInput", "ReorderOutput"))


def onnxplex_count(path: Path, level: onnxplex.GraphOptimizationLevel) -> int:
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    nodes = onnxplex.InferenceSession(str(path), so).model.nodes
    return sum(1 for n in nodes
               if not (n.op_type == "Transpose" and n.name.endswith(LAYOUT_TRANSPOSE_SUFFIXES)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    print("| model | onnxruntime ALL | onnxplex DISABLE_ALL | onnxplex ALL |")
    print("|---|---:|---:|---:|")
    for name in MODELS:
        path = args.folder / f"{name}.onnx"
        if not path.exists():
            continue
        level = onnxplex.GraphOptimizationLevel
        print(f"| {name} | {onnxruntime_count(path)} | "
              f"{onnxplex_count(path, level.ORT_DISABLE_ALL)} | "
              f"{onnxplex_count(path, level.ORT_ENABLE_ALL)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
