"""Node counts after optimization: onnxruntime ORT_ENABLE_ALL vs onnxplex DISABLE_ALL / ALL.

    python benchmarks/build_models.py --out DIR
    python benchmarks/node_counts.py DIR

Prints a markdown table (the README's optimizer table comes from here).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

import onnxplex

MODELS = ("resnet50", "mobilenetv2", "bert_base", "gpt2_small", "bert_base_int8", "mlp")


def onnxruntime_count(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
        so.log_severity_level = 3
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return len(onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node)


def onnxplex_count(path: Path, level: onnxplex.GraphOptimizationLevel) -> int:
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    return len(onnxplex.InferenceSession(str(path), so).model.nodes)


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
