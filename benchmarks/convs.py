"""Single convolutions: onnxplex (cpu_mlas) against onnxruntime, and where a conv's time goes.

    python benchmarks/convs.py [--threads 1] [--runs 50]

Three tables, all engines in this process, alternating runs, medians:

* ``convs``: a one-node model (Conv + Clip, fused by both engines) per ResNet-50 / MobileNetV2
  shape, including depthwise ones, through an onnxplex and an onnxruntime session. Beware:
  onnxruntime converts to its NCHWc layout and back inside such a model, work it does once per
  network in a real CNN, so the ratios here flatter onnxplex on large planes.
* ``im2col``: the native conv against the same GEMM with the im2col matrix built beforehand and
  both operands prepacked: the difference is the cost of packing im2col panels on the fly.
* ``orientation``: convs on 7 x 7 planes computed both ways, ``W @ col`` (positions along the
  GEMM's 32-column panels) and ``out^T = col^T @ W^T`` (Cout along them), which onnxplex picks
  for planes of at most 100 positions.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas import _blas, nn
from onnxplex.providers.cpu_mlas._native import native

# (Cin, Cout, H = W, kernel, stride, group)
CONVS = [
    (3, 64, 224, 7, 2, 1), (64, 64, 56, 3, 1, 1), (256, 64, 56, 1, 1, 1),
    (128, 128, 28, 3, 1, 1), (1024, 256, 14, 1, 1, 1), (512, 512, 7, 3, 1, 1),
    (3, 32, 224, 3, 2, 1), (96, 24, 56, 1, 1, 1), (576, 96, 14, 1, 1, 1), (960, 160, 7, 1, 1, 1),
    (32, 32, 112, 3, 1, 32), (144, 144, 56, 3, 1, 144), (576, 576, 14, 3, 2, 576),
    (960, 960, 7, 3, 1, 960),
]
IM2COL = [(64, 56), (128, 28), (256, 14)]   # (channels in = out, H = W): 3x3, stride 1, pad 1
ORIENTATION = [(576, 160, 1), (960, 160, 1), (320, 1280, 1), (512, 512, 3)]   # at 7 x 7


def _conv_model(cin: int, cout: int, h: int, k: int, s: int, group: int, rng) -> bytes:
    w = rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * 0.1
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[k // 2] * 4,
                              strides=[s, s], group=group),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    g = helper.make_graph(nodes, "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, h, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=10).SerializeToString()


def _medians(fns: dict, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}


def _conv_row(cin, cout, h, k, s, group, threads, runs, rng) -> dict[str, float]:
    import onnxruntime as ort

    model = _conv_model(cin, cout, h, k, s, group, rng)
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    ours = onnxplex.InferenceSession(model, so, providers=["cpu_mlas"])
    so2 = ort.SessionOptions()
    so2.intra_op_num_threads = threads
    so2.add_session_config_entry("session.intra_op.allow_spinning", "0")
    theirs = ort.InferenceSession(model, so2, providers=["CPUExecutionProvider"])
    feed = {"x": rng.standard_normal((1, cin, h, h)).astype(np.float32)}
    return _medians({"plex": lambda: ours.run(None, feed),
                     "ort": lambda: theirs.run(None, feed)}, runs)


def convs(threads: int, runs: int, rng) -> None:
    print("convs: a one-node model per shape (us, GFLOP/s; ratio below 1: onnxplex faster)")
    print(f"{'Cin':>5} {'Cout':>5} {'HxW':>4} {'k':>2} {'s':>2} {'group':>5}"
          f"{'onnxplex':>10} {'ort':>9} {'ratio':>6} {'GF plex':>8} {'GF ort':>7}")
    for cin, cout, h, k, s, group in CONVS:
        med = _conv_row(cin, cout, h, k, s, group, threads, runs, rng)
        macs = cout * (cin // group) * k * k * (-(-h // s)) ** 2
        print(f"{cin:5} {cout:5} {h:4} {k:2} {s:2} {group:5}{med['plex'] * 1e6:10.0f}"
              f"{med['ort'] * 1e6:9.0f} {med['plex'] / med['ort']:6.2f}"
              f"{2 * macs / med['plex'] / 1e9:8.0f} {2 * macs / med['ort'] / 1e9:7.0f}")


def _im2col_row(c: int, h: int, threads: int, runs: int, rng) -> dict[str, float]:
    nat = native()
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    w = rng.standard_normal((c, c * 9)).astype(np.float32)
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    col = np.ascontiguousarray(np.stack([xp[:, i:i + h, j:j + h] for i in range(3)
                                         for j in range(3)], axis=1).reshape(c * 9, h * h))
    pa, pb = nat.sgemm_pack_a(w), nat.sgemm_pack_b(col)
    y, out = np.empty((1, c, h, h), np.float32), np.empty((c, h * h), np.float32)
    return _medians({
        "conv": lambda: nat.conv2d_f32(x, pa, y, (3, 3), (1, 1), (1, 1), (1, 1),
                                       threads=threads),
        "prepacked": lambda: nat.sgemm(pa, pb, out=out, threads=threads)}, runs)


def im2col(threads: int, runs: int, rng) -> None:
    print("\nim2col: the native 3x3 conv against its GEMM with both operands prepacked (us)")
    print(f"{'Cin=Cout':>8} {'HxW':>4} {'conv':>8} {'prepacked':>10} {'packing share':>14}")
    for c, h in IM2COL:
        med = _im2col_row(c, h, threads, runs, rng)
        print(f"{c:8} {h:4} {med['conv'] * 1e6:8.0f} {med['prepacked'] * 1e6:10.0f}"
              f" {1 - med['prepacked'] / med['conv']:13.0%}")


def _orientation_row(cin: int, cout: int, k: int, runs: int, rng) -> dict[str, float]:
    x = rng.standard_normal((1, cin, 7, 7)).astype(np.float32)
    cw = nn._ConvWeights(rng.standard_normal((cout, cin, k, k)).astype(np.float32), 1)
    b = rng.standard_normal(cout).astype(np.float32)

    def run(gw):
        return lambda: nn._conv_native(x, gw, (k, k), (1, 1), (1, 1), (k // 2, k // 2), (7, 7),
                                       b, None, None, None)
    return _medians({"direct": run(cw.gemm_weight), "transposed": run(cw.gemm_weight_t)}, runs)


def orientation(runs: int, rng) -> None:
    print("\norientation: convs on 7 x 7 planes both ways (GFLOP/s)")
    print(f"{'Cin':>5} {'Cout':>5} {'k':>2} {'W @ col':>8} {'col^T @ W^T':>12}")
    for cin, cout, k in ORIENTATION:
        med = _orientation_row(cin, cout, k, runs, rng)
        flop = 2 * cout * cin * k * k * 49
        print(f"{cin:5} {cout:5} {k:2} {flop / med['direct'] / 1e9:8.0f}"
              f" {flop / med['transposed'] / 1e9:12.0f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=50)
    a = p.parse_args(argv)
    if native() is None or not hasattr(native(), "conv2d_f32"):
        print("the native cpu_mlas module is not built", file=sys.stderr)
        return 1
    _blas.configure_threads(a.threads)
    rng = np.random.default_rng(0)
    convs(a.threads, a.runs, rng)
    im2col(a.threads, a.runs, rng)
    orientation(a.runs, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
