"""The benchmarks' second peer, OpenVINO, and what the runners share about peers.

``benchmarks/run.py`` and ``benchmarks/zoo/run.py`` time onnxplex against onnxruntime and,
when the ``openvino`` package imports (``pip install '.[openvino]'``), against OpenVINO too:

* :class:`OpenVinoPeer` compiles the ONNX file directly (``openvino.Core().compile_model(path,
  "CPU", config)``) in fp32 (``INFERENCE_PRECISION_HINT=f32``, and no dynamic quantization of
  activations: :func:`openvino_config`) with the latency hint and the same number of threads
  as the other engines (``INFERENCE_NUM_THREADS``); ``run(feeds)``
  takes a dict of input name -> numpy array and returns the outputs in the model's order.
  Compiling is OpenVINO's session creation.
* :func:`load_openvino` returns the module or ``None``; the first ``None`` in a process says
  "OpenVINO not installed" once on stderr, and the runners then show "-" in its columns.
* :func:`error_cell` is what a table shows for a model OpenVINO cannot take (an input type it
  has no tensor for, a failed compile): ``openvino: <error class>: <first line>``.
* :func:`median_creation_times` times session creations of several engines, alternating.

Only benchmarks import this module (and openvino): the library never does.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

OPENVINO = "openvino"
_said_missing = False


def load_openvino(say: bool = True):
    """The ``openvino`` module, or ``None`` if it does not import (then, with ``say``, print
    "OpenVINO not installed" on stderr, once per process)."""
    global _said_missing
    try:
        import openvino
    except Exception as exc:  # noqa: BLE001 - any import failure: no OpenVINO columns
        if say and not _said_missing:
            _said_missing = True
            print(f"OpenVINO not installed ({type(exc).__name__}: {exc}); its columns show "
                  "'-' (pip install '.[openvino]')", file=sys.stderr, flush=True)
        return None
    return openvino


def openvino_version() -> str | None:
    ov = load_openvino(say=False)
    return None if ov is None else ov.__version__.split("-")[0]


def openvino_config(threads: int) -> dict[str, Any]:
    """fp32, latency hint, ``threads`` inference threads (0: OpenVINO's default).

    ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``: even under the f32 hint, OpenVINO's CPU plugin
    quantizes the activations of a weight-compressed MatMul (MatMulNBits) to int8 in groups of
    32 by default (2026.4.1: the int4 MLP then differed from onnxruntime by 1.5e-3, 0.8% of its
    scale, and by 0.0 with it off); onnxruntime and onnxplex compute it in fp32."""
    return {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": int(threads), "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


class OpenVinoPeer:
    """An ONNX file compiled for OpenVINO's CPU device; raises whatever OpenVINO raises."""

    def __init__(self, path: str, threads: int, output_names: Sequence[str] | None = None):
        ov = load_openvino(say=False)
        if ov is None:
            raise ImportError("OpenVINO not installed")
        self.compiled = ov.Core().compile_model(str(path), "CPU", openvino_config(threads))
        for kind, ports in (("input", self.compiled.inputs), ("output", self.compiled.outputs)):
            for port in ports:
                if port.get_element_type() == ov.Type.string:
                    # seen with 2026.4.1: a request that ran an Identity of strings aborts
                    # the whole process when freed (free(): invalid pointer)
                    raise TypeError(f"string {kind} {port.get_any_name()!r} not run: OpenVINO "
                                    "aborts the process freeing a string request")
        self.request = self.compiled.create_infer_request()
        ports = list(self.compiled.outputs)
        if output_names is not None:  # the ONNX model's order, by tensor name
            by_name = {n: p for p in ports for n in p.get_names()}
            missing = [n for n in output_names if n not in by_name]
            if missing:
                raise KeyError(f"OpenVINO's compiled model has no output named {missing}")
            ports = [by_name[n] for n in output_names]
        self.outputs = ports

    def run(self, feeds: Mapping[str, Any]) -> list:
        # inputs shared (onnxruntime and onnxplex do not copy a contiguous feed either);
        # outputs copied, since the request's buffers are reused by its next run
        res = self.request.infer(dict(feeds), share_inputs=True)
        return [res[p] for p in self.outputs]


def openvino_factory(path: str, threads: int,
                     output_names: Sequence[str] | None = None) -> Callable[[], Callable]:
    """For ``onnxplex.tools.perf.perf(peers={"openvino": ...})``: compiles, returns the runner."""
    return lambda: OpenVinoPeer(path, threads, output_names).run


def first_line(error: BaseException | str) -> str:
    """``<error class>: <first line of its message>`` (a string is taken as already that)."""
    if isinstance(error, BaseException):
        from onnxplex.tools.perf import _error_line

        error = _error_line(error)
    lines = error.strip().splitlines()
    return lines[0] if lines else ""


def error_cell(error: BaseException | str, limit: int = 120) -> str:
    """The table cell of a model OpenVINO cannot take: ``openvino: <class>: <first line>``
    (markdown-safe, cut at ``limit`` characters)."""
    text = first_line(error)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{OPENVINO}: " + text.replace("|", "\\|")


def median_creation_times(makers: Mapping[str, Callable[[], Any]], rounds: int,
                          first: Mapping[str, float] | None = None) -> dict[str, float]:
    """Median seconds to create each engine's session over ``rounds`` creations, engines
    alternating (a machine's busy spell hits them all); ``first`` adds an earlier creation
    per engine (perf's, which may have paid one-time imports). An engine whose creation
    raises is left out of that round; one that never succeeds is left out of the result."""
    times: dict[str, list[float]] = {k: ([first[k]] if first and k in first else [])
                                     for k in makers}
    for _ in range(rounds):
        for key, make in makers.items():
            t0 = time.perf_counter()
            try:
                sess = make()
            except Exception:  # noqa: BLE001 - recorded as a missing creation time
                continue
            times[key].append(time.perf_counter() - t0)
            del sess
    return {k: statistics.median(v) for k, v in times.items() if v}
