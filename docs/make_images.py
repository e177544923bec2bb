"""Redraw the pictures in docs/images from what the repo's own commands give.

    python docs/make_images.py [--only timeline,placement,benchmark]

* ``timeline.png``: ``onnxplex profile --png`` of the run of median length among seven
  profiled runs of the one-layer test encoder (``tests/models.py``) on xnnpack_like +
  cpu_mlas (on a shared machine one run in a few is stretched by other work; matplotlib:
  ``pip install 'onnxplex[plot]'``);
* ``placement.svg``: ``onnxplex partition --format svg`` of the same encoder and providers;
* ``placement_resnet50_compact.svg``: the compact placement picture of onnx's light ResNet-50
  (optimized, xnnpack_like + cpu_mlas with their default settings), chains of same-provider
  nodes collapsed (its node and box counts and its height beside the full picture's are
  printed: docs/cli.md quotes them);
* ``benchmark.png``: ``benchmarks/run.py --chart-from benchmarks/results.json``, the chart of
  the benchmark table in the README (the same run; nothing is measured again).

As in the tests, xnnpack_like runs its own kernels for the encoder (``ONNXPLEX_XNNPACK_MLAS=0``)
so that its pictures show the delegate claiming fused partitions on x86 too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
ALL = ("timeline", "placement", "benchmark")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {ALL}")
    a = p.parse_args(argv)
    only = [w for w in a.only.split(",") if w]
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    import onnx
    from models import light_model_paths, transformer_encoder, transformer_feed

    import onnxplex as ort
    from onnxplex.tools.cli import main as cli

    providers = "xnnpack_like,cpu_mlas"
    saved = os.environ.get("ONNXPLEX_XNNPACK_MLAS")
    os.environ["ONNXPLEX_XNNPACK_MLAS"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        encoder = Path(tmp) / "encoder.onnx"
        onnx.save(transformer_encoder(), encoder)
        if "timeline" in only:
            so = ort.SessionOptions()
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / "prof")
            sess = ort.InferenceSession(str(encoder), so, providers=providers.split(","))
            for _ in range(7):
                sess.run(None, transformer_feed(1, 8))
            profile = sess.end_profiling()
            runs = sorted((e for e in json.loads(Path(profile).read_text())
                           if e.get("name") == "model_run"), key=lambda e: e["ts"])
            by_length = sorted(range(len(runs)), key=lambda k: runs[k]["dur"])
            median = by_length[len(runs) // 2] + 1
            cli(["profile", profile, "--top", "3", "--png", str(IMAGES / "timeline.png"),
                 "--run", str(median)])
        if "placement" in only:
            with contextlib.chdir(tmp):   # (the title names the model as given: no temp path)
                cli(["partition", encoder.name, "--providers", providers, "--format", "svg",
                     "-o", str(IMAGES / "placement.svg")])
            from onnxplex.tools.draw import GraphPicture

            if saved is None:       # ResNet-50 as a user gets it
                del os.environ["ONNXPLEX_XNNPACK_MLAS"]
            else:
                os.environ["ONNXPLEX_XNNPACK_MLAS"] = saved
            resnet = next(p for p in light_model_paths() if p.endswith("light_resnet50.onnx"))
            sess = ort.InferenceSession(resnet, providers=providers.split(","))
            pic = GraphPicture.from_session(sess, title="light ResNet-50: placement (compact)",
                                            compact=True)
            out = IMAGES / "placement_resnet50_compact.svg"
            out.write_text(pic.to_svg() + "\n", encoding="utf-8")
            full = GraphPicture.from_session(sess, compact=False)
            print(f"wrote {out}: {len(sess.get_provider_assignment().placements)} nodes in "
                  f"{sum(n.kind == 'op' for n in pic.nodes)} boxes, {_svg_height(pic)} px tall "
                  f"({_svg_height(full)} px with every node its own box)")
    if "benchmark" in only:
        from benchmarks import run

        run.main(["--chart-from", str(ROOT / "benchmarks" / "results.json"),
                  "--chart", str(IMAGES / "benchmark.png")])
    return 0


def _svg_height(pic) -> int:
    """The height attribute of the picture's SVG (what a reader scrolls)."""
    svg = pic.to_svg()
    start = svg.index('height="') + len('height="')
    return int(svg[start:svg.index('"', start)])


if __name__ == "__main__":
    sys.exit(main())
