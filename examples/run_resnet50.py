"""The main job: run a real CNN (ResNet-50) through onnxplex.

With torch installed (``pip install '.[models]'``) the model is ResNet-50 exported by
``benchmarks/build_models.py`` (torchvision's layout, seeded random weights; built once into
``$ONNXPLEX_MODEL_CACHE`` or ``~/.cache/onnxplex/models``, ~20 s). Without torch it is the
"light" ResNet-50 the onnx package ships for its backend tests: the same graph, but its weights
are placeholders (constant), so its outputs are all equal.

Prints where the nodes ran, the top-5 classes of a seeded random image, the time per run,
and, when onnxruntime is installed, the largest difference from its output.

    python examples/run_resnet50.py [--model resnet50|mobilenetv2|PATH] [--providers cpu_mlas]
                                    [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx.backend.test

import onnxplex


def light_model(name: str) -> str:
    folder = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light")
    return os.path.join(folder, f"light_{name}.onnx")


def built_model(name: str) -> str | None:
    """``name`` exported with torch by benchmarks/build_models.py, or None without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, os.pardir, "benchmarks"))
    try:
        import build_models
    finally:
        sys.path.pop(0)
    if name not in build_models.BUILDERS:
        return None
    cache = os.environ.get("ONNXPLEX_MODEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "onnxplex", "models")
    if not os.path.exists(os.path.join(cache, f"{name}.onnx")):
        print(f"exporting {name} with torch into {cache} (once; 10-30 s)...", flush=True)
    path = build_models.build(name, cache)
    if name in build_models.BUILD_SECONDS:
        print(f"exported in {build_models.BUILD_SECONDS[name]:.1f} s: {path}")
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a model build_models.py builds "
                        "(resnet50, mobilenetv2, ...), else onnx's light model of that name "
                        "(vgg19, densenet121, ...), or a path to an .onnx file")
    parser.add_argument("--providers", default=None, help="comma-separated, priority order")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    path = args.model if os.path.exists(args.model) else \
        built_model(args.model) or light_model(args.model)
    providers = args.providers.split(",") if args.providers else None
    t0 = time.perf_counter()
    sess = onnxplex.InferenceSession(path, providers=providers)
    print(f"{os.path.basename(path)}: session created in {time.perf_counter() - t0:.2f} s "
          f"with providers {sess.get_providers()}")
    print("nodes per provider:", sess.get_provider_assignment().counts())

    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    times = []
    for _ in range(max(1, args.repeat)):
        t = time.perf_counter()
        (y,) = sess.run(None, {inp.name: x})
        times.append(time.perf_counter() - t)
    top5 = np.argsort(-y.reshape(-1))[:5]
    print(f"output {sess.get_outputs()[0].name} {list(y.shape)}; top-5 classes {top5.tolist()}")
    print(f"median run time over {len(times)} runs: {np.median(times) * 1e3:.1f} ms")

    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: no comparison")
        return
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None,
                                                                             {inp.name: x})[0]
    diff = float(np.max(np.abs(ref - y)))
    print(f"max |onnxplex - onnxruntime| = {diff:.3g} "
          f"({'match' if np.allclose(y, ref, rtol=1e-3, atol=1e-4) else 'MISMATCH'} "
          "at rtol 1e-3, atol 1e-4)")


if __name__ == "__main__":
    main()
