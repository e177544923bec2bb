"""The kleidi_sme2 provider class.

Its kernels arrive with their own issue; until then it reports what the CPU offers and
declares itself unavailable, so sessions never pick it by accident.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from onnxplex import Availability, Capability, ExecutionProvider, GraphView

logger = logging.getLogger(__name__)


@functools.cache
def _native() -> tuple[Any | None, str]:
    try:
        from . import _kleidi
    except ImportError as e:
        return None, f"native extension not built or not loadable: {e}"
    return _kleidi, ""


def cpu_features() -> dict[str, Any]:
    """``{'arch': ..., 'features': [...]}`` as detected by the native probe."""
    mod, why = _native()
    if mod is None:
        return {"arch": "unknown", "features": [], "error": why}
    return mod.cpu_features()


class KleidiSme2Provider(ExecutionProvider):
    """Arm matrix-instruction kernels (SME2 / i8mm / NEON). Kernels not yet implemented."""

    name = "kleidi_sme2"

    @classmethod
    def available(cls) -> Availability:
        mod, why = _native()
        if mod is None:
            return Availability(False, why)
        feats = mod.cpu_features()
        if feats["arch"] != "aarch64" or not ({"sme2", "i8mm"} & set(feats["features"])):
            return Availability(False, f"needs aarch64 with SME2 or i8mm; this CPU is "
                                       f"{feats['arch']} with {', '.join(feats['features'])}")
        return Availability(False, "the Kleidi micro-kernels are not implemented yet")

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {"cpu": cpu_features()}

    def get_capability(self, graph: GraphView) -> Capability:
        return Capability()
