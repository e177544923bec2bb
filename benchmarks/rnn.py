"""Recurrent ops beside onnxruntime: LSTM, GRU and RNN nodes, timed in one process.

    python benchmarks/rnn.py [--seq 50] [--batch 1] [--input 64] [--hidden 128] [--runs 30]

Each model is one ONNX LSTM / GRU / RNN node (bidirectional, random weights as initializers,
the default activations), as the TorchScript exporter writes a torch.nn.LSTM/GRU. Both
engines run it alternately with 1 intra-op thread; prints the median latencies and their
ratio (onnxplex / onnxruntime). ``--numpy`` also times onnxplex with its numpy time loop
(the native loop of ``_mlas_native.rnn_seq_f32`` switched off), to show what the native loop
is worth.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxplex

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def model(op: str, seq: int, batch: int, inp: int, hidden: int) -> bytes:
    rng = np.random.default_rng(0)
    g = GATES[op]
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n)
             for n, s in (("W", (2, g * hidden, inp)), ("R", (2, g * hidden, hidden)),
                          ("B", (2, 2 * g * hidden)))]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W", "R", "B"], outs, hidden_size=hidden,
                            direction="bidirectional")
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info("X", f, [seq, batch, inp])],
        [helper.make_tensor_value_info(o, f, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                             ir_version=8).SerializeToString()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq", type=int, default=50)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--input", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--numpy", action="store_true", help="also time the numpy time loop")
    a = p.parse_args(argv)
    import onnxruntime as ort

    from onnxplex.providers.cpu_mlas import rnn
    from onnxplex.tools.perf import _ort_session

    x = np.random.default_rng(1).standard_normal((a.seq, a.batch, a.input)).astype(np.float32)
    for op in GATES:
        m = model(op, a.seq, a.batch, a.input, a.hidden)
        so = onnxplex.SessionOptions()
        so.intra_op_num_threads = 1
        runs = {"onnxplex": onnxplex.InferenceSession(m, so).run}
        if a.numpy:
            saved = rnn.native
            rnn.native = lambda: None   # (read when the kernel is built)
            try:
                runs["onnxplex numpy loop"] = onnxplex.InferenceSession(m, so).run
            finally:
                rnn.native = saved
        runs["onnxruntime"] = _ort_session(ort, m, "ORT_ENABLE_ALL", 1, 0).run
        outs = {k: r(None, {"X": x}) for k, r in runs.items()}
        diff = max(float(np.abs(o - w).max()) for o, w in zip(outs["onnxplex"],
                                                              outs["onnxruntime"]))
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(a.runs):
            for k, r in runs.items():
                t0 = time.perf_counter()
                r(None, {"X": x})
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        cells = "  ".join(f"{k} {v:.3f} ms" for k, v in med.items())
        ratios = "  ".join(f"{k}/onnxruntime {v / med['onnxruntime']:.2f}"
                           for k, v in med.items() if k != "onnxruntime")
        print(f"{op:5s} {cells}  |  {ratios}  |  max abs diff {diff:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
