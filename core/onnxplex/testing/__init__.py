"""``onnxplex.testing``: the provider author kit, an opt-in pytest plugin.

Enable it with ``pytest -p onnxplex.testing`` or a ``pytest_plugins = ["onnxplex.testing"]``
line in your root ``conftest.py``, and name the provider(s) under test::

    pytest -p onnxplex.testing --onnxplex-provider my_provider
    pytest -p onnxplex.testing --onnxplex-provider kleidi_sme2 \\
        --onnxplex-provider-option force_reference=1

or in the ini file (``[tool.pytest.ini_options]`` of pyproject.toml)::

    onnxplex_provider = ["my_provider"]
    onnxplex_provider_options = ["my_provider:threads=2"]

Each provider named inherits the contract tests and the ONNX node conformance cases it claims
(``onnxplex.testing::test_*[<provider>...]``); without a provider name the plugin adds nothing.
Options (command line, else ini ``onnxplex_<name>``):

``--onnxplex-provider NAME``            provider under test (repeatable; also comma-separated)
``--onnxplex-provider-option [NAME:]KEY=VALUE``  a provider option (without ``NAME:`` for all)
``--onnxplex-ops OP[,OP]``              consider only conformance cases with these op types
``--onnxplex-sample N``                 run N evenly spread claimed cases (0: none)
``--onnxplex-xfail "CASE: reason"``     a strict expected failure, with its reason

A ``onnxplex_probe_models`` fixture in the root conftest adds your own models (``Probe`` or
``onnx.ModelProto``) to the ones the contract tests hand the provider. After the run, the
terminal summary shows per provider how many cases it claimed and declined, and the most
common decline reasons. See docs/writing-a-provider.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ._kit import KIT_KEY, KitState, Settings, Target
from ._probes import PROBES, Probe

__all__ = ["Probe", "PROBES", "Target", "onnxplex_probe_models"]

_OPTIONS = (
    # (command line, ini name, ini type, help)
    ("--onnxplex-provider", "onnxplex_provider", "linelist",
     "execution provider to run the onnxplex contract and conformance tests on (repeatable)"),
    ("--onnxplex-provider-option", "onnxplex_provider_options", "linelist",
     "provider option [NAME:]KEY=VALUE for the providers under test (repeatable)"),
    ("--onnxplex-ops", "onnxplex_ops", "linelist",
     "consider only ONNX node cases with these op types (comma-separated, repeatable)"),
    ("--onnxplex-xfail", "onnxplex_xfail", "linelist",
     "'CASE: reason': a node case expected to fail (strict; repeatable)"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("onnxplex", "onnxplex provider author kit (onnxplex.testing)")
    for flag, ini, kind, help_text in _OPTIONS:
        group.addoption(flag, action="append", default=[], dest=ini, help=help_text)
        parser.addini(ini, help_text, type=kind, default=[])
    group.addoption("--onnxplex-sample", default=None, dest="onnxplex_sample", metavar="N",
                    help="run only N evenly spread claimed node cases (0: no conformance)")
    parser.addini("onnxplex_sample", "like --onnxplex-sample", default="")


def _setting(config: pytest.Config, name: str) -> Any:
    given = config.getoption(name)
    return given if given not in (None, []) else config.getini(name)


def pytest_configure(config: pytest.Config) -> None:
    try:
        settings = Settings.parse(*(_setting(config, name) for name in (
            "onnxplex_provider", "onnxplex_provider_options", "onnxplex_ops", "onnxplex_sample",
            "onnxplex_xfail")))
    except ValueError as e:
        raise pytest.UsageError(f"onnxplex.testing: {e}") from None
    from .._errors import OnnxplexError
    from ..framework.plugins import provider_entry

    for name in settings.providers:
        try:   # a name nobody registered: a usage error now, not an INTERNALERROR at collection
            provider_entry(name)
        except OnnxplexError as e:
            raise pytest.UsageError(f"onnxplex.testing: --onnxplex-provider {name}: {e}") \
                from None
    config.stash[KIT_KEY] = KitState(settings)


@pytest.fixture
def onnxplex_probe_models() -> list[Any]:
    """Extra models (``Probe`` or ``onnx.ModelProto``) for the contract tests; override this
    fixture in your root conftest.py to add models your provider runs."""
    return []


class _KitModule(pytest.Module):
    """The kit's test module, collected from the imported module object (so neither the
    rootdir nor the import mode matters)."""

    def _getobj(self) -> Any:
        from . import _contract

        return _contract


def _items(node: pytest.Collector) -> list[pytest.Item]:
    out: list[pytest.Item] = []
    for child in node.collect():
        if isinstance(child, pytest.Item):
            out.append(child)
        else:
            out.extend(_items(child))
    return out


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, so those apply to the kit's tests
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    kit = config.stash.get(KIT_KEY, None)
    if kit is None or not kit.targets:
        return
    from . import _contract

    module = _KitModule.from_parent(session, path=Path(_contract.__file__),
                                    name="onnxplex.testing", nodeid="onnxplex.testing")
    new = _items(module)
    for item in new:
        config.hook.pytest_itemcollected(item=item)
    items[:0] = new


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    kit = metafunc.config.stash.get(KIT_KEY, None)
    if kit is None or "onnxplex_kit_target" not in metafunc.fixturenames:
        return
    if "onnxplex_kit_case" not in metafunc.fixturenames:
        metafunc.parametrize("onnxplex_kit_target", kit.targets, ids=[t.id for t in kit.targets])
        return
    params = []
    for target in kit.targets:
        if kit.settings.sample == 0:
            params.append(pytest.param(target, None, id=f"{target.id}-none", marks=pytest.mark.skip(
                reason="conformance cases not run (sample 0)")))
            continue
        verdicts = kit.verdicts(target)
        for name in verdicts.selected:
            marks = []
            if name in kit.settings.xfail:
                marks.append(pytest.mark.xfail(reason=kit.settings.xfail[name], strict=True))
            params.append(pytest.param(target, name, id=f"{target.id}-{name}", marks=marks))
        if not verdicts.selected:
            why = (f"{target.id} is not available here: {verdicts.unavailable}"
                   if verdicts.unavailable else
                   f"{target.id} claims none of the {verdicts.considered} node cases considered")
            params.append(pytest.param(target, None, id=f"{target.id}-none",
                                       marks=pytest.mark.skip(reason=why)))
    metafunc.parametrize(("onnxplex_kit_target", "onnxplex_kit_case"), params)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    kit = config.stash.get(KIT_KEY, None)
    if kit is None or not kit.targets:
        return
    write = terminalreporter.write_line
    terminalreporter.section("onnxplex.testing")
    s = kit.settings
    filters = [f"ops {','.join(sorted(s.ops))}"] if s.ops else []
    if s.sample is not None:
        filters.append(f"sample {s.sample}")
    for target, v in kit.computed():
        if v.unavailable:
            write(f"{target.id}: not available here: {v.unavailable}")
            continue
        ran = len(v.selected)
        write(f"{target.id}: node cases considered {v.considered}"
              + (f" ({'; '.join(filters)})" if filters else "")
              + f": claimed {len(v.claimed)}, declined {len(v.declined)}"
              + (f", get_capability raised on {len(v.errors)}" if v.errors else "")
              + (f", unloadable {v.unloadable}" if v.unloadable else "")
              + f"; ran {ran}")
        for reason, count in v.top_reasons():
            write(f"    declined {count:>5} x  {reason}")
    if not kit.computed() and s.sample == 0:
        write("node conformance not run (sample 0)")
