"""Writes the example models of ``onnxplex.datasets`` (``core/onnxplex/datasets/*.onnx``).

    python scripts/make-examples.py      # needs scikit-learn and skl2onnx (the test extra)

onnxruntime's documentation and tutorials start from three small models its package ships
(``onnxruntime.datasets.get_example``); onnxplex ships models of the same names and
signatures, built here:

* ``mul_1.onnx``: ``Y = X * W``, X float[3, 2], W the constant [[1, 2], [3, 4], [5, 6]].
* ``sigmoid.onnx``: ``y = Sigmoid(x)``, x float[3, 4, 5].
* ``logreg_iris.onnx``: scikit-learn's LogisticRegression fitted on the first two features
  of the Iris data (sepal length and width), converted by skl2onnx with its defaults
  (LinearClassifier, Normalizer, ZipMap): input ``float_input`` float[None, 2], outputs
  ``label`` and ``probabilities`` (a sequence of maps). Its weights are its own, so its
  predictions are not those of onnxruntime's example of the same name.

The files are committed; rerun this only to change them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

OUT = Path(__file__).resolve().parent.parent / "core" / "onnxplex" / "datasets"


def mul_1() -> onnx.ModelProto:
    w = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "W"], ["Y"])], "mul_1",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [w])
    return helper.make_model(graph, producer_name="onnxplex", opset_imports=[
        helper.make_opsetid("", 13)], ir_version=7)


def sigmoid() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])], "sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])])
    return helper.make_model(graph, producer_name="onnxplex", opset_imports=[
        helper.make_opsetid("", 13)], ir_version=7)


def logreg_iris() -> onnx.ModelProto:
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    x = x[:, :2].astype(np.float32)
    model = LogisticRegression(max_iter=1000).fit(x, y)
    onx = to_onnx(model, initial_types=[("float_input", FloatTensorType([None, 2]))],
                  target_opset={"": 13, "ai.onnx.ml": 1})
    # (skl2onnx names its outputs output_label and output_probability; renamed in place,
    # since its final_types route a map through an Identity, which no opset types)
    rename = {"output_label": "label", "output_probability": "probabilities"}
    taken = {v for node in onx.graph.node for v in node.output} & set(rename.values())
    for old in rename:
        if rename[old] in taken:   # (an inner value already holds the name: swap it away)
            for node in onx.graph.node:
                for names in (node.input, node.output):
                    for i, n in enumerate(names):
                        if n == rename[old]:
                            names[i] = f"{n}_tensor"
    for node in onx.graph.node:
        for names in (node.input, node.output):
            for i, n in enumerate(names):
                names[i] = rename.get(n, n)
    for out in onx.graph.output:
        out.name = rename.get(out.name, out.name)
    onx.doc_string = ("scikit-learn LogisticRegression on the Iris data's sepal length and "
                      "width, converted by skl2onnx (scripts/make-examples.py)")
    return onx


def main() -> None:
    for name, make in (("mul_1", mul_1), ("sigmoid", sigmoid), ("logreg_iris", logreg_iris)):
        model = make()
        onnx.checker.check_model(model, full_check=True)
        path = OUT / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
