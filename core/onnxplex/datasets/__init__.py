"""Small example models, as ``onnxruntime.datasets`` ships them for its documentation.

``get_example(name)`` is the absolute path of one of them: ``mul_1.onnx`` (``Y = X * W``,
X float[3, 2]), ``sigmoid.onnx`` (``y = Sigmoid(x)``, x float[3, 4, 5]) and
``logreg_iris.onnx`` (a scikit-learn logistic regression on two Iris features, converted by
skl2onnx: ``float_input`` float[N, 2] -> ``label``, ``probabilities`` as a list of
dicts). They have onnxruntime's names and signatures, so its tutorials run unchanged;
they are built by ``scripts/make-examples.py``, and the regression's weights are its own.
"""

from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def examples() -> list[str]:
    """The names :func:`get_example` knows."""
    return sorted(f for f in os.listdir(_HERE) if f.endswith(".onnx"))


def get_example(name: str) -> str:
    """The absolute file name of the example model ``name`` (e.g. ``"sigmoid.onnx"``);
    FileNotFoundError, naming the examples there are, for any other name."""
    if name in examples():
        return os.path.join(_HERE, name)
    raise FileNotFoundError(f"Unable to find example {name!r}: the examples are "
                            f"{', '.join(examples())}")
