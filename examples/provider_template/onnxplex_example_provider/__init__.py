"""The plugin module of ``onnxplex-example-provider``.

onnxplex imports this module (named by the ``onnxplex`` entry point in pyproject.toml) when
it first lists providers, and calls its ``onnxplex_register_providers`` hook once.

Keep this module cheap: it must not import the provider implementation (``provider.py``), nor
anything heavy or native. Registering by *dotted path* lets onnxplex import the class only
when a session (or ``get_available_providers()``, which asks ``available()``) needs it.
"""

from __future__ import annotations

import onnxplex

__all__ = ["onnxplex_register_providers"]


@onnxplex.hookimpl
def onnxplex_register_providers(register):
    # One call per provider this package ships. `name` is required with a dotted path (the
    # class is not imported, so its `name` attribute cannot be read); it must equal the
    # class's `name`. `aliases` are extra names users may type in providers=[...], e.g. an
    # onnxruntime-style "ExampleNumpyExecutionProvider".
    register(
        "onnxplex_example_provider.provider:ExampleNumpyProvider",
        name="example_numpy",
        aliases=("ExampleNumpyExecutionProvider",),
    )
