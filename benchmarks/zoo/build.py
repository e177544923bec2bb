"""Export the model zoo (``benchmarks/zoo/models.py``) to ONNX.

    python -m benchmarks.zoo.build --out DIR [--only resnet18,gru_bi] [--force] [--list]
    python benchmarks/zoo/build.py --out DIR ...          (same thing)

For every entry writes ``DIR/<name>.onnx`` and ``DIR/<name>.inputs.npz`` (the example inputs as
numpy arrays, keyed by ONNX input name) and ``DIR/<name>.meta.json`` (exporter, opset, note,
export seconds). A model whose ``.onnx`` and ``.inputs.npz`` both exist is skipped unless
``--force``. One model failing to export is reported (``DIR/<name>.error.txt`` holds the
traceback) and the others go on; the exit status is 1 if any failed. Each export runs in a
child process (``--inprocess`` to turn that off) so one model's memory, or an exporter that
hangs past ``--timeout`` seconds, does not take the rest down. ``build_one`` is the same for
tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks.zoo` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.zoo import models  # noqa: E402


def _to_numpy(value):
    import numpy as np

    return np.ascontiguousarray(value.detach().cpu().numpy())


def build_one(name: str, out_dir: Path | str, force: bool = False) -> Path:
    """Export one zoo entry into ``out_dir``; returns the ``.onnx`` path. Raises on failure."""
    import warnings

    import numpy as np

    entry = models.REGISTRY[name]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / f"{name}.onnx"
    npz_path = out_dir / f"{name}.inputs.npz"
    if onnx_path.exists() and npz_path.exists() and not force:
        return onnx_path
    missing = models.available(entry)
    if missing:
        raise RuntimeError(f"needs {missing}")
    t0 = time.perf_counter()
    module = entry.make_module()
    inputs = entry.make_inputs()
    tmp = onnx_path.with_suffix(".onnx.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models.export(entry, tmp, module=module, inputs=inputs)
    tmp.replace(onnx_path)
    np.savez(npz_path, **{k: _to_numpy(v) for k, v in inputs.items()})
    meta = {"name": name, "exporter": entry.exporter, "opset": entry.target_opset,
            "family": entry.family, "note": entry.note, "outputs": list(entry.outputs),
            "export_seconds": round(time.perf_counter() - t0, 2),
            "bytes": onnx_path.stat().st_size}
    (out_dir / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    err = out_dir / f"{name}.error.txt"
    if err.exists():
        err.unlink()
    return onnx_path


def _child(name: str, out_dir: str, force: bool) -> int:
    try:
        build_one(name, out_dir, force)
    except Exception:  # noqa: BLE001 - reported to the parent through the error file
        Path(out_dir, f"{name}.error.txt").write_text(traceback.format_exc())
        return 1
    return 0


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="output directory")
    ap.add_argument("--only", default="", help="comma-separated entry names")
    ap.add_argument("--force", action="store_true", help="re-export existing files")
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    ap.add_argument("--inprocess", action="store_true", help="export in this process")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per child export")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.list:
        for entry in models.REGISTRY.values():
            print(f"{entry.name:40s} {entry.exporter:11s} opset {entry.target_opset}  "
                  f"{entry.note}")
        return 0
    if args.out is None:
        ap.error("--out is required")
    if args._child:
        return _child(args._child, str(args.out), args.force)

    names = [n for n in args.only.split(",") if n] or models.names()
    unknown = [n for n in names if n not in models.REGISTRY]
    if unknown:
        ap.error(f"unknown entries {unknown}; known: {', '.join(models.names())}")
    args.out.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    for name in names:
        onnx_path = args.out / f"{name}.onnx"
        if (onnx_path.exists() and (args.out / f"{name}.inputs.npz").exists()
                and not args.force):
            print(f"{name:40s} exists, skipped", flush=True)
            continue
        t0 = time.perf_counter()
        if args.inprocess:
            code = _child(name, str(args.out), args.force)
        else:
            cmd = [sys.executable, "-m", "benchmarks.zoo.build", "--out", str(args.out),
                   "--_child", name] + (["--force"] if args.force else [])
            root = Path(__file__).resolve().parents[2]
            try:
                proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                                      timeout=args.timeout)
                code = proc.returncode
                if code and not (args.out / f"{name}.error.txt").exists():
                    (args.out / f"{name}.error.txt").write_text(proc.stdout + proc.stderr)
            except subprocess.TimeoutExpired:
                code = 1
                (args.out / f"{name}.error.txt").write_text(
                    f"TimeoutExpired: export took over {args.timeout:.0f} s\n")
        dt = time.perf_counter() - t0
        if code == 0:
            size = onnx_path.stat().st_size / 1e6
            print(f"{name:40s} ok      {dt:6.1f} s  {size:8.1f} MB", flush=True)
        else:
            err = (args.out / f"{name}.error.txt").read_text()
            failed[name] = _last_line(err)
            print(f"{name:40s} FAILED  {dt:6.1f} s  {failed[name]}", flush=True)
    if failed:
        print(f"\n{len(failed)} failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
