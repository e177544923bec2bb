"""Run the model zoo on onnxplex and onnxruntime: outputs compared, latency ratios measured.

    python -m benchmarks.zoo.run --models DIR [--only resnet18,gru_bi] [--threads 1,2]
                                 [--runs 10] [--warmups 3] [--creations 3]
                                 [--providers xnnpack_like,cpu_mlas] [--out PREFIX]
    python benchmarks/zoo/run.py ...                       (same thing)

``DIR`` holds what ``benchmarks/zoo/build.py`` wrote: every ``<name>.onnx`` with a
``<name>.inputs.npz`` beside it is run. For each model and each thread count, one process (a
child per model, so a crash or a hang past ``--timeout`` costs one row only) creates an
onnxruntime session (``CPUExecutionProvider``) and an onnxplex session per provider
configuration, all with the same ``intra_op_num_threads``, and:

* checks every output of onnxplex against onnxruntime's (float: ``rtol=1e-3, atol=1e-4`` and
  the largest difference within 1e-3 of the output's largest magnitude, since random-weight
  CNNs can give outputs far below atol; other dtypes exactly; shapes must agree) and keeps
  the largest absolute difference;
* times ``--warmups`` runs of each, then ``--runs`` runs alternating the engines, and keeps the
  median latency of each (a model whose runs are slow gets fewer, at least 3, to fit
  ``--budget`` seconds per engine);
* at the first thread count, times session creation: the median of ``--creations`` creations
  per engine, alternating.

``--providers`` names one onnxplex configuration (comma-separated providers, e.g.
``xnnpack_like,cpu_mlas``); repeat it for several, each gets its own columns. The default is
``CPUExecutionProvider``, as for onnxruntime. If ``openvino`` imports, it is timed too (fp32,
latency hint, same thread count) and the table gains onnxplex/openvino; if not, that column is
left out.

Writes ``PREFIX.md`` (the table: ratio onnxplex/onnxruntime per model, below 1 is faster, the
geometric mean over the models that ran on both engines; and a machine line) and
``PREFIX.json`` (everything measured). Only ratios taken in one process mean anything on a
shared machine, never the absolute milliseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks.zoo` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.zoo import models  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
DEFAULT_CONFIG = "CPUExecutionProvider"


# --------------------------------------------------------------------------------------------
# engines
# --------------------------------------------------------------------------------------------

def _ort_session(path: str, threads: int):
    """onnxruntime as every benchmark here creates it (``onnxplex._perf._ort_session``):
    its workers must not spin between runs, or they take the cores from the onnxplex run that
    follows in the alternation."""
    import onnxruntime as ort

    from onnxplex._perf import _ort_session as ort_session

    ort.set_default_logger_severity(3)
    return ort_session(ort, path, "ORT_ENABLE_ALL", threads, 1)


def _plex_session(path: str, threads: int, config: str):
    import onnxplex

    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    return onnxplex.InferenceSession(path, so, providers=config.split(","))


class _OpenVino:
    def __init__(self, path: str, threads: int):
        import openvino as ov

        core = ov.Core()
        self.compiled = core.compile_model(path, "CPU", {
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
            "INFERENCE_PRECISION_HINT": "f32"})
        self.request = self.compiled.create_infer_request()

    def run(self, _names, feeds):
        res = self.request.infer(feeds)
        return [res[o] for o in self.compiled.outputs]


def _has_openvino() -> bool:
    try:
        import openvino  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure: no openvino column
        return False
    return True


def compare(ref: list, got: list, names: list[str]) -> tuple[bool, float, str]:
    """(all match, largest abs difference over float outputs, first problem)."""
    if len(ref) != len(got):
        return False, math.inf, f"{len(got)} outputs, onnxruntime has {len(ref)}"
    worst = 0.0
    problem = ""
    for name, r, g in zip(names, ref, got):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape:
            return False, math.inf, f"{name}: shape {g.shape} vs onnxruntime {r.shape}"
        if r.dtype != g.dtype:
            problem = problem or f"{name}: dtype {g.dtype} vs onnxruntime {r.dtype}"
        if r.size == 0:
            continue
        if np.issubdtype(r.dtype, np.floating):
            rf, gf = r.astype(np.float64), g.astype(np.float64)
            finite = np.isfinite(rf) & np.isfinite(gf)
            same_nonfinite = np.array_equal(np.isnan(rf), np.isnan(gf)) and np.array_equal(
                rf[~finite & ~np.isnan(rf)], gf[~finite & ~np.isnan(gf)])
            diff = float(np.max(np.abs(rf[finite] - gf[finite]))) if finite.any() else 0.0
            worst = max(worst, diff)
            if not same_nonfinite:
                problem = problem or f"{name}: NaN/inf positions differ"
            elif not np.allclose(gf[finite], rf[finite], rtol=RTOL, atol=ATOL):
                bad = ~np.isclose(gf, rf, rtol=RTOL, atol=ATOL) & finite
                problem = problem or (f"{name}: {int(bad.sum())}/{r.size} elements off, "
                                      f"max abs diff {diff:.3g}")
            elif finite.any() and diff > RTOL * float(np.max(np.abs(rf[finite]))):
                # outputs far below atol (random-weight CNNs give 1e-9..1e-14) pass any
                # allclose: their differences must also be small against their own scale
                scale = float(np.max(np.abs(rf[finite])))
                problem = problem or (f"{name}: max abs diff {diff:.3g} is more than {RTOL} of "
                                      f"the output's scale {scale:.3g}")
        elif not np.array_equal(r, g):
            n_bad = int(np.sum(r != g))
            problem = problem or f"{name}: {n_bad}/{r.size} elements differ"
    return not problem, worst, problem


def _time_alternating(runners: dict, feeds: dict, warmups: int, runs: int,
                      budget: float) -> dict[str, float]:
    """Median seconds per runner; runners run in turn, round-robin."""
    first: dict[str, float] = {}
    for key, (fn, names) in runners.items():
        t0 = time.perf_counter()
        fn(names, feeds[key])
        first[key] = time.perf_counter() - t0
    slowest = max(first.values())
    n_warm = min(warmups, max(0, int(budget / 4 / max(slowest, 1e-9))))
    n_runs = max(3, min(runs, int(budget / max(slowest, 1e-9))))
    for _ in range(n_warm):
        for key, (fn, names) in runners.items():
            fn(names, feeds[key])
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(n_runs):
        for key, (fn, names) in runners.items():
            t0 = time.perf_counter()
            fn(names, feeds[key])
            times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()} | {"_runs": n_runs}


def _creation_times(path: str, threads: int, configs: list[str], creations: int,
                    openvino: bool) -> dict[str, float]:
    makers = {"onnxruntime": lambda: _ort_session(path, threads)}
    for c in configs:
        makers[f"onnxplex[{c}]"] = (lambda c=c: _plex_session(path, threads, c))
    if openvino:
        makers["openvino"] = lambda: _OpenVino(path, threads)
    times: dict[str, list[float]] = {k: [] for k in makers}
    for _ in range(creations):
        for key, make in makers.items():
            t0 = time.perf_counter()
            try:
                sess = make()
            except Exception:  # noqa: BLE001 - recorded as a missing creation time
                continue
            times[key].append(time.perf_counter() - t0)
            del sess
    return {k: statistics.median(v) for k, v in times.items() if v}


def run_model(path: Path, threads_list: list[int], configs: list[str], runs: int, warmups: int,
              creations: int, budget: float) -> dict:
    """Everything measured for one model (runs in the calling process)."""
    name = path.name[: -len(".onnx")]
    npz = np.load(path.with_name(f"{name}.inputs.npz"))
    data = {k: npz[k] for k in npz.files}
    row: dict = {"name": name, "bytes": path.stat().st_size, "threads": {}, "errors": {}}
    meta_path = path.with_name(f"{name}.meta.json")
    if meta_path.exists():
        row["meta"] = json.loads(meta_path.read_text())
    openvino = _has_openvino()
    for ti, threads in enumerate(threads_list):
        res: dict = {"match": {}, "max_abs_diff": {}, "problem": {}, "median_s": {}}
        row["threads"][str(threads)] = res
        try:
            ort_sess = _ort_session(str(path), threads)
        except Exception as exc:  # noqa: BLE001 - the row says why
            row["errors"]["onnxruntime"] = f"{type(exc).__name__}: {exc}"[:500]
            return row
        in_names = [i.name for i in ort_sess.get_inputs()]
        out_names = [o.name for o in ort_sess.get_outputs()]
        missing = [n for n in in_names if n not in data]
        if missing:
            row["errors"]["inputs"] = f"no example data for inputs {missing}"
            return row
        feed = {n: data[n] for n in in_names}
        ref = ort_sess.run(None, feed)
        # the outputs' scale: random weights can leave outputs all zero (ViT's zero-initialised
        # head) or tiny (deep CNNs), where atol alone proves little; the table shows it
        res["ref_max_abs"] = max((float(np.max(np.abs(r))) for r in ref if np.asarray(r).size
                                  and np.issubdtype(np.asarray(r).dtype, np.floating)),
                                 default=0.0)
        res["ref_sizes"] = [int(np.asarray(r).size) for r in ref]
        runners = {"onnxruntime": (ort_sess.run, None)}
        feeds = {"onnxruntime": feed}
        for config in configs:
            key = f"onnxplex[{config}]"
            try:
                sess = _plex_session(str(path), threads, config)
                plex_in = [i.name for i in sess.get_inputs()]
                pfeed = {n: data[n] for n in plex_in}
                got = sess.run(None, pfeed)
            except Exception as exc:  # noqa: BLE001 - the row says why
                row["errors"][key] = f"{type(exc).__name__}: {exc}"[:500]
                res["match"][key] = False
                continue
            ok, diff, problem = compare(ref, got, out_names)
            res["match"][key], res["max_abs_diff"][key] = ok, diff
            if problem:
                res["problem"][key] = problem
            runners[key] = (sess.run, None)
            feeds[key] = pfeed
        if openvino:
            try:
                ov = _OpenVino(str(path), threads)
                ok, diff, problem = compare(ref, ov.run(None, feed), out_names)
                res["match"]["openvino"], res["max_abs_diff"]["openvino"] = ok, diff
                runners["openvino"] = (ov.run, None)
                feeds["openvino"] = feed
            except Exception as exc:  # noqa: BLE001 - the row says why
                row["errors"]["openvino"] = f"{type(exc).__name__}: {exc}"[:500]
        try:
            medians = _time_alternating(runners, feeds, warmups, runs, budget)
        except Exception as exc:  # noqa: BLE001 - the row says why
            row["errors"]["timing"] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        res["runs"] = medians.pop("_runs")
        res["median_s"] = medians
        del runners, feeds, ort_sess
        if ti == 0 and creations > 0:
            row["creation_s"] = _creation_times(str(path), threads, configs, creations,
                                                "openvino" in res["median_s"])
            row["creation_threads"] = threads
    return row


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def machine_line() -> str:
    from benchmarks.run import machine_line as line  # (the other benchmarks' line)

    return line()


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def report(rows: list[dict], threads_list: list[int], configs: list[str], args) -> str:
    keys = [f"onnxplex[{c}]" for c in configs]
    short = {k: ("" if len(configs) == 1 else f" {c}") for k, c in zip(keys, configs)}
    has_ov = any("openvino" in r.get("threads", {}).get(str(t), {}).get("median_s", {})
                 for r in rows for t in threads_list)
    head = ["model", "MB", "match (max abs diff of max abs output)"]
    for t in threads_list:
        head.append(f"ort ms @{t}")
        for k in keys:
            head.append(f"plex/ort{short[k]} @{t}")
            if has_ov:
                head.append(f"plex/ov{short[k]} @{t}")
    for k in keys:
        head.append(f"create plex/ort{short[k]}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict[str, list[float]] = {h: [] for h in head}
    notes: list[str] = []
    for r in rows:
        cells = [r["name"], f"{r.get('bytes', 0) / 1e6:.1f}"]
        first = r.get("threads", {}).get(str(threads_list[0]), {})
        matches = []
        for k in keys:
            if k in r.get("errors", {}):
                matches.append("error")
            elif k in first.get("match", {}):
                ok = first["match"][k]
                d = first["max_abs_diff"].get(k, math.nan)
                matches.append(("yes" if ok else "NO") + f" ({d:.1e} of "
                               f"{first.get('ref_max_abs', math.nan):.1e})")
            else:
                matches.append("-")
        if r.get("errors", {}).get("onnxruntime"):
            matches = ["ort error"]
        if r.get("errors", {}).get("child"):
            matches = ["run failed"]
        cells.append("; ".join(matches))
        for t in threads_list:
            res = r.get("threads", {}).get(str(t), {})
            med = res.get("median_s", {})
            ort_s = med.get("onnxruntime")
            cells.append(_fmt(ort_s * 1e3 if ort_s else None, ".2f"))
            for k in keys:
                h = f"plex/ort{short[k]} @{t}"
                ratio = med[k] / ort_s if (k in med and ort_s) else None
                if ratio:
                    ratios[h].append(ratio)
                cells.append(_fmt(ratio))
                if has_ov:
                    h = f"plex/ov{short[k]} @{t}"
                    ov_s = med.get("openvino")
                    ratio = med[k] / ov_s if (k in med and ov_s) else None
                    if ratio:
                        ratios[h].append(ratio)
                    cells.append(_fmt(ratio))
        cre = r.get("creation_s", {})
        for k in keys:
            h = f"create plex/ort{short[k]}"
            ratio = cre[k] / cre["onnxruntime"] if (k in cre and cre.get("onnxruntime")) else None
            if ratio:
                ratios[h].append(ratio)
            cells.append(_fmt(ratio))
        lines.append("| " + " | ".join(cells) + " |")
        for what, err in r.get("errors", {}).items():
            notes.append(f"- {r['name']}: {what}: {err.splitlines()[0] if err else ''}")
        for t in threads_list:
            for k, problem in r.get("threads", {}).get(str(t), {}).get("problem", {}).items():
                if t == threads_list[0]:
                    notes.append(f"- {r['name']}: {k} mismatch: {problem}")
    gm = ["**geomean**", "", ""]
    for h in head[3:]:
        gm.append(_fmt(_geomean(ratios[h])) if h in ratios and not h.startswith("ort ms")
                  else "")
    lines.append("| " + " | ".join(gm) + " |")
    n_ok = sum(1 for r in rows if all(
        r.get("threads", {}).get(str(threads_list[0]), {}).get("match", {}).get(k) for k in keys))
    out = [
        f"Model zoo: onnxplex / onnxruntime (CPUExecutionProvider), median latency of "
        f"{args.runs} alternating runs after {args.warmups} warmups; threads "
        f"{','.join(map(str, threads_list))}; creation: median of {args.creations}. Below 1 is "
        f"faster. Outputs match onnxruntime (rtol {RTOL}, atol {ATOL}, and the largest "
        f"difference within {RTOL} of the output's largest value) on {n_ok} of "
        f"{len(rows)} models. onnxplex providers: {' | '.join(configs)}.",
        "", *lines, "", f"Machine: {machine_line()}"]
    if notes:
        out += ["", "Problems:", "", *notes]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def _child_main(args) -> int:
    threads = [int(t) for t in args.threads.split(",")]
    try:
        row = run_model(Path(args._child), threads, args.providers, args.runs, args.warmups,
                        args.creations, args.budget)
    except Exception:  # noqa: BLE001 - reported to the parent in the row
        row = {"name": Path(args._child).stem, "errors": {"child": traceback.format_exc()}}
    Path(args._result).write_text(json.dumps(row, default=float))
    return 0


def _model_paths(models_dir: Path, only: list[str]) -> list[Path]:
    found = {p.name[: -len(".inputs.npz")] for p in models_dir.glob("*.inputs.npz")}
    found = {n for n in found if (models_dir / f"{n}.onnx").exists()}
    if only:
        missing = [n for n in only if n not in found]
        if missing:
            print(f"not built in {models_dir}: {', '.join(missing)}", file=sys.stderr)
        found &= set(only)
    order = {n: i for i, n in enumerate(models.names())}
    return [models_dir / f"{n}.onnx"
            for n in sorted(found, key=lambda n: (order.get(n, len(order)), n))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=Path, default=None, help="directory written by build.py")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmups", type=int, default=3)
    ap.add_argument("--creations", type=int, default=3)
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds of timed runs per engine and thread count, at most")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    ap.add_argument("--providers", action="append", default=None,
                    help="one onnxplex configuration, comma-separated; repeat for several")
    ap.add_argument("--out", default="zoo_results", help="writes PREFIX.md and PREFIX.json")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_result", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.providers = args.providers or [DEFAULT_CONFIG]
    if args._child:
        return _child_main(args)
    if args.models is None:
        ap.error("--models is required")
    threads = [int(t) for t in args.threads.split(",")]
    paths = _model_paths(args.models, [n for n in args.only.split(",") if n])
    if not paths:
        ap.error(f"no built models in {args.models}")
    rows = []
    root = Path(__file__).resolve().parents[2]
    for path in paths:
        name = path.name[: -len(".onnx")]
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp, "row.json")
            cmd = [sys.executable, "-m", "benchmarks.zoo.run", "--_child", str(path),
                   "--_result", str(result), "--threads", args.threads, "--runs",
                   str(args.runs), "--warmups", str(args.warmups), "--creations",
                   str(args.creations), "--budget", str(args.budget)]
            for config in args.providers:
                cmd += ["--providers", config]
            try:
                proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                                      timeout=args.timeout)
                if result.exists():
                    row = json.loads(result.read_text())
                else:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                    row = {"name": name, "errors": {
                        "child": f"exit {proc.returncode}: " + " | ".join(tail)}}
            except subprocess.TimeoutExpired:
                row = {"name": name, "errors": {"child": f"timed out after {args.timeout} s"}}
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        summary = []
        for t in threads:
            med = row.get("threads", {}).get(str(t), {}).get("median_s", {})
            for config in args.providers:
                k = f"onnxplex[{config}]"
                if k in med and med.get("onnxruntime"):
                    summary.append(f"@{t} {med[k] / med['onnxruntime']:.2f}")
        first = row.get("threads", {}).get(str(threads[0]), {})
        match = ",".join("ok" if v else "MISMATCH" for v in first.get("match", {}).values())
        errs = "; ".join(f"{k}: {v.splitlines()[0][:120]}" for k, v in
                         row.get("errors", {}).items() if v)
        print(f"{name:40s} {row['wall_s']:6.1f} s  {match or '-':10s} "
              f"{' '.join(summary)}  {errs}", flush=True)
    md = report(rows, threads, args.providers, args)
    Path(f"{args.out}.md").write_text(md)
    Path(f"{args.out}.json").write_text(json.dumps(
        {"machine": machine_line(), "threads": threads, "runs": args.runs,
         "providers": args.providers, "rows": rows}, indent=1, default=float) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
