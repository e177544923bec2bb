"""The kleidi_sme2 provider class: Arm matrix-instruction kernels (SME2 / i8mm / dotprod / NEON).

It claims the nodes its four kernel families accelerate (see :mod:`._claims`), packs their
constant weights once in ``compile`` and keeps no per-run state. On aarch64 the provider is
available by itself and the native dispatch picks, per family, the best compiled variant this CPU
runs (the option ``max_variant`` caps it). The option ``force_reference`` (or the environment
variable ``ONNXPLEX_KLEIDI_FORCE_REFERENCE=1``) selects the portable reference variant everywhere,
and makes the provider available on other CPUs too, so it can be exercised on x86.

Tolerances against ``cpu_mlas`` (documented here, checked by the tests):

* fp32 GEMM / conv: same math in another summation order, ``rtol=1e-4, atol=1e-4``;
* dynamic int8: Kleidi quantizes activations per row (qai8dx, int8) where ONNX's
  DynamicQuantizeMatMul quantizes per tensor (uint8), so each output may differ by about one
  activation quantization step times ``sum |w|`` of its column; tests bound it that way;
* int4: cpu_mlas multiplies fp32 activations by the dequantized weights, Kleidi quantizes the
  activations per row to int8 first: the same per-row bound.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxplex import (
    Availability,
    Capability,
    CompileError,
    Decline,
    ExecutionProvider,
    GraphView,
    KernelExecutionError,
    NodeGroup,
    NodeView,
    Option,
    ProviderContext,
    Subgraph,
)

from . import _claims
from ._claims import INF, Claim

logger = logging.getLogger(__name__)

FORCE_ENV = "ONNXPLEX_KLEIDI_FORCE_REFERENCE"
VARIANTS = ("reference", "neon", "dotprod", "i8mm", "sme2")
"""Every variant name, least to most capable (the native dispatch's order)."""
INFO_KEYS = ("cpu_features", "selected_variants")
"""Read-only entries of :meth:`KleidiSme2Provider.provider_options`; ignored when given back."""
_F32 = np.float32
_FLT_MAX = float(np.finfo(np.float32).max)


@functools.cache
def _native() -> tuple[Any | None, str]:
    try:
        from . import _kleidi
    except ImportError as e:
        return None, f"native extension not built or not loadable: {e}"
    return _kleidi, ""


def _env_forced() -> bool:
    return os.environ.get(FORCE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cpu_features() -> dict[str, Any]:
    """``{'arch': ..., 'features': [...]}`` as detected by the native probe."""
    mod, why = _native()
    if mod is None:
        return {"arch": "unknown", "features": [], "error": why}
    return mod.cpu_features()


def choose_variants(native_variants: dict[str, dict], force_reference: bool,
                    max_variant: str) -> dict[str, str]:
    """Family -> the variant to run: the best one this CPU supports, at most ``max_variant``
    (``"auto"``: no ceiling); the portable reference when forced."""
    if force_reference:
        return {f: "reference" for f in native_variants}
    if max_variant == "auto":
        return {f: v["selected"] for f, v in native_variants.items()}
    ceiling = VARIANTS.index(max_variant)
    out = {}
    for f, v in native_variants.items():
        usable = [x for x in v["supported"] if VARIANTS.index(x) <= ceiling]
        out[f] = max(usable, key=VARIANTS.index, default="reference")
    return out


def _max_variant_check(v: str) -> str | None:
    return None if v == "auto" or v in VARIANTS else (
        f"expected auto or one of {', '.join(VARIANTS)}")


class KleidiSme2Provider(ExecutionProvider):
    """Arm matrix-instruction kernels (SME2 / i8mm / dotprod / NEON), KleidiAI-style."""

    name = "kleidi_sme2"
    option_specs = {
        "force_reference": Option(False, bool, "run the portable reference variant of every "
                                  "kernel family; also makes the provider available on CPUs "
                                  f"without Arm kernels, e.g. x86 (environment: {FORCE_ENV}=1)"),
        "max_variant": Option("auto", str, "the most capable variant to use in any family "
                              f"({', '.join(VARIANTS)}); auto: the best this CPU runs",
                              check=_max_variant_check),
    }

    @classmethod
    def available(cls, options: dict[str, Any] | None = None) -> Availability:
        mod, why = _native()
        if mod is None:
            return Availability(False, why)
        if _env_forced() or cls._forced_by(options):
            return Availability(True, "portable reference kernels forced")
        feats = mod.cpu_features()
        if feats["arch"] != "aarch64":
            return Availability(False, f"needs aarch64 (NEON or better); this CPU is "
                                       f"{feats['arch']}; the provider option "
                                       f"force_reference=1 (or {FORCE_ENV}=1) runs the portable "
                                       "reference kernels instead")
        if all(v["selected"] == "reference" for v in mod.variants().values()):
            return Availability(False, "no NEON-class kernel variant is compiled in for this "
                                       f"CPU ({', '.join(feats['features'])})")
        return Availability(True)

    @classmethod
    def _forced_by(cls, options: dict[str, Any] | None) -> bool:
        if not options or "force_reference" not in options:
            return False
        return cls.option_specs["force_reference"].convert(
            "force_reference", options["force_reference"], cls.name)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """CPU features, and per family the compiled / supported / selected variants (what
        ``onnxplex providers`` prints)."""
        out: dict[str, Any] = {"cpu": cpu_features(), "force_reference_env": _env_forced()}
        mod, _ = _native()
        if mod is not None:
            v = mod.variants()
            chosen = choose_variants(v, _env_forced(), "auto")
            out["variants"] = {f: {"selected": chosen[f], "compiled": v[f]["compiled"],
                                   "supported": v[f]["supported"]} for f in v}
        return out

    def __init__(self, options: dict[str, Any] | None = None, *,
                 context: ProviderContext | None = None) -> None:
        options = {k: v for k, v in (options or {}).items() if k not in INFO_KEYS}
        super().__init__(options, context=context)
        self._force = bool(self.options["force_reference"]) or _env_forced()
        self._threads = max(1, int(self.context.intra_op_num_threads or 1))
        mod, _ = _native()
        self._variants = ({} if mod is None else
                          choose_variants(mod.variants(), self._force,
                                          self.options["max_variant"]))

    def variant(self, family: str) -> str:
        """The variant this provider instance packs and runs ``family`` with."""
        return self._variants[family]

    def provider_options(self) -> dict[str, str]:
        """The options, plus two read-only entries: the detected CPU features and the variant
        chosen per kernel family (``family=variant;...``)."""
        feats = cpu_features()
        return {**super().provider_options(),
                "cpu_features": f"{feats['arch']}: {','.join(feats['features']) or 'none'}",
                "selected_variants": ";".join(f"{f}={v}" for f, v in self._variants.items())}

    # ---- get_capability -----------------------------------------------------------------------

    def get_capability(self, graph: GraphView) -> Capability:
        graph_outputs = {v.name for v in graph.outputs}
        offered = graph.offered
        claims: dict[int, Claim] = {}
        declined: dict[int, str] = {}
        for node in graph.nodes:
            c = _claims.check(node, graph)
            if isinstance(c, Claim):
                claims[node.index] = c
            else:
                declined[node.index] = c

        groups: list[NodeGroup] = []
        taken: set[int] = set()
        # A DynamicQuantizeLinear and every matmul reading it -> one dynamic int8 group
        for dql in graph.nodes:
            if dql.op_type != "DynamicQuantizeLinear" or dql.domain not in ("", "ai.onnx"):
                continue
            g = _claims.dq_group(dql, graph, graph_outputs)
            if not isinstance(g, str) and not offered.issuperset(g.members):
                g = "some of its nodes were claimed by an earlier provider"
            if isinstance(g, str):
                why = f"no dynamic int8 group at {dql.display_name}: {g}"
                for u in (dql, *graph.consumers(dql.outputs[0].name)):
                    if u.index in declined:
                        declined[u.index] = why
                continue
            members = g.members
            taken.update(members)
            for i in members:
                declined.pop(i, None)
            forms = sorted({_claims.DQ_PATTERNS[c.nodes[0].op_type == "MatMulInteger"]
                            for c in g.chains})
            label = f"qgemm_qsi8cx/{self.variant('qgemm_qsi8cx')}"
            groups.append(NodeGroup(members, name=f"kleidi_dq_{dql.display_name}",
                                    note=f"dynamic int8 (qai8dx x qsi8cx): {len(g.chains)} "
                                         f"matmul(s), {'; '.join(forms)} [{label}]"))

        for i in sorted(claims):
            if i in taken:
                continue
            node, c = graph.node(i), claims[i]
            members: tuple[int, ...] = (i,)
            note = c.note
            act = self._fusable_activation(node, c, graph, graph_outputs)
            if act is not None:
                members = (i, act.index)
                declined.pop(act.index, None)
                note += f" + {act.op_type} as clamp"
            taken.update(members)
            groups.append(NodeGroup(members, name=f"kleidi_{node.display_name}" if len(members)
                                    > 1 else "", note=f"{note} [{self._variant_label(c)}]"))
        groups.sort(key=lambda g: g.nodes)
        decl = tuple(Decline(i, r) for i, r in sorted(declined.items()) if i not in taken)
        return Capability(tuple(groups), decl)

    def _variant_label(self, c: Claim) -> str:
        return f"{c.family}/{self.variant(c.family)}"

    @staticmethod
    def _fusable_activation(node: NodeView, c: Claim, graph: GraphView,
                            graph_outputs: set[str]) -> NodeView | None:
        if c.family not in ("gemm_f32", "igemm_f32") or node.op_type.startswith("Fused"):
            return None
        y = node.outputs[0]
        if y is None or y.name in graph_outputs:
            return None
        users = graph.consumers(y.name)
        if len(users) != 1 or users[0].index not in graph.offered:
            return None
        act = users[0]
        if act.input(0) is None or act.input(0).name != y.name:
            return None
        return act if not isinstance(_claims.clip_bounds(act), str) else None

    # ---- compile ------------------------------------------------------------------------------

    def compile(self, subgraph: Subgraph):
        mod, why = _native()
        first = subgraph.nodes[0]
        if mod is None:
            raise CompileError(f"{self.name}: {why}", provider=self.name,
                               node=first.display_name, op_type=first.op_type)
        try:
            if first.op_type == "DynamicQuantizeLinear":
                return self._compile_dq_group(mod, subgraph)
            if len(subgraph.nodes) > 2:
                raise ValueError(f"unexpected group of {len(subgraph.nodes)} nodes")
            lo, hi = -INF, INF
            if len(subgraph.nodes) == 2:
                b = _claims.clip_bounds(subgraph.nodes[1])
                if isinstance(b, str):
                    raise ValueError(b)
                lo, hi = b
            fn = self._compile_node(mod, first, lo, hi)
        except (ValueError, RuntimeError, TypeError) as e:
            raise CompileError(f"{self.name}: cannot compile node '{first.display_name}' "
                               f"({first.op_type}): {e}", provider=self.name,
                               node=first.display_name, op_type=first.op_type) from e
        return self._guard(fn, first, [v.name if v is not None else None
                                       for v in subgraph.inputs], first.input(0).name)

    def _guard(self, fn: Callable, node: NodeView, in_names: list, data_name: str) -> Callable:
        """Kernel taking the subgraph's inputs; native errors become KernelExecutionError."""
        pos = in_names.index(data_name)
        name, provider = node.display_name, self.name

        def kernel(*inputs):
            try:
                return fn(inputs[pos])
            except (ValueError, RuntimeError) as e:
                raise KernelExecutionError(
                    f"node '{name}' ({node.op_type}) on provider {provider} failed in the "
                    f"Kleidi kernel: {e}", provider=provider, node=name,
                    op_type=node.op_type) from e

        return kernel

    @staticmethod
    def _clamp_kw(lo: float, hi: float) -> dict[str, float]:
        kw = {}
        if lo > -INF:
            kw["clamp_min"] = max(lo, -_FLT_MAX)
        if hi < INF:
            kw["clamp_max"] = min(hi, _FLT_MAX)
        return kw

    def _compile_node(self, mod, node: NodeView, lo: float, hi: float) -> Callable:
        op, t = node.op_type, self._threads
        if op in ("FusedGemm", "FusedConv"):
            b = _claims.fused_activation_bounds(node)
            if isinstance(b, str):
                raise ValueError(b)
            lo, hi = max(lo, b[0]), min(hi, b[1])
        if op in ("Gemm", "FusedGemm", "MatMul"):
            return self._compile_gemm(mod, node, lo, hi, t)
        if op in ("Conv", "FusedConv"):
            w = np.asarray(node.input(1).const, _F32)
            bias = _opt_vec(node.input(2), w.shape[0])
            if w.shape[2:] == (1, 1):
                return self._compile_conv1x1(mod, node, w, bias, lo, hi, t)
            return self._compile_conv(mod, node, w, bias, lo, hi, t)
        if op == "DynamicQuantizeMatMul":
            packed = self._pack_qsi8cx(mod, node.input(1), node.input(2), node.input(4))
            return _gemm_runner(mod.qgemm_qsi8cx, packed, self._clamp_kw(lo, hi), t)
        if op == "MatMulNBits":
            return self._compile_nbits(mod, node, t)
        raise ValueError(f"{node.qualified_op} has no Kleidi kernel")

    def _compile_gemm(self, mod, node: NodeView, lo, hi, t) -> Callable:
        w = np.ascontiguousarray(node.input(1).const, _F32)
        trans_b = node.op_type != "MatMul" and bool(int(node.attr("transB", 0)))
        n = w.shape[0] if trans_b else w.shape[1]
        bias = None
        if node.op_type != "MatMul":
            alpha = float(node.attr("alpha", 1.0))
            beta = float(node.attr("beta", 1.0))
            if alpha != 1.0:
                w = (w * _F32(alpha)).astype(_F32)
            c = _opt_vec(node.input(2), n)
            if c is not None and beta != 1.0:
                c = (c * _F32(beta)).astype(_F32)
            bias = c
        packed = mod.pack_gemm_f32(w, bias, transpose_b=trans_b,
                                   variant=self.variant("gemm_f32"))
        return _gemm_runner(mod.gemm_f32, packed, self._clamp_kw(lo, hi), t)

    def _compile_conv1x1(self, mod, node: NodeView, w, bias, lo, hi, t) -> Callable:
        """A 1x1 convolution as one GEMM over the pixels; padding and strides first make the
        pixels it reads (zero pixels give the bias, as the convolution does)."""
        m, c = w.shape[:2]
        packed = mod.pack_gemm_f32(np.ascontiguousarray(w.reshape(m, c)), bias,
                                   transpose_b=True, variant=self.variant("gemm_f32"))
        kw = self._clamp_kw(lo, hi)
        sh, sw = (int(s) for s in (node.attr("strides", None) or (1, 1)))
        p = tuple(int(v) for v in (node.attr("pads", None) or (0, 0, 0, 0)))
        auto = _claims._s(node.attr("auto_pad", "NOTSET"))

        def run(x):
            x = np.asarray(x, _F32)
            pd = p if auto == "NOTSET" else (0, 0, 0, 0)
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                pd = _same_pads(x.shape[2:], (1, 1), (sh, sw), (1, 1), auto == "SAME_UPPER")
            if any(pd):
                x = np.pad(x, ((0, 0), (0, 0), (pd[0], pd[2]), (pd[1], pd[3])))
            if (sh, sw) != (1, 1):
                x = x[:, :, ::sh, ::sw]
            _, ch, h, wd = x.shape
            a = np.ascontiguousarray(x.reshape(ch, h * wd).T)
            y = mod.gemm_f32(a, packed, threads=t, **kw)
            return np.ascontiguousarray(y.T).reshape(1, m, h, wd)

        return run

    def _compile_conv(self, mod, node: NodeView, w, bias, lo, hi, t) -> Callable:
        packed = mod.pack_conv2d_f32(np.ascontiguousarray(w), bias,
                                     variant=self.variant("igemm_f32"))
        kh, kw_ = w.shape[2:]
        strides = tuple(int(s) for s in (node.attr("strides", None) or (1, 1)))
        dil = tuple(int(d) for d in (node.attr("dilations", None) or (1, 1)))
        p = tuple(int(v) for v in (node.attr("pads", None) or (0, 0, 0, 0)))
        pads = (p[0], p[1], p[2], p[3])  # ONNX: top, left, bottom, right
        auto = _claims._s(node.attr("auto_pad", "NOTSET"))
        kw = self._clamp_kw(lo, hi)

        def run(x):
            x = np.ascontiguousarray(x, _F32)
            pd = pads
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                pd = _same_pads(x.shape[2:], (kh, kw_), strides, dil, auto == "SAME_UPPER")
            elif auto == "VALID":
                pd = (0, 0, 0, 0)
            return mod.conv2d_f32(x, packed, strides=strides, pads=pd, dilations=dil,
                                  threads=t, **kw)

        return run

    def _pack_qsi8cx(self, mod, weight, scale, bias):
        """Pack a constant int8 [K, N] weight with its per-tensor or per-column scale and an
        optional bias (ValueInfos) for the dynamic int8 kernel."""
        w = np.ascontiguousarray(weight.const, np.int8)
        n = w.shape[1]
        scales = _opt_vec(scale, n)
        return mod.pack_qsi8cx(w, scales, _opt_vec(bias, n),
                               variant=self.variant("qgemm_qsi8cx"))

    def _compile_nbits(self, mod, node: NodeView, t) -> Callable:
        k, n = int(node.attr("K")), int(node.attr("N"))
        bs = int(node.attr("block_size"))
        b = np.ascontiguousarray(np.asarray(node.input(1).const, np.uint8).reshape(n, k // bs,
                                                                                    bs // 2))
        scales = np.ascontiguousarray(node.input(2).const, _F32)
        z = node.input(3)
        zp = None if z is None else np.ascontiguousarray(np.asarray(z.const, np.uint8)
                                                         .reshape(-1))
        nib, block_scales = mod.matmulnbits_to_qsu4c32(b, scales, zp, K=k, block_size=bs)
        packed = mod.pack_qsi4c32(nib, block_scales, _opt_vec(node.input(5), n),
                                  variant=self.variant("qgemm_qsi4c32"))
        return _gemm_runner(mod.qgemm_qsi4c32, packed, {}, t)

    def _compile_dq_group(self, mod, subgraph: Subgraph) -> Callable:
        dql = subgraph.nodes[0]
        outs = [v.name for v in subgraph.outputs]
        try:
            g = _claims.dq_group(dql, _GroupFlow(subgraph.nodes), set())
            if isinstance(g, str):
                raise ValueError(g)
            runners: dict[str, Callable] = {}
            for c in g.chains:
                packed = self._pack_qsi8cx(mod, c.weight, c.scale, c.bias)
                runners[c.output] = _gemm_runner(mod.qgemm_qsi8cx, packed, {}, self._threads)
            missing = [o for o in outs if o not in runners]
            if missing:
                raise ValueError(f"group outputs {missing} are not results of its matmuls")
        except (ValueError, RuntimeError, TypeError) as e:
            raise CompileError(f"{self.name}: cannot compile the dynamic int8 group "
                               f"'{subgraph.name}' rooted at {dql.display_name}: {e}",
                               provider=self.name, node=dql.display_name,
                               op_type=dql.op_type) from e
        order = [runners[o] for o in outs]

        def fn(x):
            res = tuple(r(x) for r in order)
            return res if len(res) > 1 else res[0]

        in_names = [v.name if v is not None else None for v in subgraph.inputs]
        return self._guard(fn, dql, in_names, dql.input(0).name)


class _GroupFlow:
    """Producers and readers of values among a claimed group's nodes (for ``compile``)."""

    def __init__(self, nodes) -> None:
        self._producer = {v.name: n for n in nodes for v in n.outputs if v is not None}
        self._readers: dict[str, list[NodeView]] = {}
        for n in nodes:
            for name in dict.fromkeys(v.name for v in n.inputs if v is not None):
                self._readers.setdefault(name, []).append(n)

    def producer(self, name: str) -> NodeView | None:
        return self._producer.get(name)

    def consumers(self, name: str) -> list[NodeView]:
        return self._readers.get(name, [])


def _opt_vec(v, n: int) -> np.ndarray | None:
    if v is None:
        return None
    c = np.asarray(v.const, _F32).reshape(-1)
    return np.ascontiguousarray(np.broadcast_to(c, (n,)))


def _same_pads(spatial, kernel, strides, dil, upper: bool) -> tuple[int, int, int, int]:
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dil):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if upper else big)
        end.append(big if upper else small)
    return begin[0], begin[1], end[0], end[1]


def _gemm_runner(run, packed, kw: dict, threads: int) -> Callable:
    """``y = run(a_2d)`` for A of any rank >= 2 (leading dims folded into M)."""

    def fn(a):
        a = np.asarray(a, _F32)
        lead = a.shape[:-1]
        a2 = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
        y = run(a2, packed, threads=threads, **kw)
        return y.reshape(*lead, y.shape[-1])

    return fn
