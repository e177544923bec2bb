"""The onnxplex command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
from graphs import small_cnn

from onnxplex._cli import main


def test_run_with_random_and_given_inputs(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    assert main(["run", str(path), "--dim", "2"]) == 0
    out = capsys.readouterr().out
    assert "providers: cpu_mlas" in out and "output y: float32[2, 10]" in out
    feeds = tmp_path / "in.npz"
    np.savez(feeds, x=np.ones((3, 3, 16, 16), np.float32))
    assert main(["run", str(path), "--inputs", str(feeds), "--save",
                 str(tmp_path / "out.npz")]) == 0
    assert np.load(tmp_path / "out.npz")["y"].shape == (3, 10)


def test_providers_lists_availability(capsys):
    assert main(["providers", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in data["providers"]}
    assert rows["cpu_mlas"]["available"] is True
    assert rows["kleidi_sme2"]["cpu"]["arch"]
    assert rows["xnnpack_like"]["available"] is True and rows["xnnpack_like"]["opt_in"] is True
    assert rows["cpu_mlas"]["opt_in"] is False
    assert main(["providers"]) == 0
    assert "xnnpack_like  (onnxplex 0.1.0)  available (opt-in" in capsys.readouterr().out


def test_partition_report(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    assert main(["partition", str(path), "--providers", "CPUExecutionProvider"]) == 0
    out = capsys.readouterr().out
    assert "cpu_mlas: " in out and "Conv" in out      # Conv, or FusedConv after fusion
    assert main(["partition", str(path), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["counts"]["cpu_mlas"] == len(plan["nodes"]) > 0


def test_errors_exit_2_with_a_message(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert main(["run", str(bad)]) == 2
    assert "InvalidModelError" in capsys.readouterr().err


def test_console_script_entry_point():
    out = subprocess.run([sys.executable, "-m", "onnxplex", "providers"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "cpu_mlas" in out.stdout
