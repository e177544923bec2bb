"""The kit's state: which providers are under test, with which options, and which ONNX node
cases each one claims (decided once per provider, when the conformance tests are collected)."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest

import onnxplex
from onnxplex import GraphView, ProviderContext, load_model
from onnxplex.framework.plugins import DEFAULT_PROVIDER, ProviderEntry, provider_entry

from ._probes import Probe

__all__ = ["KIT_KEY", "KitState", "Settings", "Target", "Verdicts", "as_probe", "classify",
           "select_cases"]


@dataclass(frozen=True)
class Settings:
    """What the author asked for (command line, else ini file)."""

    providers: tuple[str, ...] = ()
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    ops: frozenset[str] = frozenset()
    sample: int | None = None
    xfail: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, providers: Iterable[str], options: Iterable[str], ops: Iterable[str],
              sample: str | int | None, xfail: Iterable[str]) -> Settings:
        """Raises ValueError naming the malformed setting."""
        names = tuple(dict.fromkeys(n.strip() for item in providers for n in item.split(",")
                                    if n.strip()))
        per: dict[str, dict[str, str]] = {n: {} for n in names}
        for item in options:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"provider option {item!r} is not [NAME:]KEY=VALUE")
            name, colon, key = key.rpartition(":")
            targets = [name.strip()] if colon else list(names)
            for n in targets:
                if n not in per:
                    raise ValueError(f"provider option {item!r} names provider {n!r}, which is "
                                     f"not under test (--onnxplex-provider: {list(names)})")
                per[n][key.strip()] = value.strip()
        op_set = frozenset(o.strip() for item in ops for o in item.split(",") if o.strip())
        n_sample = None
        if sample not in (None, ""):
            try:
                n_sample = int(sample)  # type: ignore[arg-type]
            except ValueError:
                raise ValueError(f"sample {sample!r} is not a number of cases") from None
            if n_sample < 0:
                raise ValueError(f"sample {n_sample} is negative")
        fails: dict[str, str] = {}
        for item in xfail:
            case, colon, reason = item.partition(":")
            if not colon or not case.strip() or not reason.strip():
                raise ValueError(f"expected failure {item!r} is not 'CASE: reason'")
            fails[case.strip()] = reason.strip()
        return cls(names, per, op_set, n_sample, fails)


@dataclass(frozen=True)
class Target:
    """One provider under test, with the options the author gave it."""

    name: str
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        if not self.options:
            return self.name
        return self.name + "[" + ",".join(f"{k}={v}" for k, v in self.options.items()) + "]"

    def entry(self) -> ProviderEntry:
        return provider_entry(self.name)

    @property
    def canonical(self) -> str:
        return self.entry().name

    def availability(self) -> onnxplex.Availability:
        return self.entry().availability(dict(self.options))

    def make(self) -> onnxplex.ExecutionProvider:
        """A fresh instance, as a session would build it."""
        return self.entry().load()(dict(self.options), context=ProviderContext())

    def session_providers(self) -> list[Any]:
        """The provider first, the default CPU provider behind it for everything else."""
        first = (self.canonical, dict(self.options))
        return [first] if self.canonical == DEFAULT_PROVIDER else [first, DEFAULT_PROVIDER]

    def claims(self, model: onnx.ModelProto | onnxplex.Model) -> onnxplex.Capability:
        """What a fresh instance claims when offered every node of ``model`` (unoptimized)."""
        loaded = load_model(model)
        return self.make().get_capability(GraphView(loaded, range(len(loaded.nodes))))


@dataclass
class Verdicts:
    """How one provider answered ``get_capability`` for each conformance case considered."""

    considered: int = 0
    claimed: list[str] = field(default_factory=list)
    declined: dict[str, tuple[str, ...]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    unloadable: int = 0
    selected: list[str] = field(default_factory=list)
    unavailable: str = ""

    def top_reasons(self, n: int = 5) -> list[tuple[str, int]]:
        """The most common decline reasons, counted once per case."""
        counts = Counter(r for reasons in self.declined.values() for r in reasons)
        return counts.most_common(n)


def select_cases(cases: Mapping[str, Any], ops: frozenset[str]) -> dict[str, Any]:
    """The cases whose graph has a node of one of ``ops`` (all cases when ``ops`` is empty)."""
    if not ops:
        return dict(cases)
    return {name: c for name, c in cases.items()
            if any(n.op_type in ops for n in c.model.graph.node)}


def classify(target: Target, cases: Mapping[str, Any], sample: int | None) -> Verdicts:
    """Ask the provider about every case; keep ``sample`` evenly spread claimed cases (all
    when ``None``). Cases whose ``get_capability`` raised are always kept: they fail."""
    out = Verdicts(considered=len(cases))
    why = target.availability()
    if not why.ok:
        out.unavailable = why.reason or "no reason given"
        return out
    provider = target.make()
    for name, case in sorted(cases.items()):
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                model = load_model(case.model)
        except onnxplex.OnnxplexError:
            out.unloadable += 1
            continue
        try:
            cap = provider.get_capability(GraphView(model, range(len(model.nodes))))
        except Exception as e:  # noqa: BLE001 - reported as a failing case
            out.errors[name] = f"{type(e).__name__}: {e}"
            continue
        if cap.groups:
            out.claimed.append(name)
        else:
            reasons = sorted({d.reason for d in cap.declined}) or ["(declined without a reason)"]
            out.declined[name] = tuple(reasons)
    chosen = out.claimed
    if sample is not None and sample < len(chosen):
        step = len(chosen) / sample
        chosen = [chosen[int(i * step)] for i in range(sample)]
    out.selected = sorted(set(chosen) | set(out.errors))
    return out


def as_probe(item: Any) -> Probe:
    """An author's extra probe: a :class:`Probe`, or a bare ``ModelProto`` (random inputs)."""
    if isinstance(item, Probe):
        return item
    if isinstance(item, onnx.ModelProto):
        return Probe(item.graph.name or "probe", item)
    raise TypeError(f"onnxplex_probe_models must hold onnxplex.testing.Probe or onnx.ModelProto, "
                    f"got {type(item).__name__}")


class KitState:
    """Per pytest run: the settings, the targets, and each target's verdicts once computed."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.targets = [Target(n, dict(settings.options.get(n, {}))) for n in settings.providers]
        self._verdicts: dict[str, Verdicts] = {}
        self.claims: dict[tuple[str, str, bytes], frozenset[str]] = {}
        """Node names each target claims in each probe model (filled by the contract tests)."""

    def verdicts(self, target: Target) -> Verdicts:
        """Classify the (op-filtered) conformance cases for ``target``, once."""
        if target.id not in self._verdicts:
            from ._cases import all_cases

            cases = select_cases(all_cases(), self.settings.ops)
            self._verdicts[target.id] = classify(target, cases, self.settings.sample)
        return self._verdicts[target.id]

    def computed(self) -> list[tuple[Target, Verdicts]]:
        return [(t, self._verdicts[t.id]) for t in self.targets if t.id in self._verdicts]


KIT_KEY = pytest.StashKey[KitState]()
