"""Half-precision (fp16, bf16) zoo models side by side: onnxplex against onnxruntime.

    python benchmarks/half.py --models DIR [--out DIR2] [--threads 1,2] [--runs 20] [--only ...]
                              [--providers xnnpack_like,cpu_mlas] [--formats fp16,bf16]

``DIR`` holds float models of the zoo with their inputs (``python -m benchmarks.zoo.build
--out DIR``); each of :data:`MODELS` found there is converted once with onnxruntime's own
tool as a new user would (``onnxruntime.transformers.float16.convert_float_to_float16`` with
``keep_io_types=True``: float32 inputs and outputs, the rest float16) into ``DIR2`` (default
``DIR/half``, kept between runs). Both engines then run it in one process, alternating, on the
zoo's inputs for that model (onnxruntime as the other benchmarks create it: workers that sleep
between runs). Prints per model and thread count the median latency of each, the ratio
(onnxplex / onnxruntime, below 1 is faster), and how far each engine's first output is from
the float32 model's (largest absolute difference over the output's largest magnitude): the
error that half precision costs, for onnxplex and for onnxruntime. With OpenVINO installed it
runs third in the rotation (benchmarks/peers.py's configuration: f32 hint, latency, the same
threads), with its time, onnxplex's ratio to it and its own error.

``--formats bf16`` (or ``fp16,bf16``) also converts each model to bfloat16
(:func:`benchmarks.build_models.convert_bf16`: onnxruntime's float16 tool with the ops whose
schema takes no bfloat16 left in float32, then the half type changed; no onnxruntime tool
writes bfloat16). onnxruntime's CPU provider has no bfloat16 kernels (MatMul, Add, Relu,
Conv: NOT_IMPLEMENTED), so where it cannot run the bfloat16 model its float32 model is timed
instead: the ratio is then onnxplex's bfloat16 model against onnxruntime's float32 one (the
row says so), and its error column is empty.

The converter and onnxruntime are benchmark dependencies only; the library never imports them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._variants import (  # noqa: E402
    alternate,
    arguments,
    cached,
    model_files,
    openvino_cells,
    openvino_runner,
    plex_session,
    print_geomeans,
)
from benchmarks.build_models import convert_bf16, convert_fp16  # noqa: E402

FORMATS = {"fp16": convert_fp16, "bf16": convert_bf16}

MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "mnasnet0_5",
          "regnet_y_400mf", "googlenet", "densenet121", "convnext_tiny",
          "deeplabv3_mobilenet_v3_large", "bert", "distilbert", "albert", "electra_small",
          "gpt2", "gpt_neox", "llama", "qwen2", "clip")


def _relative(a: np.ndarray, ref: np.ndarray) -> float:
    ref = np.asarray(ref, np.float64)
    scale = float(np.abs(ref).max()) or 1.0
    return float(np.abs(np.asarray(a, np.float64) - ref).max()) / scale


def bench(path: Path, float_path: Path, feeds: dict, threads: int, runs: int,
          providers: str = "") -> dict:
    import onnxruntime as ort

    from onnxplex.tools.perf import _ort_session

    ort.set_default_logger_severity(3)
    ours = plex_session(path, threads, providers)
    full = _ort_session(ort, str(float_path), "ORT_ENABLE_ALL", threads, 0)
    theirs_why = ""
    try:
        theirs = _ort_session(ort, str(path), "ORT_ENABLE_ALL", threads, 0)
        b = theirs.run(None, feeds)[0]
    except Exception as e:  # noqa: BLE001 - bfloat16: no CPU kernels; its float32 model instead
        theirs_why = str(e).strip().splitlines()[0][:120]
        theirs, b = full, None
    ref = full.run(None, feeds)[0]
    a = ours.run(None, feeds)[0]
    runners = [lambda f: ours.run(None, f), lambda f: theirs.run(None, f)]
    ov, why = openvino_runner(path, threads, [o.name for o in theirs.get_outputs()])
    ov_err = None
    if ov is not None:
        try:
            ov_err = _relative(ov(feeds)[0], ref)
            runners.append(ov)
        except Exception as e:  # noqa: BLE001 - compiled but cannot run it: reported
            ov, why = None, str(e).strip().splitlines()[0][:120]
    ms = alternate(runners, feeds, runs)
    return {"ours_ms": ms[0], "theirs_ms": ms[1], "ov_ms": ms[2] if ov is not None else None,
            "ov_why": why, "ov_err": ov_err, "theirs_why": theirs_why,
            "ours_err": _relative(a, ref),
            "theirs_err": None if b is None else _relative(b, ref),
            "vs_ort": None if b is None else _relative(a, b)}


def main(argv: list[str] | None = None) -> int:
    args, src, out, names, threads = arguments(
        __doc__, "half", argv, MODELS,
        formats=(tuple(FORMATS), "fp16"))
    formats = args.formats
    ratios: dict[tuple[int, str], list[float]] = {}
    print(f"{'model':<25} {'threads':>7} {'onnxplex ms':>12} {'onnxruntime ms':>15} "
          f"{'ratio':>6} {'rel. err onnxplex':>18} {'rel. err onnxruntime':>21} "
          f"{'vs onnxruntime':>15} {'openvino ms':>12} {'plex/ov':>8} {'rel. err openvino':>18}")
    for name, f in model_files(src, names, 25):
        with np.load(src / f"{name}.inputs.npz") as z:
            feeds = {k: z[k] for k in z.files}
        for fmt in formats:
            half = cached(FORMATS[fmt], f, out / f"{name}_{fmt}.onnx")
            label = name if fmt == "fp16" else f"{name} ({fmt})"
            for t in threads:
                r = bench(half, f, feeds, t, args.runs, args.providers)
                ratio = r["ours_ms"] / r["theirs_ms"]
                what = fmt if not r["theirs_why"] else f"{fmt} vs onnxruntime's float32"
                ratios.setdefault((t, what), []).append(ratio)
                ov = openvino_cells(r, ratios, t, fmt, "ov_err", ">18.2e")
                theirs = (f"{r['theirs_err']:>21.2e} {r['vs_ort']:>15.2e}"
                          if r["theirs_err"] is not None
                          else f"{'-':>21} {'-':>15}")
                print(f"{label:<25} {t:>7} {r['ours_ms']:>12.2f} {r['theirs_ms']:>15.2f} "
                      f"{ratio:>6.2f} {r['ours_err']:>18.2e} {theirs} {ov}", flush=True)
                if r["theirs_why"]:
                    print(f"{'':<25} onnxruntime cannot run it ({r['theirs_why']}); "
                          "its float32 model timed", flush=True)
    print_geomeans(ratios)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
