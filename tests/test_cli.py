"""The onnxplex command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from graphs import small_cnn

from onnxplex.tools.cli import main


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


# ---------------------------------------------------------------- mistakes: one line, status 2


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    return path


def _fails(argv, capsys) -> str:
    """Run the command expecting a user mistake: status 2, nothing on stdout, and on stderr
    exactly one line, ``onnxplex: error: ...`` (no traceback, no usage block)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:   # argparse's own checks exit
        code = e.code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("onnxplex: error: "), err
    assert "Traceback" not in err and not out.strip(), (out, err)
    return lines[0]


def test_missing_inputs_file(model_file, tmp_path, capsys):
    line = _fails(["run", model_file, "--inputs", tmp_path / "nosuch.npz"], capsys)
    assert "--inputs" in line and "nosuch.npz" in line


def test_inputs_file_that_is_not_npz(model_file, tmp_path, capsys):
    text = tmp_path / "feeds.txt"
    text.write_text("x = 1\n")
    assert "is not a .npz file" in _fails(["run", model_file, "--inputs", text], capsys)
    pickled = tmp_path / "obj.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    assert "not loaded" in _fails(["perf", model_file, "--inputs", pickled], capsys)


def test_npy_inputs(model_file, tmp_path, capsys):
    """A .npy file is the one input of a one-input model; with more inputs, a clear error."""
    one = tmp_path / "x.npy"
    np.save(one, np.ones((2, 3, 16, 16), np.float32))
    assert main(["run", str(model_file), "--inputs", str(one)]) == 0
    assert "output y: float32[2, 10]" in capsys.readouterr().out
    two = tmp_path / "two.onnx"
    x, y = (onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in "xy")
    z = onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2])
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "y"], ["z"])], "g", [x, y], [z])), two)
    line = _fails(["run", two, "--inputs", one], capsys)
    assert "one unnamed array (.npy)" in line and "2 inputs (x, y)" in line


def test_output_into_a_missing_folder(model_file, tmp_path, capsys):
    for argv in (["partition", model_file, "-o", tmp_path / "no" / "report.txt"],
                 ["run", model_file, "--save", tmp_path / "no" / "out.npz"],
                 ["perf", model_file, "--profile", tmp_path / "no" / "p.json"]):
        assert "no folder" in _fails(argv, capsys)


@pytest.mark.parametrize("argv, says", [
    (["run", "{model}", "--dim", "-1"], "argument --dim: must be at least 0, not -1"),
    (["run", "{model}", "--repeat", "0"], "argument --repeat: must be at least 1, not 0"),
    (["run", "{model}", "--seed", "x"], "argument --seed: invalid int value"),
    (["perf", "{model}", "-r", "0"], "argument -r: must be at least 1"),
    (["perf", "{model}", "-t", "0"], "argument -t: must be greater than 0"),
    (["perf", "{model}", "-x", "-2"], "argument -x: must be at least 0"),
    (["profile", "{model}", "--top", "0"], "argument --top: must be at least 1"),
    (["run", "{folder}/nosuch.onnx"], "argument model: no such file"),
    (["run", "{folder}"], "is a directory"),
    (["nosuch"], "invalid choice: 'nosuch'"),
    ([], "the following arguments are required: COMMAND"),
])
def test_bad_arguments(argv, says, model_file, capsys):
    argv = [a.format(model=model_file, folder=model_file.parent) for a in argv]
    line = _fails(argv, capsys)
    assert says in line and "(see onnxplex" in line


def test_refused_model_and_provider(model_file, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert "InvalidModelError" in _fails(["run", bad], capsys)
    assert "unknown execution provider 'nosuch'" in _fails(
        ["run", model_file, "--providers", "nosuch"], capsys)
    junk = tmp_path / "profile.json"
    junk.write_text("not json")
    assert "cannot read profile" in _fails(["profile", junk], capsys)


def test_unavailable_provider_warns_once(model_file):
    """One line (the warning, as a log line), not a log line and a RuntimeWarning with its
    source line too. In a fresh interpreter: pytest's own capture of warnings and logs would
    hide what a user sees."""
    import onnxplex

    avail = onnxplex.get_available_providers()
    missing = [p for p in onnxplex.get_all_providers() if p not in avail]
    if not missing:
        pytest.skip("every registered provider is available on this machine")
    out = subprocess.run([sys.executable, "-m", "onnxplex", "run", str(model_file),
                          "--providers", f"{missing[0]},cpu_mlas"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"WARNING onnxplex: provider '{missing[0]}' "
                                                   "requested but not available"), out.stderr


def test_empty_output_shows_dtype_and_shape(model_file, capsys):
    assert main(["run", str(model_file), "--dim", "0"]) == 0
    assert "output y: float32[0, 10] (empty)" in capsys.readouterr().out


def test_version(capsys):
    import onnxplex

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"onnxplex {onnxplex.__version__} (onnx ")


def test_every_argument_has_help_with_its_default():
    from onnxplex.tools.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in [("onnxplex", parser), *commands.items()]:
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, (name, action.dest)
        text = sub.format_help()
        for action in sub._actions:
            if action.option_strings and action.default not in (None, False, [],
                                                                argparse.SUPPRESS):
                assert f"(default: {action.default})" in " ".join(text.split()), \
                    (name, action.dest)


def test_closed_pipe_ends_quietly(model_file):
    """``onnxplex partition m.onnx | head``: the reader goes away before the report is
    written (closed here before the child has even imported onnxplex)."""
    proc = subprocess.Popen([sys.executable, "-m", "onnxplex", "partition", str(model_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_perf_profile_file(model_file, tmp_path, capsys):
    path = tmp_path / "perf.json"
    assert main(["perf", str(model_file), "-r", "3", "--profile", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    events = json.loads(path.read_text())
    nodes = [e for e in events if e.get("cat") == "Node"]
    assert len({e["args"]["op_name"] for e in nodes}) >= 3   # the model's ops, each run
    assert not list(tmp_path.glob("perf.json.part*"))
    assert main(["profile", str(path)]) == 0
    assert "slowest nodes" in capsys.readouterr().out


def test_profile_does_not_cut_names(tmp_path, capsys):
    long = "encoder/layer_11/attention/self/query/MatMul_with_a_long_tail_" + "x" * 40
    events = [{"cat": "Node", "name": f"{long}_kernel_time", "ph": "X", "ts": 10, "dur": 7,
               "pid": 1, "tid": 1, "args": {"op_name": "MatMul", "provider": "cpu_mlas"}}]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    assert main(["profile", str(path)]) == 0
    assert long in capsys.readouterr().out
