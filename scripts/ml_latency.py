"""Latency of a few scikit-learn models converted to ai.onnx.ml ops, onnxplex beside
onnxruntime (needs scikit-learn, skl2onnx and onnxruntime).

    python scripts/ml_latency.py [--runs 200] [--threads 1] [--zipmap]

Models: an SVC (RBF kernel, ~500 support vectors, 4 classes, probabilities), a multinomial
LogisticRegression and a StandardScaler, on 20 features. Both engines run in this process,
alternating call by call; prints the median time per call at batch 1 and batch 1000 and the
ratio onnxplex / onnxruntime. ``--zipmap`` keeps the converters' default ZipMap output
(a list of dicts) instead of the probability tensor.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def models(zipmap: bool) -> dict[str, tuple[bytes, np.ndarray]]:
    import skl2onnx
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    x, y = make_classification(1400, 20, n_informative=6, n_classes=4, flip_y=0.15,
                               random_state=0)
    x = x.astype(np.float32)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svc = SVC(probability=True, random_state=0).fit(x[:550], y[:550])
        lr = LogisticRegression(max_iter=1000).fit(x, y)
        sc = StandardScaler().fit(x)
    for name, mdl in ((f"SVC rbf ({svc.support_vectors_.shape[0]} SV, 4 classes)", svc),
                      ("LogisticRegression (4 classes)", lr), ("StandardScaler", sc)):
        opts = None if zipmap or name == "StandardScaler" else {id(mdl): {"zipmap": False}}
        m = skl2onnx.to_onnx(mdl, x[:1], options=opts, target_opset={"": 17, "ai.onnx.ml": 3})
        out[name] = (m.SerializeToString(), x)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--zipmap", action="store_true")
    a = p.parse_args(argv)

    import onnxruntime as ort

    import onnxplex

    for name, (blob, x) in models(a.zipmap).items():
        so = onnxplex.SessionOptions()
        so.intra_op_num_threads = a.threads
        oso = ort.SessionOptions()
        oso.intra_op_num_threads = a.threads
        runs = {"onnxplex": onnxplex.InferenceSession(blob, so),
                "onnxruntime": ort.InferenceSession(blob, oso,
                                                    providers=["CPUExecutionProvider"])}
        in_name = runs["onnxruntime"].get_inputs()[0].name
        line = [f"{name:42s}"]
        for batch in (1, 1000):
            feeds = {in_name: np.ascontiguousarray(x[:batch])}
            n = a.runs if batch == 1 else max(20, a.runs // 10)
            times: dict[str, list[float]] = {k: [] for k in runs}
            for i in range(n + 5):
                for k, s in runs.items():
                    t0 = time.perf_counter()
                    s.run(None, feeds)
                    if i >= 5:
                        times[k].append(time.perf_counter() - t0)
            med = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
            line.append(f"batch {batch}: {med['onnxplex']:8.1f} us vs {med['onnxruntime']:8.1f}"
                        f" us = {med['onnxplex'] / med['onnxruntime']:.2f}x")
        print("  ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
