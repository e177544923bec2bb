"""The ``kleidi_sme2`` provider: KleidiAI-style Arm micro-kernels (SME2, i8mm, NEON).

This module is the plugin: it registers the provider by dotted path, so listing providers
never loads the native extension.
"""

from __future__ import annotations

from onnxplex import hookimpl


@hookimpl
def onnxplex_register_providers(register):
    register("onnxplex.providers.kleidi_sme2._provider:KleidiSme2Provider", name="kleidi_sme2",
             aliases=("KleidiAIExecutionProvider",))
