"""The zoo runner's kleidi_sme2 column (``benchmarks/zoo/run.py``): where the provider has no
kernels for the CPU (x86) the configuration ``kleidi_sme2,cpu_mlas`` runs its portable
reference kernels (``force_reference=1`` added, in the label), is checked against onnxruntime
and is not timed (its cells say ``ref``)."""

from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxplex.framework.plugins import provider_entry

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.zoo import run  # noqa: E402

pytest.importorskip("onnxruntime")
needs_reference = pytest.mark.skipif(
    not provider_entry("kleidi_sme2").availability({"force_reference": True}).ok,
    reason="the kleidi_sme2 extension is not built")
RNG = np.random.default_rng(3)


def test_options_in_a_configuration():
    assert run.provider_list("kleidi_sme2:force_reference=1:max_variant=neon,cpu_mlas") == [
        ("kleidi_sme2", {"force_reference": "1", "max_variant": "neon"}), "cpu_mlas"]
    assert run.is_reference("kleidi_sme2:force_reference=1,cpu_mlas")
    assert not run.is_reference("xnnpack_like,cpu_mlas")
    assert run.resolve_config("xnnpack_like,cpu_mlas", say=False) == "xnnpack_like,cpu_mlas"


@needs_reference
def test_reference_column_is_checked_not_timed(tmp_path, capsys):
    natively = provider_entry("kleidi_sme2").availability().ok
    config = run.resolve_config("kleidi_sme2,cpu_mlas")
    if natively:   # an Arm CPU with kernels: the configuration is timed as it is
        assert config == "kleidi_sme2,cpu_mlas"
        return
    assert config == "kleidi_sme2:force_reference=1,cpu_mlas"
    assert "portable reference kernels" in capsys.readouterr().err
    w = (RNG.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32)
    b = (RNG.standard_normal((8 * 6 * 6, 10)) * 0.1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
         helper.make_node("Flatten", ["c"], ["f"]),
         helper.make_node("MatMul", ["f", "b"], ["y"])], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    path = tmp_path / "small.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              path)
    np.savez(tmp_path / "small.inputs.npz", x=RNG.standard_normal((1, 4, 6, 6)).astype(
        np.float32))
    row = run.run_model(path, [1], [config], runs=3, warmups=0, creations=1, budget=1.0)
    key = f"onnxplex[{config}]"
    res = row["threads"]["1"]
    assert res["match"][key] and not row["errors"], (res, row["errors"])
    assert key not in res["median_s"] and key not in row.get("creation_s", {})
    md = run.report([row], [1], [config], Namespace(runs=3, warmups=0, creations=1))
    assert "| ref |" in md and "speed not measured" in md
