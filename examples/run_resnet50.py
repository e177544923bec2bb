"""The main job: run a real CNN (ResNet-50, shipped inside the onnx package) through onnxplex.

Prints where the nodes ran, the top-5 classes of a seeded random image, the time per run,
and, when onnxruntime is installed, the largest difference from its output.

    python examples/run_resnet50.py [--providers cpu_mlas] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnx.backend.test

import onnxplex


def light_model(name: str) -> str:
    folder = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light")
    return os.path.join(folder, f"light_{name}.onnx")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="light model name (resnet50, "
                        "vgg19, densenet121, inception_v1, ...) or a path to an .onnx file")
    parser.add_argument("--providers", default=None, help="comma-separated, priority order")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    path = args.model if os.path.exists(args.model) else light_model(args.model)
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
