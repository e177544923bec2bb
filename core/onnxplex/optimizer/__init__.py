"""Provider-independent graph optimizations, with onnxruntime's levels.

A *pass* rewrites the session's graph (onnx-ir objects) in place and returns how many changes
it made. Passes run in registration order, each from its level on:

* ``ORT_ENABLE_BASIC``: constant folding, dead-code elimination, Identity/Dropout removal,
  no-op Cast/Reshape/Transpose chains, common-subexpression elimination;
* ``ORT_ENABLE_EXTENDED``: fusions into com.microsoft contrib ops (see ``_fusions``);
* ``ORT_ENABLE_LAYOUT``: 2-D float convs channels-last for the default CPU provider (see
  ``_layout``); providers that prefer NHWC get their layout at partition time.

A pass that raises is rolled back and skipped with a warning (``session.optimizer_verify=1``
also rolls back a pass that changes the model's outputs on random inputs). Usually the passes
share one snapshot of the graph; after a failure, or when nodes are protected or verification
is on, each pass gets its own. What ran and what it changed is returned as
:class:`PassReport` rows and logged under ``ONNXPLEX_DEBUG``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..graph.model import Model, Subgraph

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["OptimizerContext", "Pass", "PassReport", "register_pass", "optimize", "PASSES",
           "pass_names"]

logger = logging.getLogger("onnxplex.optimizer")


# (model, feeds or None) -> (the feeds, the outputs): the model run as exported on the default
# CPU provider, on ``feeds`` or on fixed random inputs when None; the session supplies it, so
# that this layer imports none above it.
ModelRunner = Callable[[Model, "dict[str, Any] | None"], "tuple[dict[str, Any], list[Any]]"]


@dataclass
class OptimizerContext:
    """What a pass may use: the model, and a way to build default-CPU kernels."""

    model: Model
    compile_node: Callable[[Subgraph], Callable[..., Any]] | None = None
    config: dict[str, str] = field(default_factory=dict)
    protected: frozenset[int] = frozenset()  # id() of nodes another provider claimed


@dataclass(frozen=True)
class Pass:
    name: str
    level: int
    run: Callable[[OptimizerContext], int]
    requires: frozenset[str] = frozenset()  # op types of which the graph needs one, if any
    applies: Callable[[Model], bool] | None = None  # a cheap test that the pass could match


@dataclass(frozen=True)
class PassReport:
    """One pass's outcome: how many changes, how long, or why it was skipped."""

    name: str
    changes: int
    seconds: float
    skipped: str = ""

    def __str__(self) -> str:
        if self.skipped:
            return f"{self.name}: skipped ({self.skipped})"
        return f"{self.name}: {self.changes} change(s) in {self.seconds * 1e3:.1f} ms"


PASSES: list[Pass] = []


def register_pass(name: str, level: int, requires: Iterable[str] = (),
                  applies: Callable[[Model], bool] | None = None
                  ) -> Callable[[Callable[[OptimizerContext], int]],
                                Callable[[OptimizerContext], int]]:
    """Decorator: add a pass (run in registration order) starting at ``level``. ``requires``:
    op types the pass starts from; it is not run (0 changes) when the graph, its subgraphs
    included, has none of them (matching rule sets over a graph that cannot match costs).
    ``applies``: a quicker test of the same kind, given the model: ``False`` when the pass
    cannot change it (a necessary condition; it must not be wrong the other way)."""

    def deco(fn: Callable[[OptimizerContext], int]) -> Callable[[OptimizerContext], int]:
        PASSES.append(Pass(name, level, fn, frozenset(requires), applies))
        return fn

    return deco


def _needless(p: Pass, model: Model) -> bool:
    """Whether ``p`` cannot change ``model``: none of the op types it requires is in it, or
    its ``applies`` test says no."""
    if p.requires and p.requires.isdisjoint(model.op_types):
        return True
    return p.applies is not None and not p.applies(model)


_SKIPPED: dict[str, PassReport] = {}


def _not_run(p: Pass) -> PassReport:
    """The report of a pass that could not change the model (0 changes in no time): one
    instance per pass name, reports being frozen (most passes of most sessions end here)."""
    report = _SKIPPED.get(p.name)
    if report is None:
        report = _SKIPPED[p.name] = PassReport(p.name, 0, 0.0)
    return report


def optimize(model: Model, level: int, compile_node: Callable | None = None, *,
             disabled: frozenset[str] = frozenset(), min_level: int = 1,
             protected: frozenset[int] = frozenset(),
             config: dict[str, str] | None = None,
             reload: Callable[[], ir.Graph] | None = None,
             runner: ModelRunner | None = None) -> list[PassReport]:
    """Run the registered passes of levels ``min_level``..``level`` on ``model`` (in place).

    ``protected`` holds ``id()`` of graph nodes another provider has claimed: a pass that would
    rewrite one of them is rolled back (fusions serve the default CPU provider, as onnxruntime
    applies its level-2 fusions only to nodes assigned to its CPU provider).
    ``runner`` runs a model for ``session.optimizer_verify=1`` (:data:`ModelRunner`; without
    one verification is off, with a warning).
    ``reload``, when given, returns ``model``'s graph as it was before this call (the session
    loads its source again): the run of all passes then keeps no snapshot of its own, and a
    pass that raises costs a reload instead (a graph clone per session was 2 ms on MobileNetV2,
    15 ms on BERT-base int8).
    """
    _load_passes()
    ctx = OptimizerContext(model, compile_node, dict(config or {}), protected)
    verify = ctx.config.get("session.optimizer_verify", "0") == "1"
    if verify and runner is None:
        logger.warning("session.optimizer_verify=1 needs a model runner; passes not verified")
        verify = False
    reports: list[PassReport] = []
    if disabled:
        unknown = set(disabled) - {p.name for p in PASSES}
        if unknown:
            logger.warning("disabled optimizers %s do not exist; passes are: %s",
                           sorted(unknown), ", ".join(p.name for p in PASSES))
    passes = _selected(min_level, level, disabled)
    if passes and not protected and not verify:
        # The common case: no pass raises. One snapshot for the whole run (a graph clone per
        # pass cost ~40 ms each on BERT-base); should any pass raise, the run is restored and
        # redone pass by pass, each on its own snapshot, as below.
        done = _run_optimistically(model, ctx, passes, reload)
        if done is not None:
            reports = done
            passes = []
    for p in passes:
        if _needless(p, model):
            reports.append(_not_run(p))
            continue
        snapshot = model.ir.graph.clone()
        reference = runner(model, None) if verify else None
        t0 = time.perf_counter()
        try:
            changes = p.run(ctx)
            model.reindex()   # also when nothing was counted: a pass may drop initializers
            model.order()   # now: a cycle the pass made is its failure
            if changes and protected:
                alive = {id(n) for n in model.graph}
                if not protected <= alive:
                    raise _Protected("it would rewrite nodes another provider claimed")
            if changes and reference is not None:
                _verify(model, reference, runner)
        except Exception as e:  # noqa: BLE001 - a failing pass is rolled back, never fatal
            model.ir.graph = snapshot
            model.reindex()
            why = str(e) if isinstance(e, _Protected) else f"{type(e).__name__}: {e}"
            logger.log(logging.INFO if isinstance(e, _Protected) else logging.WARNING,
                       "optimizer pass %r rolled back and skipped: %s", p.name, why)
            reports.append(PassReport(p.name, 0, time.perf_counter() - t0, why))
            continue
        reports.append(PassReport(p.name, changes, time.perf_counter() - t0))
    if _debug_level() >= 1:
        logger.warning("optimizer (level %d):\n  %s", level,
                       "\n  ".join(str(r) for r in reports) or "no pass ran")
    return reports


def _run_optimistically(model: Model, ctx: OptimizerContext, passes: list[Pass],
                        reload: Callable[[], ir.Graph] | None) -> list[PassReport] | None:
    """Run ``passes`` on one snapshot (or none, with ``reload``); ``None`` (and the model
    restored) if one raised."""
    snapshot = model.ir.graph.clone() if reload is None else None
    reports: list[PassReport] = []
    for p in passes:
        if _needless(p, model):
            reports.append(_not_run(p))
            continue
        t0 = time.perf_counter()
        try:
            nodes_before = len(model.graph)   # the main graph's (kept by onnx-ir: no walk)
            changes = p.run(ctx)
            # A pass that changed nothing and left as many nodes: no new order to compute.
            model.reindex(structure=bool(changes) or len(model.graph) != nodes_before)
        except Exception as e:  # noqa: BLE001 - redone pass by pass, with rollback
            logger.info("optimizer pass %r raised (%s: %s); redoing the passes one by one, "
                        "each on its own snapshot", p.name, type(e).__name__, e)
            model.ir.graph = snapshot if reload is None else reload()
            model.reindex()
            return None
        reports.append(PassReport(p.name, changes, time.perf_counter() - t0))
    try:
        model.order()   # once, after all passes: a cycle one made is found here
    except Exception as e:  # noqa: BLE001 - redone pass by pass, with rollback
        logger.info("the optimized graph could not be ordered (%s: %s); redoing the passes "
                    "one by one, each on its own snapshot", type(e).__name__, e)
        model.ir.graph = snapshot if reload is None else reload()
        model.reindex()
        return None
    return reports


# Pass modules, in the order their passes run within a level.
_MODULES = ("_basic", "_scan", "_precision", "_fusions_cnn", "_fusions_transformer", "_fusions_ml",
            "_layout")


_loaded = False


def _load_passes() -> None:
    global _loaded
    if _loaded:   # (importing the modules again is a dictionary lookup each, per session)
        return
    import importlib

    for name in _MODULES:
        importlib.import_module(f"{__name__}.{name}")
    _loaded = True


_order_cache: tuple[tuple[Pass, ...], list[Pass]] | None = None


def _ordered() -> list[Pass]:
    """By level, then by module (_MODULES order), then by registration: whatever the import
    order was, basic passes run before fusions and CNN fusions before transformer ones.
    (Sorted again only when the registered passes changed.)"""
    global _order_cache
    registered = tuple(PASSES)
    if _order_cache is not None and _order_cache[0] == registered:
        return list(_order_cache[1])

    def key(item: tuple[int, Pass]) -> tuple[int, int, int]:
        k, p = item
        module = getattr(p.run, "__module__", "").rsplit(".", 1)[-1]
        rank = _MODULES.index(module) if module in _MODULES else len(_MODULES)
        return (p.level, rank, k)

    ordered = [p for _, p in sorted(enumerate(registered), key=key)]
    _order_cache = (registered, ordered)
    return list(ordered)


def _selected(min_level: int, level: int, disabled: frozenset[str]) -> list[Pass]:
    """The passes of levels ``min_level``..``level`` not in ``disabled``, in running order."""
    return [p for p in _ordered() if min_level <= p.level <= level and p.name not in disabled]


def pass_names() -> list[str]:
    """Names of every pass, in running order (for ``disabled_optimizers``)."""
    _load_passes()
    return [p.name for p in _ordered()]


def _debug_level() -> int:
    try:
        return int(os.environ.get("ONNXPLEX_DEBUG", "0") or 0)
    except ValueError:
        return 0


class _ChangedResults(Exception):
    pass


class _Protected(Exception):
    pass


def _verify(model: Model, reference, runner: ModelRunner) -> None:
    import numpy as np

    feeds, want = reference
    _, got = runner(model, feeds)
    for k, (g, w) in enumerate(zip(got, want)):
        if not np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-4,
                           atol=1e-5, equal_nan=True):
            raise _ChangedResults(f"output {k} changed beyond rtol 1e-4")
