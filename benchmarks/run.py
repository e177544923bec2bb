"""Side-by-side benchmark of onnxplex, onnxruntime and OpenVINO on the real-model suite.

    python benchmarks/run.py --models DIR [--only resnet50,mlp] [--threads 2,1]
                             [--runs 30] [--no-rss] [--out PREFIX] [--readme README.md]
    python benchmarks/run.py --chart-from benchmarks/results.json [--chart OUT.png]

For each model (built by ``benchmarks/build_models.py`` into ``DIR`` when missing) and each
thread count, one process runs onnxplex, onnxruntime and OpenVINO on the same inputs,
alternating runs (``onnxplex.tools.perf.perf`` with ``compare_onnxruntime`` and OpenVINO as a peer,
``benchmarks/peers.py``: fp32, latency hint, the same number of threads), and records the ratio
of median latencies to each peer (onnxplex / onnxruntime and onnxplex / OpenVINO: below 1 is
faster), the session creation times (median of ``CREATIONS`` per engine, alternating; the
first, cold one is kept in the JSON; OpenVINO's is ``compile_model``) and the largest output
difference of onnxplex and of OpenVINO from onnxruntime. Peak memory is measured in fresh child
processes, one per engine and model (peak RSS after creating a session and running it 3 times).
OpenVINO is optional (``pip install '.[openvino]'``): without it the runner says "OpenVINO not
installed" once and its columns show "-"; a model it cannot take shows
``openvino: <error class>: <first line>`` in its ratio column.

Writes ``benchmarks/results.md`` (the table, with the machine line), ``benchmarks/results.json``
and ``benchmarks/results.png`` (a bar chart of the ratios to each peer, drawn by matplotlib:
``pip install 'onnxplex[plot]'``); with ``--readme`` the table also replaces the block between
``<!-- benchmarks:start -->`` and ``<!-- benchmarks:end -->``. ``--chart-from`` redraws the chart
of a saved JSON without measuring anything.
The machine is shared: only ratios measured in one process mean anything, never absolute ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # `benchmarks.peers`, as the zoo runner imports it

import build_models  # noqa: E402

from benchmarks import peers  # noqa: E402

START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"
LABELS = {
    "resnet50": "ResNet-50 (1x3x224x224)",
    "mobilenetv2": "MobileNetV2 (1x3x224x224)",
    "bert_base": "BERT-base (seq 128)",
    "gpt2_small": "GPT-2 small (seq 64)",
    "mlp": "MLP 4x1024 (batch 32)",
    "bert_base_int8": "BERT-base int8 dynamic (seq 128)",
    "mlp_int4": "MLP 4x1024 int4 MatMulNBits (batch 32)",
    "bert_base_fp16": "BERT-base fp16 (seq 128)",
    "resnet50_qdq": "ResNet-50 int8 static QDQ (1x3x224x224)",
}


def feeds_for(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name in ("resnet50", "mobilenetv2", "resnet50_qdq"):
        return {"x": rng.standard_normal(build_models.IMAGE_SHAPE).astype(np.float32)}
    if name in ("mlp", "mlp_int4"):
        shape = (build_models.MLP_BATCH, build_models.MLP_WIDTH)
        return {"x": rng.standard_normal(shape).astype(np.float32)}
    if name.startswith("bert"):
        b, s = build_models.BERT_BATCH, build_models.BERT_SEQ
        return {"input_ids": rng.integers(0, 30522, (b, s)).astype(np.int64),
                "attention_mask": np.ones((b, s), np.int64),
                "token_type_ids": np.zeros((b, s), np.int64)}
    if name == "gpt2_small":
        b, s = build_models.GPT2_BATCH, build_models.GPT2_SEQ
        return {"input_ids": rng.integers(0, 50257, (b, s)).astype(np.int64),
                "attention_mask": np.ones((b, s), np.int64)}
    raise ValueError(f"no feeds for {name!r}")


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import onnxruntime

    import onnxplex

    ov = peers.openvino_version()
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, numpy "
            f"{np.__version__}, onnxplex {onnxplex.__version__}, onnxruntime "
            f"{onnxruntime.__version__}{f', openvino {ov}' if ov else ''}; "
            f"{time.strftime('%Y-%m-%d')}")


# ---- peak memory, in a child process per engine ---------------------------------------------


def _peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM: reset by exec, unlike getrusage's ru_maxrss,
    which a child inherits from the parent that forked it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


ENGINES = ("onnxplex", "onnxruntime", peers.OPENVINO)


def _rss_child(engine: str, model: str, name: str, threads: int) -> None:
    feeds = feeds_for(name)
    if engine == peers.OPENVINO:
        run = peers.OpenVinoPeer(model, threads).run
    else:
        if engine == "onnxplex":
            import onnxplex as rt
        else:
            import onnxruntime as rt
        so = rt.SessionOptions()
        so.intra_op_num_threads = threads
        sess = rt.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        run = lambda f: sess.run(None, f)  # noqa: E731
    for _ in range(3):
        run(feeds)
    print(json.dumps({"peak_rss_mib": _peak_rss_mib()}))


def peak_rss(engine: str, model: Path, name: str, threads: int) -> float | None:
    """Peak RSS of a child running ``engine``; ``None`` if OpenVINO's child fails (a model
    it cannot take: its latency column says why)."""
    try:
        out = subprocess.run([sys.executable, __file__, "--rss-child", engine, str(model), name,
                              str(threads)], capture_output=True, text=True, check=True,
                             timeout=1800)
    except subprocess.CalledProcessError:
        if engine != peers.OPENVINO:
            raise
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mib"]


# ---- the run ---------------------------------------------------------------------------------


# Session creations per engine, model and thread count; the median is kept. A creation takes
# tens of milliseconds: on a shared machine one busy spell moved the median of five.
CREATIONS = 9


def creation_times(model: Path, threads: int, first: dict[str, float]) -> dict[str, float]:
    """Median session creation time of each engine in ``first``: the first creation (perf's,
    which may pay one-time imports and initialization) and ``CREATIONS - 1`` more, alternating
    engines (OpenVINO's creation is its ``compile_model``)."""
    import onnxruntime as ort

    import onnxplex
    from onnxplex.tools.perf import _ort_session

    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    makers = {"onnxplex": lambda: onnxplex.InferenceSession(str(model), so),
              "onnxruntime": lambda: _ort_session(ort, str(model), "ORT_ENABLE_ALL", threads, 0),
              peers.OPENVINO: lambda: peers.OpenVinoPeer(str(model), threads)}
    return peers.median_creation_times({k: v for k, v in makers.items() if k in first},
                                       CREATIONS - 1, first)


def bench(name: str, model: Path, threads: int, runs: int,
          feeds: dict[str, np.ndarray] | None = None, openvino: bool = True) -> dict:
    """One row: onnxplex, onnxruntime and (with ``openvino``, if it imports) OpenVINO,
    alternating; ``feeds`` default to the suite's inputs for ``name``."""
    from onnxplex.tools.perf import perf

    others = {}
    if openvino and peers.load_openvino() is not None:
        others[peers.OPENVINO] = peers.openvino_factory(str(model), threads)
    r = perf(str(model), providers=None, intra_op_threads=threads, repetitions=runs,
             warmup=2, feeds=feeds_for(name) if feeds is None else feeds,
             compare_onnxruntime=True, peers=others, progress=None)
    p = r.peer
    first = {"onnxplex": r.session_creation, "onnxruntime": p["session_creation"]}
    ov = r.peers.get(peers.OPENVINO)
    if ov is not None and "error" not in ov:
        first[peers.OPENVINO] = ov["session_creation"]
    created = creation_times(model, threads, first)
    row = {"model": name, "threads": threads, "runs": runs,
           "onnxplex_ms": r.latency.median * 1e3, "onnxruntime_ms": p["latency"].median * 1e3,
           "ratio": p["ratio"], "max_abs_diff": p["max_abs_diff"],
           "openvino_ms": None, "ratio_openvino": None, "openvino_max_abs_diff": None,
           "openvino_error": None}
    if ov is not None and "error" in ov:
        row["openvino_error"] = ov["error"]
    elif ov is not None:
        row.update(openvino_ms=ov["latency"].median * 1e3, ratio_openvino=ov["ratio"],
                   openvino_max_abs_diff=ov["max_abs_diff"])  # against onnxruntime
    for engine in ENGINES:
        if engine in created:
            row[f"create_{engine}_ms"] = created[engine] * 1e3
            row[f"create_first_{engine}_ms"] = first[engine] * 1e3
    return row


def _ratio(a: float | None, b: float | None, spec: str = ".2f") -> str:
    return format(a / b, spec) if a and b else "-"


def table(rows: list[dict], rss: dict[str, dict[str, float | None]], machine: str) -> str:
    threads = sorted({r["threads"] for r in rows}, reverse=True)
    ov_missing = peers.openvino_version() is None
    lines = [f"Machine: {machine}.", "",
             "| model | threads | onnxplex ms | onnxruntime ms | OpenVINO ms | ratio vs "
             "onnxruntime | ratio vs OpenVINO | session creation ratio vs onnxruntime | "
             "session creation ratio vs OpenVINO | peak RSS ratio vs onnxruntime | "
             "peak RSS ratio vs OpenVINO | max abs diff onnxplex | max abs diff OpenVINO |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = rss.get(r["model"], {})
        plex_m = m.get("onnxplex")
        rss_txt = [f"{plex_m / m[e]:.2f} ({plex_m:.0f} / {m[e]:.0f} MiB)" if plex_m and m.get(e)
                   else "-" for e in ("onnxruntime", peers.OPENVINO)]
        ov_ms = r.get("openvino_ms")
        ov_ratio = (peers.error_cell(r["openvino_error"]) if r.get("openvino_error")
                    else "-" if r.get("ratio_openvino") is None
                    else f"**{r['ratio_openvino']:.2f}**")
        ov_diff = r.get("openvino_max_abs_diff")
        create = r.get("create_onnxplex_ms")
        lines.append(
            f"| {LABELS.get(r['model'], r['model'])} | {r['threads']} | "
            f"{r['onnxplex_ms']:.2f} | {r['onnxruntime_ms']:.2f} | "
            f"{'-' if ov_ms is None else f'{ov_ms:.2f}'} | **{r['ratio']:.2f}** | {ov_ratio} | "
            f"{_ratio(create, r.get('create_onnxruntime_ms'), '.1f')} | "
            f"{_ratio(create, r.get('create_openvino_ms'), '.1f')} | {rss_txt[0]} | "
            f"{rss_txt[1]} | {r['max_abs_diff']:.1e} | "
            f"{'-' if ov_diff is None else f'{ov_diff:.1e}'} |")
    lines.append("")
    for t in threads:
        parts = []
        for key, peer in (("ratio", "onnxruntime"), ("ratio_openvino", "OpenVINO")):
            ratios = [r[key] for r in rows if r["threads"] == t and r.get(key)]
            if ratios:
                geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
                parts.append(f"onnxplex / {peer} **{geo:.2f}** over {len(ratios)} models "
                             f"(worst {max(ratios):.2f})")
            else:
                parts.append(f"onnxplex / {peer} - ("
                             f"{'OpenVINO not installed' if ov_missing else 'no model ran'})")
        lines.append(f"Geometric mean ratio at {t} thread(s): {'; '.join(parts)}.")
    lines.append("")
    lines.append("Ratios are onnxplex / the peer (below 1: onnxplex is faster or smaller). "
                 "Max abs diff: largest output difference from onnxruntime's. OpenVINO: "
                 "fp32 (INFERENCE_PRECISION_HINT=f32, DYNAMIC_QUANTIZATION_GROUP_SIZE=0), "
                 "PERFORMANCE_HINT=LATENCY, INFERENCE_NUM_THREADS = the threads column; its "
                 "session creation is compile_model.")
    return "\n".join(lines)


def chart(rows: list[dict], path: Path) -> Path:
    """The ratio bars of ``rows`` as a PNG at ``path``: one panel per peer (onnxruntime, and
    OpenVINO when a row has its ratio), one bar per model and thread count, the line at 1.0
    (parity). Drawn by matplotlib through ``onnxplex.tools.charts`` (``pip install
    'onnxplex[plot]'``; without it, a MissingDependencyError that says so)."""
    from onnxplex.tools.charts import Chart, new_figure

    threads = sorted({r["threads"] for r in rows}, reverse=True)
    models = list(dict.fromkeys(r["model"] for r in rows))
    peers_ = [("ratio", "onnxruntime")]
    if any(r.get("ratio_openvino") for r in rows):
        peers_.append(("ratio_openvino", "OpenVINO"))
    colors = ["#4c78a8", "#f58518", "#54a24b", "#b279a2"]
    band = 0.8 / len(threads)        # a model's bars share 0.8 of its row
    fig = new_figure(560 + 330 * len(peers_), 150 + len(models) * (14 * len(threads) + 12))
    axes = fig.subplots(1, len(peers_), sharey=True, squeeze=False)[0]
    top = max(1.5, 1.15 * max(r[k] for r in rows for k, _ in peers_ if r.get(k)))
    for ax, (key, peer) in zip(axes, peers_):
        for k, t in enumerate(threads):
            ys, vals = [], []
            for m, model in enumerate(models):
                r = next((r for r in rows if r["model"] == model and r["threads"] == t), None)
                if r is not None and r.get(key):
                    ys.append(m - 0.4 + band * (k + 0.5))
                    vals.append(r[key])
            bars = ax.barh(ys, vals, height=band * 0.9, color=colors[k % len(colors)],
                           label=f"{t} thread{'s' if t != 1 else ''}")
            ax.bar_label(bars, fmt="%.2f", padding=3, fontsize=8)
        ax.axvline(1.0, color="#222222", linewidth=1.2)
        ax.set_xlim(0, top)
        ax.set_title(f"onnxplex / {peer}", fontsize=11)
        ax.set_xlabel("ratio of median latencies (below 1: onnxplex is faster)")
        ax.grid(axis="x", color="#e4e4e4")
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0].set_yticks(range(len(models)), [LABELS.get(m, m) for m in models])
    axes[0].set_ylim(len(models) - 0.5, -0.5)
    axes[0].tick_params(axis="y", length=0)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(threads), frameon=False)
    fig.suptitle("onnxplex against its peers, same process, alternating runs", fontsize=12)
    return Chart(fig).save(path)


def update_readme(readme: Path, block: str, start: str = START, end: str = END) -> None:
    """Replace what lies between the ``start`` and ``end`` markers of ``readme`` by ``block``."""
    text = readme.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{readme} has no {start} ... {end} block")
    new = re.sub(re.escape(start) + ".*?" + re.escape(end),
                 lambda _m: f"{start}\n{block}\n{end}", text, flags=re.S)
    readme.write_text(new)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--rss-child":
        _rss_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help="folder of built models (built if missing)")
    p.add_argument("--only", default="", help="comma-separated subset of the models")
    p.add_argument("--threads", default="2,1", help="intra-op thread counts to measure")
    p.add_argument("--runs", type=int, default=30, help="timed runs per engine")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-memory children")
    p.add_argument("--out", default=str(HERE / "results"), help="prefix of .md/.png/.json")
    p.add_argument("--readme", help="README to update between the benchmark markers")
    p.add_argument("--chart-from", metavar="JSON",
                   help="measure nothing: draw the chart of an earlier run's JSON "
                        "(benchmarks/results.json) to --chart")
    p.add_argument("--chart", metavar="PNG", help="where --chart-from draws (default: the "
                                                  "JSON's name with .png)")
    a = p.parse_args(argv)
    if a.chart_from:
        src = Path(a.chart_from)
        rows = json.loads(src.read_text())["rows"]
        print(f"wrote {chart(rows, Path(a.chart or src.with_suffix('.png')))}")
        return 0
    if not a.models:
        p.error("--models is required (unless --chart-from)")
    names = [n for n in a.only.split(",") if n] or list(build_models.MODEL_NAMES)
    threads = [int(t) for t in a.threads.split(",")]
    rows, rss = [], {}
    has_ov = peers.load_openvino() is not None  # says "OpenVINO not installed" once
    for name in names:
        model = build_models.build(name, a.models)
        for t in threads:
            rows.append(bench(name, model, t, a.runs, openvino=has_ov))
            r = rows[-1]
            ov = (f"  OpenVINO {r['openvino_ms']:8.2f} ms  ratio {r['ratio_openvino']:.2f}"
                  if r["openvino_ms"] is not None else
                  f"  {peers.error_cell(r['openvino_error'])}" if r["openvino_error"] else "")
            print(f"{name:15s} threads={t} onnxplex {r['onnxplex_ms']:8.2f} ms  onnxruntime "
                  f"{r['onnxruntime_ms']:8.2f} ms  ratio {r['ratio']:.2f}{ov}", flush=True)
        if not a.no_rss:
            rss[name] = {e: peak_rss(e, model, name, threads[0]) for e in ENGINES
                         if has_ov or e != peers.OPENVINO}
    block = table(rows, rss, machine_line())
    out = Path(a.out)
    out.with_suffix(".md").write_text(block + "\n")
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "rss_mib": rss}, indent=2))
    chart(rows, out.with_suffix(".png"))
    print(block)
    if a.readme:
        update_readme(Path(a.readme), f"{block}\n\n![onnxplex / onnxruntime and OpenVINO "
                                      "latency ratios]"
                                      f"(benchmarks/{out.with_suffix('.png').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
