"""Float32 GEMM throughput: cpu_mlas's native GEMM, numpy's BLAS and onnxruntime's MatMul.

    python benchmarks/gemm.py [--threads 1] [--runs 15]

Each shape is a product with a constant weight as the models have it: ``x [M, K] @ W [K, N]``
(BERT-base and GPT-2 projections, the 1024-wide MLP at batch 32, a ResNet 1x1 conv seen as
``W [Cout, Cin] @ x [Cin, H*W]``). The three engines run in this process, alternating, on the
same inputs; prints GFLOP/s from the median run and the ratio of the native GEMM's median to
onnxruntime's (below 1: faster).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxplex.providers.cpu_mlas import _blas

# (label, M, K, N, weight on the left)
SHAPES = [
    ("bert qkv/out 128x768x768", 128, 768, 768, False),
    ("bert ffn1 128x768x3072", 128, 768, 3072, False),
    ("bert ffn2 128x3072x768", 128, 3072, 768, False),
    ("gpt2 qkv 64x768x2304", 64, 768, 2304, False),
    ("gpt2 fc2 64x3072x768", 64, 3072, 768, False),
    ("gpt2 lm head 1x768x50257", 1, 768, 50257, False),   # a GEMV streaming 154 MB
    ("mlp 32x1024x1024", 32, 1024, 1024, False),
    ("square 1024", 1024, 1024, 1024, False),
    ("resnet 1x1 256x64x3136", 256, 64, 3136, True),
    ("resnet 1x1 64x256x3136", 64, 256, 3136, True),
]


def _ort_session(w: np.ndarray, m: int, left: bool, threads: int):
    import onnxruntime as ort

    if left:  # y = W @ x
        mm = helper.make_node("MatMul", ["w", "x"], ["y"])
        x_shape, y_shape = [w.shape[1], m], [w.shape[0], m]
    else:
        mm = helper.make_node("MatMul", ["x", "w"], ["y"])
        k, n = w.shape
        x_shape, y_shape = [m, k], [m, n]
    g = helper.make_graph([mm], "gemm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _engines(m: int, k: int, n: int, left: bool, threads: int, rng) -> dict | None:
    """The three ways to compute one shape, as callables on the same inputs."""
    if left:  # W [m, k] @ x [k, n]
        w = rng.standard_normal((m, k)).astype(np.float32)
        x = rng.standard_normal((k, n)).astype(np.float32)
        sess = _ort_session(w, n, True, threads)
        pw = _blas.pack_weight(w, left=True)
        numpy_fn = lambda: _blas.matmul(w, x)  # noqa: E731
    else:  # x [m, k] @ W [k, n]
        w = rng.standard_normal((k, n)).astype(np.float32)
        x = rng.standard_normal((m, k)).astype(np.float32)
        sess = _ort_session(w, m, False, threads)
        pw = _blas.pack_weight(w)
        numpy_fn = lambda: _blas.matmul(x, w)  # noqa: E731
    if pw is None:
        return None
    return {"native": lambda: _blas.gemm(x, pw), "numpy": numpy_fn,
            "ort": lambda: sess.run(None, {"x": x})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=15)
    a = p.parse_args(argv)
    _blas.configure_threads(a.threads)
    rng = np.random.default_rng(0)
    print(f"{'shape':28s} {'native':>8s} {'numpy':>8s} {'ort':>8s}  GFLOP/s   native/ort")
    for label, m, k, n, left in SHAPES:
        fns = _engines(m, k, n, left, a.threads, rng)
        if fns is None:
            print("the native GEMM is not available on this CPU/build", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {name: [] for name in fns}
        for fn in fns.values():
            fn()
        for _ in range(a.runs):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {name: float(np.median(t)) for name, t in times.items()}
        gf = {name: 2.0 * m * k * n / t / 1e9 for name, t in med.items()}
        print(f"{label:28s} {gf['native']:8.0f} {gf['numpy']:8.0f} {gf['ort']:8.0f}"
              f"            {med['native'] / med['ort']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
