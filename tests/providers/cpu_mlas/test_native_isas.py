"""cpu_mlas's per-ISA C++ kernels that the Python module dispatches by CPU (so a test run
sees only this CPU's best variant), built here for every ISA this CPU can run and checked
against plain loops: tests/native/x86_dwconv_test.cpp."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "providers" / "cpu_mlas" / "src"
TEST = ROOT / "tests" / "native" / "x86_dwconv_test.cpp"

_ISAS = {
    "portable": ([], None),
    "avx2": (["-mavx2", "-mfma"], "avx2"),
    "avx512": (["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"], "avx512f"),
}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 kernels")
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("isa", list(_ISAS))
def test_native_kernels_per_isa(isa, tmp_path):
    flags, cpu_flag = _ISAS[isa]
    if cpu_flag is not None and cpu_flag not in _cpu_flags():
        pytest.skip(f"this CPU has no {cpu_flag}")
    exe = tmp_path / f"dwconv_{isa}"
    subprocess.run(["g++", "-O2", "-std=c++17", *flags, f"-I{SRC}", str(TEST), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == "0 mismatches"
