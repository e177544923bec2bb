"""Quantized zoo models side by side: onnxplex against onnxruntime (and OpenVINO).

    python benchmarks/quantized.py --models DIR [--out DIR2] [--threads 1,2] [--runs 20]
                                   [--formats qdq,qdq_pt,qop,dyn,int4] [--providers ...]

``DIR`` holds float models of the zoo (``python -m benchmarks.zoo.build --out DIR``); each
model of a format's list found there is quantized once with onnxruntime's own tools into
``DIR2`` (default ``DIR/quantized``, kept between runs). :data:`FORMATS`: the CNNs statically
(``quantize_static``: uint8 activations, int8 weights, MinMax calibration on four seeded
random inputs) as QDQ with weights per output channel (``qdq``, the default), QDQ per tensor
(``qdq_pt``) and QOperator per channel (``qop``); the transformers dynamically
(``quantize_dynamic``'s defaults: int8 weights, activations quantized at run time, ``dyn``)
and with 4-bit weights (``MatMulNBitsQuantizer``: MatMulNBits, blocks of 32, symmetric,
``int4``). The engines then run each in one process, alternating, on the same input (a seeded
random image for a CNN, the zoo's own inputs for a transformer; onnxruntime as the other
benchmarks create it: workers that sleep between runs rather than spin). Prints per model and
thread count the median latency of each, the ratio (onnxplex / onnxruntime, below 1 is
faster), and the largest output difference in units of the output's scale (its largest
magnitude / 255: for an 8-bit output one quantization step, the two engines rounding a
requantization differently) and, for scale, how far onnxruntime's own output moves between
its unoptimized graph (``ORT_DISABLE_ALL``: the QDQ graph computed in float) and its optimized
one. With OpenVINO installed (``pip install '.[openvino]'``) it runs third in the rotation
(benchmarks/peers.py's configuration: f32 hint, latency, the same threads; its int8 path is its
own choice), with its time, onnxplex's ratio to it and its output's distance from
onnxruntime's in the same units.

The quantizer and onnxruntime are benchmark dependencies only; the library never imports them.
"""

from __future__ import annotations

import functools
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
from benchmarks.build_models import (  # noqa: E402
    quantize_dynamic_int8,
    quantize_int4,
    quantize_qdq,
)

CNNS = ("resnet18", "mobilenet_v3_small", "mobilenet_v2", "resnet50", "efficientnet_b0")
TRANSFORMERS = ("bert", "distilbert", "gpt2", "llama", "clip")
MODELS = CNNS + TRANSFORMERS
# name -> (how a float model becomes the variant, the models it is made of)
FORMATS = {
    "qdq": (quantize_qdq, CNNS),
    "qdq_pt": (functools.partial(quantize_qdq, per_channel=False), CNNS),
    "qop": (functools.partial(quantize_qdq, operator=True), CNNS),
    "dyn": (quantize_dynamic_int8, TRANSFORMERS),
    "int4": (quantize_int4, TRANSFORMERS),
}


def bench(path: Path, threads: int, runs: int, providers: str = "",
          feeds: dict | None = None) -> dict[str, float]:
    import onnxruntime as ort

    from onnxplex.tools.perf import _ort_session

    ours = plex_session(path, threads, providers)
    # as every benchmark here creates it: its workers sleep between runs instead of spinning
    # on the cores the onnxplex run that follows needs
    theirs = _ort_session(ort, str(path), "ORT_ENABLE_ALL", threads, 0)
    if feeds is None:   # (a CNN: one image input)
        inp = ours.get_inputs()[0]
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        feeds = {inp.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    oo0 = ort.SessionOptions()
    oo0.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(str(path), oo0, providers=["CPUExecutionProvider"])
    a, b = ours.run(None, feeds)[0], theirs.run(None, feeds)[0]
    b0 = plain.run(None, feeds)[0]
    step = float(np.abs(b).max()) / 255 or 1.0
    runners = [lambda f: ours.run(None, f), lambda f: theirs.run(None, f)]
    ov, why = openvino_runner(path, threads, [o.name for o in theirs.get_outputs()])
    ov_steps = None
    if ov is not None:
        ov_steps = float(np.abs(np.asarray(ov(feeds)[0], np.float64) - b).max()) / step
        runners.append(ov)
    ms = alternate(runners, feeds, runs)
    return {"ours_ms": ms[0], "theirs_ms": ms[1], "ov_ms": ms[2] if ov is not None else None,
            "ov_why": why, "ov_steps": ov_steps,
            "steps": float(np.abs(a.astype(np.float64) - b).max()) / step,
            "ort_steps": float(np.abs(b0.astype(np.float64) - b).max()) / step}


def main(argv: list[str] | None = None) -> int:
    args, src, out, names, threads = arguments(
        __doc__, "quantized", argv, MODELS,
        formats=(tuple(FORMATS), "qdq"))
    formats = args.formats
    ratios: dict[tuple[int, str], list[float]] = {}
    print(f"{'model':<22} {'threads':>7} {'onnxplex ms':>12} {'onnxruntime ms':>15} "
          f"{'ratio':>6} {'max diff (steps)':>17} {'ort own (steps)':>16} "
          f"{'openvino ms':>12} {'plex/ov':>8} {'ov diff (steps)':>16}")
    for name, f in model_files(src, names, 22):
        for fmt in formats:
            make, models = FORMATS[fmt]
            if name not in models:
                continue
            q = cached(make, f, out / f"{name}_{fmt}.onnx")
            label = name if fmt == "qdq" else f"{name} ({fmt})"
            inputs = src / f"{name}.inputs.npz"   # (the zoo's inputs: token ids for a text model)
            feeds = None
            if inputs.exists() and name in TRANSFORMERS:
                with np.load(inputs) as z:
                    feeds = {k: z[k] for k in z.files}
            for t in threads:
                r = bench(q, t, args.runs, args.providers, feeds)
                ratio = r["ours_ms"] / r["theirs_ms"]
                ratios.setdefault((t, fmt), []).append(ratio)
                ov = openvino_cells(r, ratios, t, fmt, "ov_steps", ">16.2f")
                print(f"{label:<22} {t:>7} {r['ours_ms']:>12.2f} {r['theirs_ms']:>15.2f} "
                      f"{ratio:>6.2f} {r['steps']:>17.2f} {r['ort_steps']:>16.2f} {ov}",
                      flush=True)
    print_geomeans(ratios)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
