"""Run the model zoo on onnxplex, onnxruntime and OpenVINO: outputs compared, ratios measured.

    python -m benchmarks.zoo.run --models DIR [--only resnet18,gru_bi] [--threads 1,2]
                                 [--runs 10] [--warmups 3] [--creations 3]
                                 [--providers xnnpack_like,cpu_mlas] [--out PREFIX]
    python benchmarks/zoo/run.py ...                       (same thing)

``DIR`` holds what ``benchmarks/zoo/build.py`` wrote: every ``<name>.onnx`` with a
``<name>.inputs.npz`` beside it is run. For each model and each thread count, one process (a
child per model, so a crash or a hang past ``--timeout`` costs one row only) creates an
onnxruntime session (``CPUExecutionProvider``), an onnxplex session per provider
configuration and, when the ``openvino`` package imports, an OpenVINO compiled model
(``benchmarks/peers.py``: the ONNX file compiled for CPU in fp32 with the latency hint), all
with the same number of threads, and:

* checks every output of onnxplex, and of OpenVINO, against onnxruntime's (float:
  ``rtol=1e-3, atol=1e-4`` and the largest difference within 1e-3 of the output's largest
  magnitude, since random-weight CNNs can give outputs far below atol; other dtypes exactly;
  shapes must agree) and keeps the largest absolute difference;
* times ``--warmups`` runs of each, then ``--runs`` runs alternating the engines, and keeps the
  median latency of each (a model whose runs are slow gets fewer, at least 3, to fit
  ``--budget`` seconds per engine);
* at the first thread count, times session creation: the median of ``--creations`` creations
  per engine, alternating (OpenVINO's is its ``compile_model``);
* measures each engine's peak memory at the first thread count, each in a fresh process of
  its own (the parent's: ``--_peak``): the process's peak resident size (Linux ``VmHWM``)
  after importing the engine, creating the session and running it once on the example
  inputs; ``--no-memory`` leaves it out.

``--providers`` names one onnxplex configuration (comma-separated providers, e.g.
``xnnpack_like,cpu_mlas``); repeat it for several, each gets its own columns. The default is
``CPUExecutionProvider``, as for onnxruntime. A provider may carry options,
``name:key=value[:key=value]`` (``kleidi_sme2:max_variant=neon,cpu_mlas``). A provider that is
unavailable here but runs with ``force_reference=1`` (kleidi_sme2 off Arm) gets that option
added, said once on stderr: the configuration runs the portable *reference* kernels, is
labelled ``kleidi_sme2:force_reference=1,cpu_mlas``, and is checked for correctness only -- its
speed means nothing, so it is not timed (its ratio cells say ``ref``).

Writes ``PREFIX.md`` (the table: per model and thread count, onnxruntime's milliseconds and the
ratios onnxplex/onnxruntime and onnxplex/OpenVINO, below 1 is faster; the creation ratios to
both; the geometric means over the models that ran on both engines of a ratio; a machine line)
and ``PREFIX.json`` (everything measured). OpenVINO is optional (``pip install
'.[openvino]'``): without it the runner says "OpenVINO not installed" once and its columns show
"-"; a model it cannot take (an input type it has no tensor for, a failed compile) shows
``openvino: <error class>: <first line>`` in its first onnxplex/OpenVINO cell. Only ratios
taken in one process mean anything on a shared machine, never the absolute milliseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import random
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

from benchmarks import peers  # noqa: E402
from benchmarks.zoo import models  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
DEFAULT_CONFIG = "CPUExecutionProvider"


# --------------------------------------------------------------------------------------------
# engines
# --------------------------------------------------------------------------------------------

def _ort_session(path: str, threads: int):
    """onnxruntime as every benchmark here creates it (``onnxplex.tools.perf._ort_session``):
    its workers must not spin between runs, or they take the cores from the onnxplex run that
    follows in the alternation."""
    import onnxruntime as ort

    from onnxplex.tools.perf import _ort_session as ort_session

    ort.set_default_logger_severity(3)
    return ort_session(ort, path, "ORT_ENABLE_ALL", threads, 1)


def provider_list(config: str) -> list:
    """A configuration (``name[:key=value...]`` per provider, comma-separated) as
    ``InferenceSession``'s ``providers`` list (``(name, options)`` where options are given)."""
    out: list = []
    for tok in config.split(","):
        name, *opts = tok.split(":")
        out.append((name, dict(o.split("=", 1) for o in opts)) if opts else name)
    return out


def is_reference(config: str) -> bool:
    """A configuration forcing portable reference kernels: correctness only, not timed."""
    return any(isinstance(p, tuple) and p[1].get("force_reference") in ("1", "true")
               for p in provider_list(config))


def resolve_config(config: str, say: bool = True) -> str:
    """``config`` with ``force_reference=1`` added to each provider named without options that
    is unavailable here but available with it (kleidi_sme2 on x86)."""
    from onnxplex.framework.plugins import provider_entry

    toks = []
    for tok in config.split(","):
        if ":" not in tok:
            try:
                entry = provider_entry(tok)
                cls = entry.load()
                why = entry.availability()
                if not why.ok and "force_reference" in cls.option_specs and \
                        entry.availability({"force_reference": True}).ok:
                    if say:
                        print(f"{tok} is not available here ({why.reason}): the configuration "
                              f"runs its portable reference kernels (force_reference=1), "
                              "checked for correctness only, not timed", file=sys.stderr)
                    tok = f"{tok}:force_reference=1"
            except Exception:  # noqa: BLE001 - the session creation reports it in the row
                pass
        toks.append(tok)
    return ",".join(toks)


def _plex_session(path: str, threads: int, config: str):
    import onnxplex

    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    return onnxplex.InferenceSession(path, so, providers=provider_list(config))


OV = peers.OPENVINO


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
    """Median seconds per runner; every runner runs once per round, in an order shuffled
    afresh each round (a fixed seed): a run is slower right after another engine's (its code
    and data were evicted from the caches: tiny_cnn's ~40 us run took up to 2x as long right
    after onnxruntime's as after another onnxplex configuration's), so no configuration may
    always follow the same peer (a rotated round-robin keeps every predecessor)."""
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
    keys = list(runners)
    order = random.Random(0)
    for _ in range(n_runs):
        order.shuffle(keys)
        for key in keys:
            fn, names = runners[key]
            t0 = time.perf_counter()
            fn(names, feeds[key])
            times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()} | {"_runs": n_runs}


def _creation_times(path: str, threads: int, configs: list[str], creations: int,
                    openvino: bool) -> dict[str, float]:
    makers = {"onnxruntime": lambda: _ort_session(path, threads)}
    for c in configs:
        if is_reference(c):
            continue
        makers[f"onnxplex[{c}]"] = (lambda c=c: _plex_session(path, threads, c))
    if openvino:
        makers[OV] = lambda: peers.OpenVinoPeer(path, threads)
    return peers.median_creation_times(makers, creations)


def _vm_hwm_mib() -> float | None:
    """This process's peak resident size (``VmHWM``; getrusage's ``ru_maxrss`` keeps the
    parent's across exec), None where /proc has no such line."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_child(path: Path, engine: str, threads: int) -> dict:
    """In a fresh process: import ``engine`` (onnxruntime, OpenVINO or ``onnxplex[config]``),
    create its session, run it once; the peak resident MiB after the import and at the end."""
    name = path.name[: -len(".onnx")]
    npz = np.load(path.with_name(f"{name}.inputs.npz"))
    data = {k: npz[k] for k in npz.files}
    if engine == "onnxruntime":
        import onnxruntime  # noqa: F401

        base = _vm_hwm_mib()
        sess = _ort_session(str(path), threads)
        sess.run(None, {i.name: data[i.name] for i in sess.get_inputs()})
    elif engine == OV:
        peers.load_openvino(say=False)
        base = _vm_hwm_mib()
        peer = peers.OpenVinoPeer(str(path), threads)
        peer.run({p.get_any_name(): data[p.get_any_name()] for p in peer.compiled.inputs})
    else:
        import onnxplex  # noqa: F401

        base = _vm_hwm_mib()
        sess = _plex_session(str(path), threads, engine[len("onnxplex["):-1])
        sess.run(None, {i.name: data[i.name] for i in sess.get_inputs()})
    return {"import_mib": base, "peak_mib": _vm_hwm_mib()}


def peak_memory(path: Path, engines: list[str], threads: int, timeout: float) -> dict:
    """engine -> its :func:`_peak_child` result, or ``{"error": ...}``; each in a fresh
    process (a peak is a process's, so one engine per process)."""
    root = Path(__file__).resolve().parents[2]
    out: dict = {}
    for engine in engines:
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp, "peak.json")
            cmd = [sys.executable, "-m", "benchmarks.zoo.run", "--_child", str(path),
                   "--_result", str(result), "--_peak", engine, "--threads", str(threads)]
            try:
                proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                                      timeout=timeout)
                out[engine] = json.loads(result.read_text()) if result.exists() else {
                    "error": f"exit {proc.returncode}: "
                             + " | ".join((proc.stderr or "").strip().splitlines()[-2:])}
            except subprocess.TimeoutExpired:
                out[engine] = {"error": f"timed out after {timeout} s"}
    return out


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
    openvino = peers.load_openvino(say=False) is not None  # the parent said it once
    row["openvino"] = peers.openvino_version()
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
            if not is_reference(config):
                runners[key] = (sess.run, None)
                feeds[key] = pfeed
        if openvino and OV not in row["errors"]:
            try:
                ov = peers.OpenVinoPeer(str(path), threads, out_names)
                ok, diff, problem = compare(ref, ov.run(feed), out_names)
            except Exception as exc:  # noqa: BLE001 - the row says why
                row["errors"][OV] = f"{type(exc).__name__}: {exc}"[:500]
            else:
                res["match"][OV], res["max_abs_diff"][OV] = ok, diff
                if problem:
                    res["problem"][OV] = problem
                runners[OV] = (lambda _names, f, run=ov.run: run(f), None)
                feeds[OV] = feed
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
                                                OV in res["median_s"])
            row["creation_threads"] = threads
    return row


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

README_MARKERS = ("<!-- zoo:start -->", "<!-- zoo:end -->")


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


def _match_cell(first: dict, key: str) -> str:
    if key not in first.get("match", {}):
        return "-"
    d = first["max_abs_diff"].get(key, math.nan)
    return (("yes" if first["match"][key] else "NO")
            + f" ({d:.1e} of {first.get('ref_max_abs', math.nan):.1e})")


def report(rows: list[dict], threads_list: list[int], configs: list[str], args) -> str:
    keys = [f"onnxplex[{c}]" for c in configs]
    reference = {f"onnxplex[{c}]" for c in configs if is_reference(c)}
    short = {k: ("" if len(configs) == 1 else f" {c}") for k, c in zip(keys, configs)}
    ov_version = next((r["openvino"] for r in rows if r.get("openvino")), None)
    head = ["model", "MB", "match (max abs diff of max abs output)"]
    for t in threads_list:
        head.append(f"ort ms @{t}")
        for k in keys:
            head += [f"plex/ort{short[k]} @{t}", f"plex/ov{short[k]} @{t}"]
    for k in keys:
        head += [f"create plex/ort{short[k]}", f"create plex/ov{short[k]}"]
    memory = any("peak" in r for r in rows)
    if memory:
        for k in keys:
            head += [f"peak MiB plex{short[k]}", f"peak plex/ort{short[k]}",
                     f"peak plex/ov{short[k]}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict[str, list[float]] = {h: [] for h in head}
    notes: list[str] = []
    for r in rows:
        cells = [r["name"], f"{r.get('bytes', 0) / 1e6:.1f}"]
        errors = r.get("errors", {})
        first = r.get("threads", {}).get(str(threads_list[0]), {})
        matches = ["error" if k in errors else _match_cell(first, k) for k in keys]
        if OV in first.get("match", {}):
            matches.append("OV " + _match_cell(first, OV))
        if errors.get("onnxruntime"):
            matches = ["ort error"]
        if errors.get("child"):
            matches = ["run failed"]
        cells.append("; ".join(matches))
        ov_error = peers.error_cell(errors[OV]) if errors.get(OV) else None

        def ratio_cell(head_name: str, times: dict, key: str, peer: str) -> str:
            nonlocal ov_error
            if peer == OV and ov_error:  # why OpenVINO has no figures: once, in its first cell
                cell, ov_error = ov_error, None
                return cell
            if key in reference:
                return "ref"
            ratio = times[key] / times[peer] if (key in times and times.get(peer)) else None
            if ratio:
                ratios[head_name].append(ratio)
            return _fmt(ratio)

        for t in threads_list:
            med = r.get("threads", {}).get(str(t), {}).get("median_s", {})
            ort_s = med.get("onnxruntime")
            cells.append(_fmt(ort_s * 1e3 if ort_s else None, ".2f"))
            for k in keys:
                cells.append(ratio_cell(f"plex/ort{short[k]} @{t}", med, k, "onnxruntime"))
                cells.append(ratio_cell(f"plex/ov{short[k]} @{t}", med, k, OV))
        cre = r.get("creation_s", {})
        for k in keys:
            cells.append(ratio_cell(f"create plex/ort{short[k]}", cre, k, "onnxruntime"))
            cells.append(ratio_cell(f"create plex/ov{short[k]}", cre, k, OV))
        if memory:
            peaks = {e: v["peak_mib"] for e, v in r.get("peak", {}).items()
                     if v.get("peak_mib")}
            for e, v in r.get("peak", {}).items():
                if v.get("error"):
                    notes.append(f"- {r['name']}: peak memory of {e}: {v['error']}")
            for k in keys:
                cells.append(_fmt(peaks.get(k), ".0f") if k not in reference else "ref")
                cells.append(ratio_cell(f"peak plex/ort{short[k]}", peaks, k, "onnxruntime"))
                cells.append(ratio_cell(f"peak plex/ov{short[k]}", peaks, k, OV))
        lines.append("| " + " | ".join(cells) + " |")
        for what, err in errors.items():
            notes.append(f"- {r['name']}: {what}: {err.splitlines()[0] if err else ''}")
        for k, problem in first.get("problem", {}).items():
            notes.append(f"- {r['name']}: {k} mismatch: {problem}")
    gm = ["**geomean**", "", ""]
    for h in head[3:]:
        gm.append("" if h.startswith(("ort ms", "peak MiB")) else _fmt(_geomean(ratios[h])))
    lines.append("| " + " | ".join(gm) + " |")
    n_ok = sum(1 for r in rows if all(
        r.get("threads", {}).get(str(threads_list[0]), {}).get("match", {}).get(k) for k in keys))
    n_ov = sum(1 for r in rows
               if r.get("threads", {}).get(str(threads_list[0]), {}).get("match", {}).get(OV))
    ov_text = (f"OpenVINO {ov_version} (ov: CPU, fp32, latency hint, same threads; creation is "
               f"compile_model) matches onnxruntime on {n_ov} of {len(rows)}"
               if ov_version else "OpenVINO not installed: its columns show -")
    out = [
        f"Model zoo: onnxplex / onnxruntime (CPUExecutionProvider) and onnxplex / OpenVINO, "
        f"median latency of {args.runs} alternating runs after {args.warmups} warmups; threads "
        f"{','.join(map(str, threads_list))}; creation: median of {args.creations}"
        + ("; peak: each engine's peak resident MiB (VmHWM) in a fresh process of its own "
           f"(import, create, one run; {threads_list[0]} thread(s))" if memory else "")
        + ". Below 1 is "
        f"faster. Outputs match onnxruntime (rtol {RTOL}, atol {ATOL}, and the largest "
        f"difference within {RTOL} of the output's largest value) on {n_ok} of "
        f"{len(rows)} models; {ov_text}. onnxplex providers: {' | '.join(configs)}."
        + ("".join(f" {c} runs portable reference kernels (its provider has no kernels for this "
                   "CPU): outputs checked, speed not measured (ref)." for c in configs
                   if is_reference(c))),
        "", *lines, "", f"Machine: {machine_line()}"]
    if notes:
        out += ["", "Problems:", "", *notes]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def _child_main(args) -> int:
    threads = [int(t) for t in args.threads.split(",")]
    if args._peak:
        try:
            row = _peak_child(Path(args._child), args._peak, threads[0])
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            row = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        Path(args._result).write_text(json.dumps(row))
        return 0
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
    ap.add_argument("--readme", type=Path, default=None,
                    help="README whose block between the zoo markers gets the table")
    ap.add_argument("--no-memory", dest="memory", action="store_false",
                    help="leave out the peak-memory processes")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_peak", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_result", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.providers = args.providers or [DEFAULT_CONFIG]
    if args._child:
        return _child_main(args)
    args.providers = [resolve_config(c) for c in args.providers]
    if args.models is None:
        ap.error("--models is required")
    threads = [int(t) for t in args.threads.split(",")]
    peers.load_openvino()  # says "OpenVINO not installed" once; the children stay quiet
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
        if args.memory and "threads" in row:
            engines = ["onnxruntime"] + [f"onnxplex[{c}]" for c in args.providers
                                         if not is_reference(c)]
            if row.get("openvino"):
                engines.append(OV)
            row["peak"] = peak_memory(path, engines, threads[0], args.timeout)
            row["peak_threads"] = threads[0]
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        summary = []
        for t in threads:
            med = row.get("threads", {}).get(str(t), {}).get("median_s", {})
            for config in args.providers:
                k = f"onnxplex[{config}]"
                if k in med and med.get("onnxruntime"):
                    summary.append(f"@{t} {med[k] / med['onnxruntime']:.2f}")
                if k in med and med.get(OV):
                    summary.append(f"(ov {med[k] / med[OV]:.2f})")
        first = row.get("threads", {}).get(str(threads[0]), {})
        match = ",".join("ok" if v else "MISMATCH" for v in first.get("match", {}).values())
        errs = "; ".join(f"{k}: {v.splitlines()[0][:120]}" for k, v in
                         row.get("errors", {}).items() if v)
        print(f"{name:40s} {row['wall_s']:6.1f} s  {match or '-':10s} "
              f"{' '.join(summary)}  {errs}", flush=True)
    md = report(rows, threads, args.providers, args)
    Path(f"{args.out}.md").write_text(md)
    if args.readme is not None:
        from benchmarks.run import update_readme

        update_readme(args.readme, md.rstrip("\n"), *README_MARKERS)
    Path(f"{args.out}.json").write_text(json.dumps(
        {"machine": machine_line(), "threads": threads, "runs": args.runs,
         "providers": args.providers, "rows": rows}, indent=1, default=float) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
