"""The ONNX node conformance cases that ship with the installed onnx package, run through a
normal InferenceSession, compared at each case's own tolerances.

Loading, running and comparing live in ``onnxplex.testing._cases`` (the provider author kit
runs the same cases); this module adds the cpu_mlas summary behind the README's numbers
(``python tests/conformance/cases.py``, run by scripts/test-onnx-weekly.sh on onnx-weekly too).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

import onnxplex
from onnxplex.testing._cases import RANDOM_CASES, all_cases, compare, run_case, to_value

__all__ = ["RANDOM_CASES", "all_cases", "compare", "run_case", "summarize", "to_value"]


def summarize(providers: Sequence[Any] = ("cpu_mlas",)
              ) -> tuple[dict[str, int], dict[str, str], dict[str, str]]:
    """Run every case; returns counts by outcome ('pass', 'error' for an onnxplex error,
    'wrong', 'crash'), the wrong answers and crashes with their first message line, and the
    onnxplex errors with theirs."""
    counts = {"pass": 0, "error": 0, "wrong": 0, "crash": 0}
    wrong: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name, case in all_cases().items():
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_case(case, providers)
            counts["pass"] += 1
        except AssertionError as e:
            counts["wrong"] += 1
            wrong[name] = (str(e).strip().splitlines() or ["?"])[0]
        except onnxplex.OnnxplexError as e:
            counts["error"] += 1
            errors[name] = (str(e).strip().splitlines() or ["?"])[0]
        except Exception as e:  # noqa: BLE001 - counted, and reported as a wrong outcome
            counts["crash"] += 1
            wrong[name] = f"{type(e).__name__}: {e}"
    return counts, wrong, errors


if __name__ == "__main__":   # python tests/conformance/cases.py: the README's numbers
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    total = len(all_cases())
    for label, provs in (("with the reference fallback", ["cpu_mlas"]),
                         ("natively", [("cpu_mlas", {"reference_fallback": False})])):
        counts, wrong, errors = summarize(provs)
        print(f"{label}: {counts['pass']} / {total} passed; {counts['error']} onnxplex errors; "
              f"{counts['wrong'] + counts['crash']} wrong or crashed")
        for name, msg in sorted({**errors, **wrong}.items()):
            print(f"    {name}: {msg[:120]}")
