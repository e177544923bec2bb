"""Declared operator configurations: one variant table per op class, as XNNPACK has for its
KleidiAI paths (``gemm-config.c``: pf32, pf16, qp8_f32_qc8w, pqs8_qc8w, qp8_f32_qb4w), and
whether the Kleidi micro-kernel behind each variant can run here.

A node that matches a variant runs the variant's Kleidi kernel when it is available: the native
extension ``onnxplex.providers.kleidi_sme2._kleidi`` imports, has the variant's kernel family,
and its dispatch selected a non-reference (Arm) variant for it -- or the portable reference
variant is forced with ``ONNXPLEX_KLEIDI_FORCE_REFERENCE=1``. Otherwise, and for nodes that match
no variant, the provider's own numpy implementation runs; neither is an error.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

FORCE_ENV = "ONNXPLEX_KLEIDI_FORCE_REFERENCE"
NATIVE_MODULE = "onnxplex.providers.kleidi_sme2._kleidi"

FULLY_CONNECTED = "fully_connected"
CONV2D = "conv2d"
BATCH_MATMUL = "batch_matmul"


@dataclass(frozen=True)
class Variant:
    """One declared configuration of an op class.

    ``family`` names the Kleidi kernel family that runs it (``None``: this build of the Kleidi
    library has no kernel for it; ``why_missing`` says what is lacking).
    """

    name: str
    op_class: str
    family: str | None
    summary: str
    why_missing: str = ""


_NO_PQS8 = ("not available in this build (the Kleidi library has no int8-in/int8-out "
            "qai8_qai8p_qsi8cxp kernel)")

TABLES: dict[str, tuple[Variant, ...]] = {
    FULLY_CONNECTED: (
        Variant("pf16_gemm", FULLY_CONNECTED, "gemm_f16",
                "fp16 activations and outputs, constant fp16 weights"),
        Variant("pf32_gemm", FULLY_CONNECTED, "gemm_f32",
                "fp32 activations and outputs, constant fp32 weights"),
        Variant("qp8_f32_qc8w_gemm", FULLY_CONNECTED, "qgemm_qsi8cx",
                "fp32 activations quantized to int8 dynamically, constant int8 weights "
                "symmetric per channel, fp32 outputs (DynamicQuantizeMatMul, or "
                "DynamicQuantizeLinear + MatMulInteger + Cast + Mul)"),
        Variant("pqs8_qc8w_gemm", FULLY_CONNECTED, None,
                "int8/uint8 asymmetric activations and outputs, constant int8 weights "
                "symmetric per channel (QDQ: DequantizeLinear x2 -> MatMul/Gemm -> "
                "QuantizeLinear)", _NO_PQS8),
        Variant("qp8_f32_qb4w_gemm", FULLY_CONNECTED, "qgemm_qsi4c32",
                "fp32 activations quantized to int8 dynamically, constant int4 weights in "
                "blocks of 32k, fp32 outputs (MatMulNBits)"),
    ),
    CONV2D: (
        Variant("pf32_gemm", CONV2D, "gemm_f32",
                "pointwise (1x1, no padding, group 1) fp32 convolution as a GEMM over NHWC "
                "pixels"),
        Variant("pqs8_qc8w_gemm", CONV2D, None,
                "int8/uint8 NHWC convolution with constant int8 weights symmetric per channel "
                "or per tensor (QDQ: DequantizeLinear x2 -> Conv -> QuantizeLinear)", _NO_PQS8),
    ),
    BATCH_MATMUL: (
        Variant("pf32_gemm", BATCH_MATMUL, "gemm_f32",
                "fp32 x fp32 -> fp32, both operands computed (the right one packed per run)"),
        Variant("pf16_gemm", BATCH_MATMUL, "gemm_f16",
                "fp16 x fp16 -> fp16, both operands computed (the right one packed per run)"),
    ),
}


def variant(op_class: str, name: str) -> Variant:
    for v in TABLES[op_class]:
        if v.name == name:
            return v
    raise KeyError(f"{op_class} has no variant {name!r}")


# --------------------------------------------------------------------------------------------
# The Kleidi extension
# --------------------------------------------------------------------------------------------


@functools.cache
def native() -> tuple[Any | None, str]:
    """The Kleidi extension module, or ``(None, why it cannot be imported)``."""
    try:
        return importlib.import_module(NATIVE_MODULE), ""
    except ImportError as e:
        return None, f"the Kleidi extension is not importable ({e})"


def env_forced() -> bool:
    return os.environ.get(FORCE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# Python entry points each family needs from the binding (pack, run).
_BINDINGS = {
    "gemm_f32": ("pack_gemm_f32", "gemm_f32"),
    "gemm_f16": ("pack_gemm_f16", "gemm_f16"),
    "qgemm_qsi8cx": ("pack_qsi8cx", "qgemm_qsi8cx"),
    "qgemm_qsi4c32": ("matmulnbits_to_qsu4c32", "pack_qsi4c32", "qgemm_qsi4c32"),
}


@dataclass(frozen=True)
class KleidiStatus:
    """Whether a variant's Kleidi kernel runs here: ``kernel`` is ``family/variant`` when it
    does, else ``why`` says why not."""

    available: bool
    kernel: str = ""
    why: str = ""


def kleidi_status(v: Variant, *, forced: bool | None = None,
                  enabled: bool = True) -> KleidiStatus:
    """The Kleidi kernel of variant ``v`` on this CPU. ``forced``: the reference variant is
    forced (default: the environment variable); ``enabled=False``: the provider option
    ``kleidi=0`` turned Kleidi off."""
    if v.family is None:
        return KleidiStatus(False, "", v.why_missing)
    if not enabled:
        return KleidiStatus(False, "", "Kleidi kernels are turned off (provider option kleidi=0)")
    mod, why = native()
    if mod is None:
        return KleidiStatus(False, "", why)
    try:
        families = mod.variants()
    except Exception as e:  # noqa: BLE001 - a broken extension only disables the fast path
        return KleidiStatus(False, "", f"the Kleidi extension's variants() failed: {e}")
    missing = [f for f in _BINDINGS.get(v.family, ()) if not hasattr(mod, f)]
    if v.family not in families or missing:
        return KleidiStatus(False, "", f"this build of the Kleidi library has no {v.family} "
                                       "kernel family")
    if forced if forced is not None else env_forced():
        return KleidiStatus(True, f"{v.family}/reference")
    selected = families[v.family].get("selected", "reference")
    if selected == "reference":
        return KleidiStatus(False, "", f"{v.family} has no Arm variant for this CPU "
                                       f"({FORCE_ENV}=1 forces the reference one)")
    return KleidiStatus(True, f"{v.family}/{selected}")


def describe_tables(forced: bool | None = None) -> dict[str, Any]:
    """Per op class and variant: what it matches, its Kleidi kernel family and whether that
    kernel runs on this CPU (what ``onnxplex providers`` prints)."""
    out: dict[str, Any] = {}
    for op_class, variants in TABLES.items():
        rows = {}
        for v in variants:
            st = kleidi_status(v, forced=forced)
            rows[v.name] = {"matches": v.summary, "kleidi_family": v.family or "none",
                            "kleidi_kernel": st.kernel if st.available else f"none: {st.why}"}
        out[op_class] = rows
    return out
