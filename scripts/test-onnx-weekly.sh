#!/usr/bin/env bash
# The ONNX node conformance suite of the newest onnx-weekly (the next opsets' cases), run by
# cpu_mlas in a virtual environment of its own; fails unless every case passes natively
# (tests/conformance/test_node_cases.py: each case with the reference fallback on, then all
# of them with it off, test_native_count). The project's main .venv keeps the released onnx.
#
#   bash scripts/test-onnx-weekly.sh            # the venv: .cache/onnx-weekly/venv
#   ONNX_WEEKLY_DIR=/tmp/ow bash scripts/...    # elsewhere
#
# Needs python3 (>= 3.11), a C++ toolchain and CMake (the project's extensions are built, in a
# build directory of the script's own, kept for the next run) and the package index. onnx-weekly
# and the test dependencies are refreshed when the venv's install is more than a day old, so
# the suite may lag the newest weekly by up to a day (set ONNX_WEEKLY_REFRESH=1 to refresh now).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${ONNX_WEEKLY_DIR:-.cache/onnx-weekly}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
venv=$dir/venv
stamp=$venv/.onnx-weekly-installed

if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv"
fi
py=$venv/bin/python
# The project is installed editable, built in this script's own build directory (the main
# venv's is left alone; incremental after the first run).
build=(--config-settings=build-dir="$dir/build/{wheel_tag}")

if [[ ${ONNX_WEEKLY_REFRESH:-0} == 1 || ! -f $stamp || pyproject.toml -nt $stamp
      || -n $(find "$stamp" -mmin +1440) ]]; then
    # The project and its dependencies (onnxscript's pull the released onnx, which provides
    # the same 'onnx' package as onnx-weekly: it is removed before onnx-weekly goes in), Pillow
    # for ImageDecoder, onnxruntime for the few cases whose expected values onnx releases
    # contradict (onnxplex.testing._cases.SUPERSEDED), pytest.
    "$py" -m pip install -q --upgrade pip
    "$py" -m pip install -q --upgrade "${build[@]}" -e '.[image]' pytest onnxruntime
    "$py" -m pip uninstall -q -y onnx onnx-weekly
    "$py" -m pip install -q --pre --upgrade onnx-weekly
    touch "$stamp"
else
    "$py" -m pip install -q --no-deps "${build[@]}" -e .
fi

"$py" - <<'EOF'
import onnx
from onnxplex.testing._cases import all_cases

print(f"onnx-weekly {onnx.__version__} (opset {onnx.defs.onnx_opset_version()}): "
      f"{len(all_cases())} node cases")
EOF
"$py" -m pytest -q -p no:cacheprovider tests/conformance/test_node_cases.py
