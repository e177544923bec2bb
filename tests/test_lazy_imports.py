"""``import onnxplex`` defers sympy (which onnx-ir imports eagerly) until something uses it."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120, env={**os.environ, **env})
    return out.stdout.strip()


def test_sympy_is_not_loaded_by_import_or_a_session():
    code = (
        "import sys, numpy as np, onnx\n"
        "from onnx import helper, TensorProto as T\n"
        "import onnxplex\n"
        "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',\n"
        "    [helper.make_tensor_value_info('x', T.FLOAT, ['N', 3])],\n"
        "    [helper.make_tensor_value_info('y', T.FLOAT, ['N', 3])])\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n"
        "onnxplex.InferenceSession(m.SerializeToString()).run(None, {'x': np.ones((2, 3),\n"
        "    np.float32)})\n"
        "print('sympy.core' in sys.modules)\n")
    assert _run(code) == "False"


def test_symbolic_dim_arithmetic_loads_sympy_on_use():
    code = ("import sys, onnxplex, onnx_ir as ir\n"
            "d = ir.SymbolicDim('N')\n"
            "print(d * 2 + 1, 'sympy.core' in sys.modules)\n"
            "import sympy\n"
            "print(sympy.Symbol('x') + 1)\n")
    assert _run(code).splitlines() == ["2*N + 1 True", "x + 1"]


def test_nothing_is_deferred_when_asked_or_already_imported():
    check = "import sys, onnxplex; print('sympy.core' in sys.modules)"
    assert _run(check, ONNXPLEX_EAGER_IMPORTS="1") == "True"
    lazy = ("import sys; {first}; import onnxplex; "
            "print(type(sys.modules['sympy']).__name__ == '_LazyModule')")
    assert _run(lazy.format(first="import sympy")) == "False"
    assert _run(lazy.format(first="pass")) == "True"
    assert _run("import onnx_ir, sys; import onnxplex; print('sympy.core' in sys.modules)") \
        == "True"
