"""The core's folders are its layers, and no module imports from a layer above its own.

    base (_errors, _dtypes, _records, _sparse, _lazy_imports, _version, the native _runloop
      and _mempattern)
      < graph < framework < optimizer < session (and capi) < tools
      < the package itself (onnxplex/__init__, backend, datasets, __main__: the public API)
      < plugins (the provider kit onnxplex.testing, the bundled providers' namespace)

Every import counts, also one inside a function (a deferred import is still a dependency, and
an upward one is how the session <-> optimizer cycle had crept in). Plugins sit above the API
they use, as a third party's do (the bundled providers' own modules live outside core/).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "core" / "onnxplex"

LAYERS = ["base", "graph", "framework", "optimizer", "session", "tools", "api", "plugins"]
BASE = {"_errors", "_dtypes", "_records", "_sparse", "_lazy_imports", "_version", "_runloop",
        "_mempattern"}
PACKAGES = {"graph": "graph", "framework": "framework", "optimizer": "optimizer",
            "session": "session", "capi": "session", "tools": "tools", "testing": "plugins",
            "providers": "plugins", "backend": "api", "datasets": "api"}


def layer(module: str) -> str:
    """The layer of an onnxplex module (dotted name without the 'onnxplex.' prefix)."""
    if module in ("", "__init__", "backend", "__main__"):
        return "api"
    head = module.split(".")[0]
    if head in PACKAGES:
        return PACKAGES[head]
    if head in BASE:
        return "base"
    raise AssertionError(f"onnxplex.{module} belongs to no layer: add it to tests/test_layers.py")


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def imported(module: str, path: Path) -> list[tuple[str, int]]:
    """The onnxplex modules ``module`` imports (without the prefix), with their lines."""
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = [p for p in package if p]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "onnxplex" or alias.name.startswith("onnxplex."):
                    found.append((alias.name[len("onnxplex."):], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "onnxplex"
                                  or node.module.startswith("onnxplex.")):
                target = node.module[len("onnxplex."):] if node.module != "onnxplex" else ""
            else:
                continue
            if target == "" or (CORE / Path(*target.split("."))).is_dir():
                # `from . import graph` / `from .graph import model`: the names may be modules
                for alias in node.names:
                    sub = f"{target}.{alias.name}" if target else alias.name
                    parts = sub.split(".")
                    is_mod = (CORE.joinpath(*parts).with_suffix(".py").exists()
                              or CORE.joinpath(*parts).is_dir()
                              or CORE.joinpath(*parts).with_suffix(".pyi").exists())
                    found.append((sub if is_mod else target, node.lineno))
            else:
                found.append((target, node.lineno))
    return found


def test_every_module_has_a_layer():
    for module, _ in modules():
        layer(module)


@pytest.mark.parametrize("module, path", modules(), ids=[m or "__init__" for m, _ in modules()])
def test_no_module_imports_from_a_layer_above(module, path):
    mine = LAYERS.index(layer(module))
    for target, line in imported(module, path):
        theirs = LAYERS.index(layer(target))
        assert theirs <= mine, (
            f"{path.relative_to(CORE.parent)}:{line}: onnxplex.{module} ({LAYERS[mine]}) "
            f"imports onnxplex.{target or '(the package)'} ({LAYERS[theirs]}), a layer above")


def test_the_checker_sees_an_upward_import(tmp_path):
    """The check itself can fail: an optimizer module importing the session is caught."""
    fake = tmp_path / "mod.py"
    fake.write_text("def f():\n    from ..session.session import InferenceSession\n")
    found = imported("optimizer.mod", fake)
    assert found == [("session.session", 2)]
    assert LAYERS.index(layer(found[0][0])) > LAYERS.index(layer("optimizer.mod"))
