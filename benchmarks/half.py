"""Half-precision (fp16) zoo models side by side: onnxplex against onnxruntime.

    python benchmarks/half.py --models DIR [--out DIR2] [--threads 1,2] [--runs 20] [--only ...]
                              [--providers xnnpack_like,cpu_mlas]

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
    openvino_runner,
    plex_session,
    print_geomeans,
)
from benchmarks.build_models import convert_fp16  # noqa: E402

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

    from onnxplex._perf import _ort_session

    ort.set_default_logger_severity(3)
    ours = plex_session(path, threads, providers)
    theirs = _ort_session(ort, str(path), "ORT_ENABLE_ALL", threads, 0)
    full = _ort_session(ort, str(float_path), "ORT_ENABLE_ALL", threads, 0)
    ref = full.run(None, feeds)[0]
    a, b = ours.run(None, feeds)[0], theirs.run(None, feeds)[0]
    runners = [lambda f: ours.run(None, f), lambda f: theirs.run(None, f)]
    ov, why = openvino_runner(path, threads, [o.name for o in theirs.get_outputs()])
    ov_err = None
    if ov is not None:
        ov_err = _relative(ov(feeds)[0], ref)
        runners.append(ov)
    ms = alternate(runners, feeds, runs)
    return {"ours_ms": ms[0], "theirs_ms": ms[1], "ov_ms": ms[2] if ov is not None else None,
            "ov_why": why, "ov_err": ov_err,
            "ours_err": _relative(a, ref), "theirs_err": _relative(b, ref),
            "vs_ort": _relative(a, b)}


def main(argv: list[str] | None = None) -> int:
    args, src, out, names, threads = arguments(__doc__, "half", argv, MODELS)
    ratios: dict[int | tuple[int, str], list[float]] = {t: [] for t in threads}
    print(f"{'model':<18} {'threads':>7} {'onnxplex ms':>12} {'onnxruntime ms':>15} "
          f"{'ratio':>6} {'rel. err onnxplex':>18} {'rel. err onnxruntime':>21} "
          f"{'vs onnxruntime':>15} {'openvino ms':>12} {'plex/ov':>8} {'rel. err openvino':>18}")
    for name, f in model_files(src, names, 18):
        half = cached(convert_fp16, f, out / f"{name}_fp16.onnx")
        with np.load(src / f"{name}.inputs.npz") as z:
            feeds = {k: z[k] for k in z.files}
        for t in threads:
            r = bench(half, f, feeds, t, args.runs, args.providers)
            ratio = r["ours_ms"] / r["theirs_ms"]
            ratios[t].append(ratio)
            if r["ov_ms"] is not None:
                ratios.setdefault((t, "onnxplex / openvino"), []).append(
                    r["ours_ms"] / r["ov_ms"])
                ov = (f"{r['ov_ms']:>12.2f} {r['ours_ms'] / r['ov_ms']:>8.2f} "
                      f"{r['ov_err']:>18.2e}")
            else:
                ov = f"openvino: {r['ov_why']}"
            print(f"{name:<18} {t:>7} {r['ours_ms']:>12.2f} {r['theirs_ms']:>15.2f} "
                  f"{ratio:>6.2f} {r['ours_err']:>18.2e} {r['theirs_err']:>21.2e} "
                  f"{r['vs_ort']:>15.2e} {ov}", flush=True)
    print_geomeans(ratios)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
