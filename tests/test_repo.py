"""The README's promises: CI runs exactly its test command; the main job script exists."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_ci_runs_the_readme_test_command():
    install_and_run, test = _readme_commands()[:2]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in [line.strip() for line in ci]
    script = install_and_run.split("&&")[1].split()[1]
    assert (ROOT / script).is_file()
