"""Where a small batch's time goes: each step of a model's execution plan timed on its own.

    python benchmarks/step_costs.py MODEL [--batch 1] [--runs 400] [--top 0] [--feeds NPZ]

``MODEL`` is a name of ``benchmarks/classical_zoo.py`` (see ``--list``) or a path to an
``.onnx`` file whose inputs are all float tensors (random normal feeds, symbolic dimensions
set to ``--batch``), or whose feeds ``--feeds`` gives (an ``.npz`` of arrays by input name, as
the model zoo's builder writes beside each model: ``NAME.inputs.npz``). The session is
created with the default providers; then, ``--runs`` times, the plan's steps run in order,
each timed three times: its kernel called alone; the step as a plain run calls it (its
function in the compiled plan: argument gathering, the kernel, the output checks, releases);
and, as "loop", the step as the step-by-step loop of a profiled or cancellable run calls it
(``_executor._call``). Prints the median of each per
step, their sums, and the session's whole ``run`` beside them: the gap between the step sums
and the run is the session's per-run cost (feed checks, slots, outputs) and the cold caches
of a run that calls each kernel once. Absolute microseconds on a shared machine only compare
with each other inside one run of this script.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _feeds(name: str, batch: int, given: str | None = None):
    path = Path(name)
    if given is not None:
        with np.load(given) as npz:
            return path.read_bytes(), {k: npz[k] for k in npz.files}
    if path.suffix == ".onnx" and path.exists():
        import onnx
        model = onnx.load(path)
        rng = np.random.default_rng(0)
        init = {i.name for i in model.graph.initializer}
        feeds = {}
        for vi in model.graph.input:
            if vi.name in init:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else batch
                    for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
        return model.SerializeToString(), feeds
    import classical_zoo as zoo
    m = zoo.build(name)
    return m.bytes, m.feeds(min(batch, m.max_batch))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=400)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=0, help="only the N costliest steps")
    p.add_argument("--list", action="store_true", help="the zoo's model names")
    p.add_argument("--feeds", help="an .npz of the feeds by input name (else random floats)")
    a = p.parse_args(argv)
    if a.list or not a.model:
        import classical_zoo as zoo
        print("\n".join(zoo.model_names()))
        return 0

    import onnxplex
    from onnxplex.framework import executor as _executor

    blob, feeds = _feeds(a.model, a.batch, a.feeds)
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = a.threads
    sess = onnxplex.InferenceSession(blob, so)
    sess.run(None, feeds)
    plan = sess._exec
    calls = [_executor._step_function(st) for st in plan.steps]
    costs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    whole = []
    for _ in range(a.runs):
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        whole.append(time.perf_counter_ns() - t0)
        slots = _executor.feed_slots(plan, sess._validate_feeds(feeds))
        with np.errstate(all="ignore"):
            for k, st in enumerate(plan.steps):
                args = [None if s < 0 else slots[s] for s in st.inputs]
                t0 = time.perf_counter_ns()
                st.kernel(*args)
                t1 = time.perf_counter_ns()
                _executor._call(st, slots)   # (before the step function, which releases)
                t2 = time.perf_counter_ns()
                calls[k](slots)
                costs[k].append((t1 - t0, time.perf_counter_ns() - t2, t2 - t1))
    rows = []
    for k, st in enumerate(plan.steps):
        rows.append((*(statistics.median(c[j] for c in costs[k]) / 1e3 for j in range(3)), st))
    shown = sorted(rows, key=lambda r: -r[1])[:a.top] if a.top else rows
    print(f"{'kernel us':>10} {'step us':>9} {'loop us':>9}  op (provider) name")
    for kern, call, loop, st in shown:
        print(f"{kern:10.2f} {call:9.2f} {loop:9.2f}  {st.op_type} ({st.provider}) {st.name}")
    print(f"{sum(r[0] for r in rows):10.2f} {sum(r[1] for r in rows):9.2f} "
          f"{sum(r[2] for r in rows):9.2f}  sum over {len(rows)} steps; session.run median "
          f"{statistics.median(whole) / 1e3:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
