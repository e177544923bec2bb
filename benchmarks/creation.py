"""Session creation beside onnxruntime's, in a process of its own.

    python benchmarks/creation.py MODEL [--threads 2] [--creations 9] [--after-runs N]
                                  [--mmap-threshold BYTES] [--phases]

Creates a session of each engine in turn (each dropped at once, as ``benchmarks/run.py``
does) and prints the median of each and their ratio. ``run.py`` times creations after its
latency runs; ``--after-runs N`` does the same here (both sessions run N times first), and
``--mmap-threshold`` sets glibc's ``M_MMAP_THRESHOLD`` (and a trim threshold twice as large)
before anything is loaded, to show how much of a creation is first-touch page faults: large
blocks freed by earlier work raise glibc's threshold by themselves, and blocks below it are
then taken from memory that was already touched. ``--phases`` then creates as many sessions
with profiling on and prints the median of each step of onnxplex's creation (the ``Session``
events of its profile).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def _mallopt(threshold: int) -> None:
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # (malloc.h)
    if not (libc.mallopt(M_MMAP_THRESHOLD, threshold)
            and libc.mallopt(M_TRIM_THRESHOLD, 2 * threshold)):
        sys.exit("mallopt failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--creations", type=int, default=9, help="per engine, after one each")
    ap.add_argument("--after-runs", type=int, default=0)
    ap.add_argument("--mmap-threshold", type=int, default=0)
    ap.add_argument("--phases", action="store_true", help="onnxplex's creation step by step")
    args = ap.parse_args()
    if args.mmap_threshold:
        _mallopt(args.mmap_threshold)

    import onnxruntime as ort

    import onnxplex
    from onnxplex.framework.feeds import random_feeds
    from onnxplex.tools.perf import _ort_session

    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = args.threads

    def ours():
        return onnxplex.InferenceSession(args.model, so)

    def theirs():
        return _ort_session(ort, args.model, "ORT_ENABLE_ALL", args.threads, 0)

    first = ours(), theirs()   # imports and one-time initialization
    if args.after_runs:
        feeds = random_feeds(first[0], 0, 1)
        for _ in range(args.after_runs):
            first[0].run(None, feeds)
            first[1].run(None, feeds)
    del first
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(args.creations):
        for make, into in ((ours, times[0]), (theirs, times[1])):
            t0 = time.perf_counter()
            make()   # dropped at once: freeing it is timed too, as for any engine
            into.append(time.perf_counter() - t0)
    a, b = (statistics.median(t) * 1e3 for t in times)
    print(f"onnxplex {a:.1f} ms, onnxruntime {b:.1f} ms, ratio {a / b:.2f} "
          f"({args.threads} thread(s), median of {args.creations}, after {args.after_runs} runs"
          f"{f', M_MMAP_THRESHOLD {args.mmap_threshold}' if args.mmap_threshold else ''})")
    if args.phases:
        steps: dict[str, list[float]] = defaultdict(list)
        with tempfile.TemporaryDirectory() as tmp:
            profiled = onnxplex.SessionOptions()
            profiled.intra_op_num_threads = args.threads
            profiled.enable_profiling = True
            profiled.profile_file_prefix = str(Path(tmp) / "creation")
            for _ in range(args.creations):
                path = onnxplex.InferenceSession(args.model, profiled).end_profiling()
                for e in json.loads(Path(path).read_text()):
                    if e.get("cat") == "Session":
                        steps[e["name"]].append(e["dur"] / 1e3)
        for name, ms in steps.items():
            print(f"  {name:<24} {statistics.median(ms):8.2f} ms")


if __name__ == "__main__":
    main()
