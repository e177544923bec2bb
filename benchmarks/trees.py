"""Tree ensembles side by side: onnxplex's native evaluator (cpu_mlas) and onnxruntime.

    python benchmarks/trees.py [--threads 2] [--runs 300] [--only rf_regressor,lgbm_binary]

Models (synthetic data, 20 features, converted with skl2onnx / onnxmltools, classifiers
without ZipMap): a 100-tree depth-10 RandomForest regressor and binary classifier, a 200-tree
LightGBM regressor and binary classifier (31 leaves a tree), a 200-tree sklearn
GradientBoosting regressor. Per model and batch (1 and 1000), the two engines run alternately
in this process (onnxruntime's workers not spinning, as ``onnxplex perf`` sets it), outputs
compared first (labels exactly, scores rtol 1e-4 atol 1e-5); prints median latencies and their
ratio, onnxplex / onnxruntime (below 1 is faster). Only ratios mean anything on a shared
machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import numpy as np

N_FEATURES = 20


def _models(only: set[str] | None) -> dict[str, tuple[bytes, np.ndarray]]:
    import lightgbm
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import (
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )

    xr, yr = make_regression(5000, N_FEATURES, n_informative=12, noise=5.0, random_state=0)
    xc, yc = make_classification(5000, N_FEATURES, n_informative=12, random_state=0)
    xr, xc = xr.astype(np.float32), xc.astype(np.float32)
    types = [("input", FloatTensorType([None, N_FEATURES]))]

    def skl(make, x, y, clf):
        m = make().fit(x, y)
        return to_onnx(m, x[:1], options={id(m): {"zipmap": False}} if clf else None)

    builders = {
        "rf_regressor": lambda: (skl(lambda: RandomForestRegressor(
            100, max_depth=10, random_state=0, n_jobs=2), xr, yr, False), xr),
        "rf_binary": lambda: (skl(lambda: RandomForestClassifier(
            100, max_depth=10, random_state=0, n_jobs=2), xc, yc, True), xc),
        "lgbm_regressor": lambda: (onnxmltools.convert_lightgbm(lightgbm.LGBMRegressor(
            n_estimators=200, verbose=-1, random_state=0).fit(xr, yr), initial_types=types), xr),
        "lgbm_binary": lambda: (onnxmltools.convert_lightgbm(lightgbm.LGBMClassifier(
            n_estimators=200, verbose=-1, random_state=0).fit(xc, yc), initial_types=types,
            zipmap=False), xc),
        "gb_regressor": lambda: (skl(lambda: GradientBoostingRegressor(
            n_estimators=200, max_depth=3, random_state=0), xr, yr, False), xr),
    }
    out = {}
    for name, build in builders.items():
        if only and name not in only:
            continue
        model, x = build()
        out[name] = (model.SerializeToString(), x)
    return out


def _same(got, want) -> bool:
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return False
        if w.dtype.kind in "iuOU":
            if not np.array_equal(g, w):
                return False
        elif not np.allclose(g, w, rtol=1e-4, atol=1e-5):
            return False
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=300, help="runs per engine and batch")
    p.add_argument("--only", default="", help="comma-separated model names")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import onnxruntime as ort

    import onnxplex
    from onnxplex.tools.perf import _ort_session

    ort.set_default_logger_severity(3)
    models = _models(set(a.only.split(",")) if a.only else None)
    print(f"{'model':16} {'batch':>5} {'onnxplex ms':>12} {'onnxruntime ms':>15} {'ratio':>6}")
    for name, (model, x) in models.items():
        so = onnxplex.SessionOptions()
        so.intra_op_num_threads = a.threads
        ours = onnxplex.InferenceSession(model, so, providers=["cpu_mlas"])
        theirs = _ort_session(ort, model, "ORT_ENABLE_ALL", a.threads, 0)
        in_name = theirs.get_inputs()[0].name
        for batch in (1, 1000):
            feeds = {in_name: np.ascontiguousarray(x[:batch])}
            if not _same(ours.run(None, feeds), theirs.run(None, feeds)):
                print(f"{name}: outputs differ at batch {batch}", file=sys.stderr)
                return 1
            runs = a.runs if batch == 1 else max(20, a.runs // 10)
            times: dict[str, list[float]] = {"ours": [], "theirs": []}
            for _ in range(runs):
                for key, sess in (("ours", ours), ("theirs", theirs)):
                    t0 = time.perf_counter()
                    sess.run(None, feeds)
                    times[key].append(time.perf_counter() - t0)
            mo, mt = statistics.median(times["ours"]), statistics.median(times["theirs"])
            print(f"{name:16} {batch:5d} {mo * 1e3:12.4f} {mt * 1e3:15.4f} {mo / mt:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
