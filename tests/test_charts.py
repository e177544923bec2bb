"""Charts through matplotlib (``onnxplex.tools.charts``): the profile timeline (``onnxplex profile
--png``) and the benchmark chart (``benchmarks/run.py``) are PNG files matplotlib draws; without
matplotlib they are one clear error naming ``pip install 'onnxplex[plot]'``; importing onnxplex
never imports matplotlib.

Profiles come from real runs of a small ``onnx.helper`` model; the benchmark rows are made up
(the chart draws whatever ratios it is given).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import chain

import onnxplex as ort
from onnxplex._errors import MissingDependencyError, OnnxplexError
from onnxplex.tools.cli import main
from onnxplex.tools.draw import provider_colors

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(path: Path) -> np.ndarray:
    """The image as uint8 RGB (height, width, 3), after checking the PNG signature."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, data[:8]
    import matplotlib.image

    img = matplotlib.image.imread(path, format="png")
    if img.dtype != np.uint8:
        img = np.round(img * 255).astype(np.uint8)
    return img[..., :3]


def has_colour(img: np.ndarray, hex_colour: str, pixels: int = 20) -> bool:
    """At least ``pixels`` pixels of exactly ``#rrggbb`` (the inside of a bar)."""
    rgb = [int(hex_colour.lstrip("#")[k:k + 2], 16) for k in (0, 2, 4)]
    return int((img == rgb).all(-1).sum()) >= pixels


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> str:
    """Three profiled runs of Relu -> Sigmoid -> Tanh -> Relu."""
    tmp = tmp_path_factory.mktemp("charts")
    path = tmp / "m.onnx"
    onnx.save(chain(["Relu", "Sigmoid", "Tanh", "Relu"], shape=(64, 64)), path)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp / "prof")
    sess = ort.InferenceSession(str(path), so, providers=["cpu_mlas"])
    for _ in range(3):
        sess.run(None, {"x": np.ones((64, 64), np.float32)})
    return sess.end_profiling()


@pytest.fixture
def no_matplotlib(monkeypatch):
    """matplotlib made unimportable, as if it were not installed (also when a test before
    imported it: every matplotlib module in sys.modules is blocked)."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def _bench_run():
    sys.path.insert(0, str(ROOT))
    from benchmarks import run

    return run


def _bench_rows() -> list[dict]:
    rows = []
    for k, model in enumerate(["resnet50", "bert_base", "mlp"]):
        for t in (2, 1):
            rows.append({"model": model, "threads": t, "ratio": 0.8 + 0.15 * k + 0.05 * t,
                         "ratio_openvino": 1.3 - 0.2 * k if model != "mlp" else None})
    return rows


# ------------------------------------------------------------------------------------ drawn

def test_profile_timeline_png_is_made(profile, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "timeline.png"
    assert main(["profile", profile, "--png", str(out), "--run", "2"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.stat().st_size > 10_000
    img = read_png(out)
    assert img.shape[1] == 1200 and img.shape[0] > 200
    # the node bars in cpu_mlas's colour, the rest mostly white background
    assert has_colour(img, provider_colors(["cpu_mlas"])["cpu_mlas"], 200)
    assert (img == 255).all(-1).mean() > 0.5


def test_timeline_keeps_the_longest_rows_of_a_big_run(profile):
    pytest.importorskip("matplotlib")
    from onnxplex.tools.perf import load_profile
    from onnxplex.tools.timeline import timeline

    events = load_profile(profile)
    full, cut = timeline(events, run=1), timeline(events, run=1, max_rows=2)
    labels = [t.get_text() for t in full.figure.axes[1].get_yticklabels()]
    assert len(labels) == 4 and labels[0].endswith("(Relu)") and labels[1].endswith("(Sigmoid)")
    assert len(cut.figure.axes[1].get_yticklabels()) == 2
    assert "the 2 longest of 4 node events" in cut.figure.axes[1].get_title(loc="left")
    # the lanes show every node, whatever max_rows
    assert len(cut.figure.axes[0].collections[0].get_paths()) == 4
    assert cut.png_bytes()[:8] == PNG_SIGNATURE


def test_benchmark_chart_png_is_made(tmp_path):
    pytest.importorskip("matplotlib")
    run = _bench_run()
    rows = _bench_rows()
    out = run.chart(rows, tmp_path / "results.png")
    assert out.stat().st_size > 10_000
    img = read_png(out)
    assert img.shape[0] > 200 and img.shape[1] > 800
    for colour in ("#4c78a8", "#f58518"):   # one colour per thread count
        assert has_colour(img, colour, 200)
    # from a saved JSON, measuring nothing; without OpenVINO ratios there is one panel
    for r in rows:
        r["ratio_openvino"] = None
    src = tmp_path / "saved.json"
    src.write_text(json.dumps({"rows": rows, "rss_mib": {}}))
    assert run.main(["--chart-from", str(src), "--chart", str(tmp_path / "c.png")]) == 0
    one = read_png(tmp_path / "c.png")
    assert one.shape[1] < img.shape[1]


# ---------------------------------------------------------------------- without matplotlib

def test_without_matplotlib_a_chart_is_one_clear_error(profile, tmp_path, capsys,
                                                       no_matplotlib):
    from onnxplex.tools.charts import new_figure
    from onnxplex.tools.perf import load_profile
    from onnxplex.tools.timeline import timeline

    with pytest.raises(MissingDependencyError, match=r"pip install 'onnxplex\[plot\]'") as e:
        new_figure(100, 100)
    assert isinstance(e.value, OnnxplexError) and isinstance(e.value, ImportError)
    with pytest.raises(MissingDependencyError, match="matplotlib"):
        timeline(load_profile(profile))
    with pytest.raises(MissingDependencyError):
        _bench_run().chart(_bench_rows(), tmp_path / "c.png")
    # the command line: one error line, exit status 2, no file, no traceback
    out = tmp_path / "t.png"
    assert main(["profile", profile, "--png", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnxplex: error: MissingDependencyError")
    assert "pip install 'onnxplex[plot]'" in err[0] and not out.exists()
    # a run that does not exist is still that error first (checked before drawing)
    assert main(["profile", profile, "--png", str(out), "--run", "9"]) == 2
    assert "run 9 does not exist" in capsys.readouterr().err


def test_importing_onnxplex_does_not_import_matplotlib():
    code = ("import sys, onnxplex, onnxplex.tools.cli, onnxplex.tools.charts, onnxplex.tools.draw, "
            "onnxplex.tools.timeline; print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
