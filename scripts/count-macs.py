#!/usr/bin/env python3
"""Work per instruction of the Kleidi micro-kernels, measured under QEMU (which gives no timing).

    scripts/count-macs.py [--configs NAME ...] [--families F ...] [--all]
                          [--sizes MxNxK ...] [--m M --n N --k K] [--jobs J] [--no-build]

For each family x variant x CPU configuration it runs tests/native/kleidi_bench (cross-compiled
for aarch64 with scripts/aarch64-clang19.cmake, like scripts/test-arm64.sh) under qemu-aarch64
with `-one-insn-per-tb -d nochain,exec`: every executed guest instruction is then its own
translation block, executed unchained, and logged as one "Trace" line (QEMU 11 format:
`Trace <cpu>: <host tb> [<flags>/<guest pc>/<cflags>/<..>] <symbol>`). The static QEMU Debian
ships cannot load TCG plugins (no -plugin option), hence the exec log. The log is streamed
through a pipe and counted per guest PC, never written to disk.

    instructions per call = count(--calls 2) - count(--calls 1)   (start-up and packing cancel)
    MACs per instruction  = M * N * K / instructions per call

The per-PC counts are mapped to mnemonics with aarch64-linux-gnu-objdump, which gives the number
of executed multiply-accumulate instructions per call (FMOPA/SMOPA, FMLA, SDOT, SMMLA, ...):
"MAC-insn share" is their fraction of the call's instructions, and "ideal" is the MACs done by
one of the dominant one (e.g. SME2 FMOPA fp32: (SVL/32)^2; SMMLA: 32; SDOT: 16; NEON FMLA .4s: 4;
NEON FMLA .8h (fp16): 8; scalar reference: 1).
ratio = measured / ideal = MAC-insn share x (useful MACs / issued MACs).

Problems: 64 x 64 x 256 and 256 x 256 x 1024 (--sizes; --m/--n/--k for one; the scalar
reference only at the first), M and N rounded
up to the variant's tile (SME2 tiles grow with the vector length), K a multiple of 32 for
int4; igemm_f32 splits K into chunks of 32. The "mix" column splits each call's instructions
into multiply-accumulates, loads, stores and the rest. Default configurations
measure each variant once where it is the natural pick: SME2 at 128/512/2048-bit SVL, i8mm and
dotprod on `max,sme=off`, NEON fp32 and the reference on cortex-a72 (instruction counts of
non-SME code do not depend on the CPU model), NEON fp16 on `max,sme=off` (cortex-a72 has no
FEAT_FP16); --all runs every variant each CPU supports.

Needs the toolchain and qemu that scripts/test-arm64.sh installs/caches (run
`scripts/test-arm64.sh arm_smoke` once), or ONNXPLEX_QEMU_AARCH64. Output: a markdown table on
stdout, also written with per-run summaries under .cache/count-macs/ (git-ignored).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "count-macs"
BUILD = CACHE / "build"
QEMU_DEFAULT = REPO / ".cache" / "arm64" / "qemu" / "qemu-aarch64"

# name -> (qemu -cpu, SVL bytes or None, variants measured by default)
CONFIGS = {
    "sme2-vl128": ("max,sme-default-vector-length=16", 16, ["sme2"]),
    "sme2-vl256": ("max,sme-default-vector-length=32", 32, ["sme2"]),
    "sme2-vl512": ("max,sme-default-vector-length=64", 64, ["sme2"]),
    "sme2-vl1024": ("max,sme-default-vector-length=128", 128, ["sme2"]),
    "sme2-vl2048": ("max,sme-default-vector-length=256", 256, ["sme2"]),
    "i8mm-nosme": ("max,sme=off", None, ["i8mm", "dotprod"]),
    "neon-a72": ("cortex-a72", None, ["neon", "reference"]),
}
DEFAULT_CONFIGS = ["sme2-vl128", "sme2-vl512", "sme2-vl2048", "i8mm-nosme", "neon-a72"]
SIZES = [(64, 64, 256), (256, 256, 1024)]
# what each CPU can run, for --all
SUPPORTED = {
    "sme2": ["sme2", "i8mm", "dotprod", "neon", "reference"],
    "i8mm-nosme": ["i8mm", "dotprod", "neon", "reference"],
    "neon-a72": ["neon", "reference"],
}
FAMILIES = ["gemm_f32", "igemm_f32", "qsi8cx", "qsi4c32", "gemm_f16"]
# Per-family exceptions to a configuration's default variants: cortex-a72 (Armv8.0) has no
# FEAT_FP16, so the fp16 NEON variant is measured on max,sme=off, where dispatch picks it.
FAMILY_DEFAULTS = {"gemm_f16": {"i8mm-nosme": ["neon"], "neon-a72": ["reference"]}}
VARIANTS = ["sme2", "i8mm", "dotprod", "neon", "reference"]


def log(msg: str) -> None:
    print(f"[count-macs] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- build
def build() -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    cfg = ["cmake", "-S", str(REPO), "-B", str(BUILD), "-G", "Ninja",
           f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'scripts' / 'aarch64-clang19.cmake'}",
           "-DCMAKE_BUILD_TYPE=Release", "-DONNXPLEX_WERROR=ON",
           "-DONNXPLEX_BUILD_PYTHON_MODULE=OFF", "-DONNXPLEX_BUILD_NATIVE_TESTS=ON"]
    for cmd in (cfg, ["cmake", "--build", str(BUILD), "--target", "kleidi_bench"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.stderr.write(r.stdout + r.stderr)
            sys.exit(f"count-macs: {' '.join(cmd[:3])} failed")
    return BUILD / "kleidi_bench"


# ------------------------------------------------------------------------------- disassembly
# mnemonic -> MACs per instruction, as a function of (operand text, SVL bytes)
def macs_of(mnemonic: str, ops: str, svl: int | None) -> int:
    lanes32 = (svl or 16) * 8 // 32  # fp32 lanes of a streaming vector
    if mnemonic in ("fmopa", "bfmopa") and ".s" in ops:
        return lanes32 * lanes32 * (2 if ".h" in ops else 1)
    if mnemonic in ("smopa", "umopa", "sumopa", "usmopa"):
        return lanes32 * lanes32 * (4 if ".b" in ops else 2)
    if mnemonic in ("sdot", "udot", "usdot", "sudot"):
        if ops.startswith("v"):
            return 16 if ".4s" in ops else 8
        return lanes32 * 4  # SVE / SME2 single vector (multi-vector forms: approximate)
    if mnemonic in ("smmla", "ummla", "usmmla"):
        return 32 if ops.startswith("v") else 32 * (svl or 16) // 16
    if mnemonic in ("fmla", "fmls"):
        if ops.startswith("v"):
            lanes = {".8h": 8, ".4s": 4, ".4h": 4, ".2": 2}
            return next((n for suffix, n in lanes.items() if suffix in ops), 1)
        if ops.startswith("z") or ops.startswith("za"):
            return lanes32
        return 1
    if mnemonic in ("fmadd", "fmsub", "fnmadd", "fnmsub"):
        return 1
    return 0


_disasm_cache: dict[Path, dict[int, tuple[str, str]]] = {}


def disassemble(exe: Path) -> dict[int, tuple[str, str]]:
    if exe not in _disasm_cache:
        out = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(exe)],
                             capture_output=True, text=True, check=True).stdout
        table = {}
        line_re = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
        for line in out.splitlines():
            m = line_re.match(line)
            if m:
                table[int(m.group(1), 16)] = (m.group(2), m.group(3))
        _disasm_cache[exe] = table
    return _disasm_cache[exe]


# --------------------------------------------------------------------------------------- run
def run_counted(qemu: str, cpu: str, exe: Path,
                args: list[str]) -> tuple[str, int, collections.Counter]:
    """Runs exe under qemu with exec tracing; returns (stdout, rc, per-PC counts)."""
    cmd = [qemu, "-cpu", cpu, "-one-insn-per-tb", "-d", "nochain,exec", str(exe), *args]
    counts: collections.Counter = collections.Counter()
    out_path = CACHE / "logs" / f"stdout.{os.getpid()}.{time.monotonic_ns()}"
    with open(out_path, "wb") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             bufsize=1 << 20)
        assert p.stderr is not None
        other = []
        for line in p.stderr:
            if line.startswith(b"Trace "):
                counts[line.split(b"/", 2)[1]] += 1
            elif len(other) < 20:
                other.append(line.decode(errors="replace"))
        rc = p.wait()
    stdout = out_path.read_text() + "".join(other)
    out_path.unlink()
    return stdout, rc, counts


def measure(qemu: str, exe: Path, config: str, family: str, variant: str, mnk) -> dict:
    cpu, svl, _ = CONFIGS[config]
    m, n, k = mnk
    base = ["--family", family, "--variant", variant, "--m", str(m), "--n", str(n), "--k", str(k),
            "--round-to-tile"]
    t0 = time.monotonic()
    runs = {}
    for calls in (1, 2):
        stdout, rc, counts = run_counted(qemu, cpu, exe, base + ["--calls", str(calls)])
        if rc == 2:
            return {"skip": stdout.strip().splitlines()[-1] if stdout.strip() else "rc 2"}
        if rc != 0:
            return {"error": f"rc {rc}: {stdout.strip()[-300:]}"}
        line = next(x for x in stdout.splitlines() if x.startswith("kleidi_bench "))
        info = dict(kv.split("=", 1) for kv in line.split()[1:])
        runs[calls] = (info, counts)
    info, c1 = runs[1]
    _, c2 = runs[2]
    diff = c2.copy()
    diff.subtract(c1)
    insns = sum(c2.values()) - sum(c1.values())
    dis = disassemble(exe)
    mac_insns = collections.Counter()
    mix: collections.Counter = collections.Counter()
    issued_macs = 0
    for pc, cnt in diff.items():
        if cnt <= 0:
            continue
        mn, ops = dis.get(int(pc, 16), ("?", ""))
        per = macs_of(mn, ops, svl)
        if per:
            mac_insns[(mn, per)] += cnt
            issued_macs += per * cnt
        mix[kind_of(mn, ops, per)] += cnt
    M, N, K = int(info["m"]), int(info["n"]), int(info["k"])
    res = {
        "family": family, "variant": variant, "config": config, "kernel": info["kernel"],
        "m": M, "n": N, "k": K, "mr": int(info["mr"]), "nr": int(info["nr"]),
        "kr": int(info["kr"]), "insns": insns, "macs": M * N * K,
        "mac_insns": sum(mac_insns.values()), "issued_macs": issued_macs,
        "dominant": mac_insns.most_common(1)[0][0] if mac_insns else None,
        "mix": {kind: mix[kind] for kind in KINDS},
        "total_c1": sum(c1.values()), "seconds": time.monotonic() - t0,
    }
    summary = CACHE / "logs" / f"{family}.{variant}.{config}.txt"
    with open(summary, "w") as f:
        f.write(f"{res}\n# executed MAC instructions per call: {dict(mac_insns)}\n")
        f.write("# hottest PCs of one call (count, pc, insn):\n")
        for pc, cnt in diff.most_common(40):
            mn, ops = dis.get(int(pc, 16), ("?", ""))
            f.write(f"{cnt:10d} {pc.decode()} {mn} {ops}\n")
    return res


KINDS = ("MAC", "load", "store", "other")


def kind_of(mnemonic: str, operands: str, macs: int) -> str:
    """An executed instruction's kind for the instruction mix: a multiply-accumulate (what
    macs_of counts), a load or a store (of any width: LDR/LDP/LD1*/LD1R*, STR/STP/ST1*), or
    anything else (address arithmetic, branches, moves out of ZA, conversions, the output
    stage's arithmetic). binutils' objdump prints SME2's multi-vector LD1/ST1 as ``.inst``:
    those are told apart by their encoding (0xa0/0xa1 in the top byte, bit 21 set for a
    store: 0xa040c220 is ``ld1w {z0.s-z3.s}, pn8/z, [x17]``, 0xa060c220 its ST1W)."""
    if macs:
        return "MAC"
    m = mnemonic.lower()
    if m == ".inst":
        try:
            word = int(operands.split()[0], 16)
        except (IndexError, ValueError):
            return "other"
        if word >> 24 in (0xA0, 0xA1):
            return "store" if word & (1 << 21) else "load"
        return "other"
    if m.startswith(("ld", "prf")):
        return "load"
    if m.startswith("st"):
        return "store"
    return "other"


def parse_size(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is MxNxK, not {text!r}") from None
    return m, n, k


def fmt(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    ap.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    ap.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    ap.add_argument("--all", action="store_true", help="every variant each CPU supports")
    ap.add_argument("--sizes", nargs="+", type=parse_size, default=SIZES,
                    help="problem sizes MxNxK (default: 64x64x256 256x256x1024)")
    ap.add_argument("--m", type=int, help="one size M x N x K instead of --sizes")
    ap.add_argument("--n", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if a.m or a.n or a.k:
        a.sizes = [(a.m or 64, a.n or 64, a.k or 256)]

    qemu = os.environ.get("ONNXPLEX_QEMU_AARCH64") or str(QEMU_DEFAULT)
    if not Path(qemu).exists():
        sys.exit(f"count-macs: no {qemu}: run scripts/test-arm64.sh arm_smoke once "
                 "(it fetches qemu-aarch64 11) or set ONNXPLEX_QEMU_AARCH64")
    (CACHE / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    exe = BUILD / "kleidi_bench" if a.no_build else build()
    disassemble(exe)
    version = subprocess.run([qemu, "--version"], capture_output=True, text=True).stdout
    log(f"{version.splitlines()[0]}; {exe.relative_to(REPO)}")

    jobs = []
    for config in a.configs:
        if a.all:
            vs = SUPPORTED["sme2" if config.startswith("sme2") else config]
        for family in a.families:
            if not a.all:
                vs = FAMILY_DEFAULTS.get(family, {}).get(config, CONFIGS[config][2])
            for v in vs:
                if v in a.variants:
                    # (the scalar reference only at the first size: at 256 x 256 x 1024 it
                    # executes ~10^9 instructions, hours under the per-instruction log)
                    sizes = a.sizes[:1] if v == "reference" else a.sizes
                    jobs += [(config, family, v, size) for size in sizes]
    results = []
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futs = {pool.submit(measure, qemu, exe, c, f, v, size): (c, f, v)
                for c, f, v, size in jobs}
        for fut in cf.as_completed(futs):
            c, f, v = futs[fut]
            r = fut.result()
            if "skip" in r:
                log(f"skip {f} {v} on {c}: {r['skip']}")
            elif "error" in r:
                log(f"ERROR {f} {v} on {c}: {r['error']}")
            else:
                log(f"{f} {v} on {c}: {r['insns']} insns/call, {r['seconds']:.1f} s")
                results.append(r)

    order = {c: i for i, c in enumerate(CONFIGS)}
    results.sort(key=lambda r: (FAMILIES.index(r["family"]), VARIANTS.index(r["variant"]),
                                order[r["config"]], r["macs"]))
    lines = [
        "| family | variant | CPU config | tile (mr x nr, kr) | M x N x K | instr/call | "
        "MACs/instr measured | MAC-insn share | ideal (MACs per MAC insn) | ratio | "
        "mix MAC / load / store / other |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        measured = r["macs"] / r["insns"]
        if r["variant"] == "reference":
            ideal, ideal_txt = 1, "1 (scalar)"
        elif r["dominant"]:
            (mn, per) = r["dominant"]
            ideal, ideal_txt = per, f"{per} ({mn.upper()})"
        else:
            ideal, ideal_txt = None, "?"
        share = (f"{100 * r['mac_insns'] / r['insns']:.0f}%"
                 if r["insns"] and r["variant"] != "reference" else "-")
        ratio = f"{measured / ideal:.2f}" if ideal else "-"
        total = sum(r["mix"].values()) or 1
        mix = " / ".join(f"{100 * r['mix'][kind] / total:.0f}%" for kind in KINDS)
        lines.append(
            f"| {r['family']} | {r['variant']} | {r['config']} | "
            f"{r['mr']} x {r['nr']}, {r['kr']} | "
            f"{r['m']} x {r['n']} x {r['k']} | {r['insns']} | {fmt(measured)} | {share} | "
            f"{ideal_txt} | {ratio} | {mix} |")
    table = "\n".join(lines)
    print(table)
    (CACHE / "table.md").write_text(table + "\n")
    log(f"done in {time.monotonic() - t0:.0f} s; table in "
        f"{(CACHE / 'table.md').relative_to(REPO)}, per-run summaries in "
        f"{(CACHE / 'logs').relative_to(REPO)}")


if __name__ == "__main__":
    main()
