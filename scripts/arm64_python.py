"""Host-side helpers for the emulated aarch64 Python run of scripts/test-arm64.sh (target
``python``). Runs on the host's Python (3.11+, for tomllib); never imports onnxplex.

Subcommands (each prints its result on stdout or exits nonzero with a message on stderr):

  requirements PYPROJECT     the project's runtime dependencies plus the test extra's pytest,
                             one requirement per line (what the aarch64 site needs)
  build-requirement NAME PYPROJECT
                             NAME's requirement in [build-system].requires (e.g. pybind11)
  constraints                ``name==version`` for every distribution of the host's Python
                             (except onnxplex): the aarch64 site gets the versions the x86
                             suite runs with, where a wheel for aarch64 exists
  ext-suffix SYSROOT         EXT_SUFFIX of the sysroot's Python, read from its
                             _sysconfigdata__*.py without running it
  unpack-wheels WHEELS SITE  unzip every wheel in WHEELS into SITE (a fresh folder), moving
                             ``*.data/purelib`` and ``platlib`` into place; refuses a site
                             holding x86-64 ELF files
  install-tree REPO SO DEST [CORE_SO...]
                             lay out onnxplex in DEST (a fresh folder) as its wheel would be,
                             from pyproject.toml's ``[tool.scikit-build.wheel.packages]``
                             (``wheel.exclude`` honoured), put the extension module SO next to
                             the kleidi_sme2 provider's Python files (and each CORE_SO in the
                             onnxplex package itself), and write
                             ``onnxplex-<version>.dist-info`` (METADATA, entry_points.txt,
                             INSTALLER): the providers are found only through entry points
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

MODULE_PACKAGE = "onnxplex/providers/kleidi_sme2"
# What an install never holds, on top of pyproject's wheel.exclude (build leftovers).
ALWAYS_EXCLUDED = ("*/__pycache__/*", "*.pyc", "*.so")
ELF_MAGIC = b"\x7fELF"
EM_X86_64 = 62


def _fail(msg: str) -> None:
    sys.exit(f"arm64_python.py: {msg}")


def _pyproject(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _req_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def requirements(pyproject: Path) -> list[str]:
    project = _pyproject(pyproject)["project"]
    reqs = list(project.get("dependencies", []))
    tests = project.get("optional-dependencies", {}).get("test", [])
    pytest_reqs = [r for r in tests if _req_name(r) == "pytest"]
    return reqs + (pytest_reqs or ["pytest"])


def build_requirement(name: str, pyproject: Path) -> str:
    for req in _pyproject(pyproject).get("build-system", {}).get("requires", []):
        if _req_name(req) == name.lower():
            return req
    _fail(f"{name} is not in [build-system].requires of {pyproject}")
    return ""


def constraints() -> list[str]:
    pins = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "onnxplex":
            pins[name] = dist.version
    return [f"{n}=={v}" for n, v in sorted(pins.items())]


def ext_suffix(sysroot: Path) -> str:
    found = sorted(sysroot.glob("usr/lib/python3*/_sysconfigdata__*.py"))
    if not found:
        _fail(f"no _sysconfigdata__*.py under {sysroot}/usr/lib/python3*")
    tree = ast.parse(found[0].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "build_time_vars":
            suffix = ast.literal_eval(node.value).get("EXT_SUFFIX")
            if suffix:
                return suffix
    _fail(f"{found[0]} has no EXT_SUFFIX in build_time_vars")
    return ""


def _elf_machine(path: Path) -> int | None:
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != ELF_MAGIC:
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def unpack_wheels(wheels: Path, site: Path) -> list[str]:
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    names = []
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
        names.append(whl.name)
        # <dist>.data/{purelib,platlib}/... belong at the site root; scripts, headers and data
        # are not needed to import the package.
        for data in site.glob("*.data"):
            for sub in ("purelib", "platlib"):
                if (data / sub).is_dir():
                    shutil.copytree(data / sub, site, dirs_exist_ok=True)
            shutil.rmtree(data)
    if not names:
        _fail(f"no wheels in {wheels}")
    x86 = [str(p.relative_to(site)) for p in site.rglob("*")
           if p.is_file() and not p.is_symlink() and _elf_machine(p) == EM_X86_64]
    if x86:
        _fail(f"x86-64 binaries in the aarch64 site {site}: {', '.join(x86[:5])}")
    return names


def _excluded(rel: str, patterns: list[str]) -> bool:
    # fnmatch's "*" also matches "/", so "**/src/**" matches any path with a src component.
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch("/" + rel, p) for p in patterns)


def _metadata(project: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}",
             f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {r}" for r in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def _entry_points(project: dict) -> str:
    groups = dict(project.get("entry-points", {}))
    if project.get("scripts"):
        groups["console_scripts"] = project["scripts"]
    out = []
    for group, eps in groups.items():
        out.append(f"[{group}]")
        out += [f"{name} = {target}" for name, target in eps.items()]
        out.append("")
    return "\n".join(out)


def install_tree(repo: Path, module: Path, dest: Path, core: tuple[Path, ...] = ()) -> Path:
    config = _pyproject(repo / "pyproject.toml")
    project = config["project"]
    wheel = config.get("tool", {}).get("scikit-build", {}).get("wheel", {})
    packages = wheel.get("packages")
    if not isinstance(packages, dict) or not packages:
        _fail("pyproject.toml has no [tool.scikit-build.wheel.packages] table")
    exclude = list(wheel.get("exclude", [])) + list(ALWAYS_EXCLUDED)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # Parents before children (onnxplex before onnxplex/providers/...).
    for target, source in sorted(packages.items(), key=lambda kv: kv[0].count("/")):
        src = repo / source
        if not src.is_dir():
            _fail(f"wheel.packages: {source} is not a folder")
        for f in sorted(src.rglob("*")):
            rel = f"{target}/{f.relative_to(src).as_posix()}"
            if f.is_file() and not _excluded(rel, exclude):
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, dest / rel)
    if not (dest / MODULE_PACKAGE).is_dir():
        _fail(f"the install tree has no {MODULE_PACKAGE} (wheel.packages changed?)")
    shutil.copy2(module, dest / MODULE_PACKAGE / module.name)
    for so in core:
        shutil.copy2(so, dest / "onnxplex" / so.name)
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    info = dest / f"{name}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(_metadata(project))
    (info / "entry_points.txt").write_text(_entry_points(project))
    (info / "INSTALLER").write_text("scripts/test-arm64.sh\n")
    return info


def main(argv: list[str]) -> None:
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "requirements" and len(args) == 1:
        print("\n".join(requirements(Path(args[0]))))
    elif cmd == "build-requirement" and len(args) == 2:
        print(build_requirement(args[0], Path(args[1])))
    elif cmd == "constraints" and not args:
        print("\n".join(constraints()))
    elif cmd == "ext-suffix" and len(args) == 1:
        print(ext_suffix(Path(args[0])))
    elif cmd == "unpack-wheels" and len(args) == 2:
        print("\n".join(unpack_wheels(Path(args[0]), Path(args[1]))))
    elif cmd == "install-tree" and len(args) >= 3:
        print(install_tree(Path(args[0]), Path(args[1]), Path(args[2]),
                           tuple(Path(a) for a in args[3:])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
