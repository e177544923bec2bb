"""The kleidi_sme2 provider class: Arm matrix-instruction kernels (SME2 / i8mm / dotprod / NEON).

It claims the nodes its four kernel families accelerate (see :mod:`._claims`), packs their
constant weights once in ``compile`` and keeps no per-run state. On aarch64 the native dispatch
picks the best compiled variant this CPU supports; ``force_reference`` (or the environment
variable ``ONNXPLEX_KLEIDI_FORCE_REFERENCE=1``) selects the portable reference variant, and the
environment variable also makes the provider available off aarch64 so it can be exercised on
x86 (``available()`` is a class method and cannot see session options).

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
FAMILIES = ("gemm_f32", "igemm_f32", "qgemm_qsi8cx", "qgemm_qsi4c32")
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


def _accelerated(mod) -> dict[str, str]:
    """Family -> selected variant, for the families whose selected variant is not the
    portable reference."""
    return {f: v["selected"] for f, v in mod.variants().items() if v["selected"] != "reference"}


class KleidiSme2Provider(ExecutionProvider):
    """Arm matrix-instruction kernels (SME2 / i8mm / dotprod / NEON), KleidiAI-style."""

    name = "kleidi_sme2"
    option_specs = {
        "force_reference": Option(False, bool, "run the portable reference variant of every "
                                  f"kernel family (also: {FORCE_ENV}=1, which additionally "
                                  "makes the provider available off aarch64)"),
    }

    @classmethod
    def available(cls) -> Availability:
        mod, why = _native()
        if mod is None:
            return Availability(False, why)
        if _env_forced():
            return Availability(True)
        feats = mod.cpu_features()
        if feats["arch"] != "aarch64":
            return Availability(False, f"needs aarch64 (NEON or better); this CPU is "
                                       f"{feats['arch']}; set {FORCE_ENV}=1 to run the "
                                       "portable reference kernels")
        if not _accelerated(mod):
            return Availability(False, "no NEON-class kernel variant is compiled in for this "
                                       f"CPU ({', '.join(feats['features'])})")
        return Availability(True)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu": cpu_features(), "force_reference_env": _env_forced()}
        mod, _ = _native()
        if mod is not None:
            v = mod.variants()
            forced = _env_forced()
            out["variants"] = {f: {"selected": "reference" if forced else v[f]["selected"],
                                   "compiled": v[f]["compiled"],
                                   "supported": v[f]["supported"]} for f in v}
        return out

    def __init__(self, options: dict[str, Any] | None = None, *,
                 context: ProviderContext | None = None) -> None:
        super().__init__(options, context=context)
        self._force = bool(self.options["force_reference"]) or _env_forced()
        self._threads = max(1, int(self.context.intra_op_num_threads or 1))

    def variant(self, family: str) -> str:
        """The variant this provider instance packs and runs ``family`` with."""
        if self._force:
            return "reference"
        mod, _ = _native()
        return mod.variants()[family]["selected"]

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
        # DynamicQuantizeLinear + its MatMulIntegerToFloat consumers -> one dynamic int8 group
        for i in sorted(claims):
            node = graph.node(i)
            if node.op_type != "MatMulIntegerToFloat" or i in taken:
                continue
            dql = graph.producer(node.input(0).name)
            users = {u.index for v in dql.outputs if v is not None
                     for u in graph.consumers(v.name)}
            ok_users = all(u in claims and graph.node(u).op_type == "MatMulIntegerToFloat"
                           for u in users)
            exported = any(v is not None and v.name in graph_outputs for v in dql.outputs)
            if dql.index not in offered or not ok_users or exported:
                for u in users & set(claims):
                    claims.pop(u, None)
                    declined[u] = ("its DynamicQuantizeLinear is not offered or has outputs "
                                   "read by nodes the dynamic int8 kernel does not run")
                continue
            members = tuple(sorted({dql.index, *users}))
            taken.update(members)
            declined.pop(dql.index, None)
            groups.append(NodeGroup(members, name=f"kleidi_dq_{dql.display_name}",
                                    note=f"{claims[i].note} [{self._variant_label(claims[i])}]"))

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
                return self._compile_conv1x1(mod, w, bias, lo, hi, t)
            return self._compile_conv(mod, node, w, bias, lo, hi, t)
        if op == "DynamicQuantizeMatMul":
            packed = self._pack_qsi8cx(mod, node, 1, 2, 4)
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

    def _compile_conv1x1(self, mod, w, bias, lo, hi, t) -> Callable:
        m, c = w.shape[:2]
        packed = mod.pack_gemm_f32(np.ascontiguousarray(w.reshape(m, c)), bias,
                                   transpose_b=True, variant=self.variant("gemm_f32"))
        kw = self._clamp_kw(lo, hi)

        def run(x):
            _, ch, h, wd = x.shape
            a = np.ascontiguousarray(np.asarray(x, _F32).reshape(ch, h * wd).T)
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

    def _pack_qsi8cx(self, mod, node: NodeView, bi: int, si: int, biasi: int):
        w = np.ascontiguousarray(node.input(bi).const, np.int8)
        n = w.shape[1]
        scales = np.ascontiguousarray(
            np.broadcast_to(np.asarray(node.input(si).const, _F32).reshape(-1), (n,)))
        bias = _opt_vec(node.input(biasi), n)
        return mod.pack_qsi8cx(w, scales, bias, variant=self.variant("qgemm_qsi8cx"))

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
        runners: dict[str, Callable] = {}
        try:
            for node in subgraph.nodes[1:]:
                packed = self._pack_qsi8cx(mod, node, 1, 3, 6)
                runners[node.outputs[0].name] = _gemm_runner(mod.qgemm_qsi8cx, packed, {},
                                                             self._threads)
            missing = [o for o in outs if o not in runners]
            if missing:
                raise ValueError(f"group outputs {missing} are not MatMulIntegerToFloat results")
        except (ValueError, RuntimeError, TypeError) as e:
            raise CompileError(f"{self.name}: cannot compile group '{subgraph.name}' "
                               f"({dql.display_name} + MatMulIntegerToFloat): {e}",
                               provider=self.name, node=dql.display_name,
                               op_type=dql.op_type) from e
        order = [runners[o] for o in outs]

        def fn(x):
            res = tuple(r(x) for r in order)
            return res if len(res) > 1 else res[0]

        in_names = [v.name if v is not None else None for v in subgraph.inputs]
        return self._guard(fn, dql, in_names, dql.input(0).name)


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
