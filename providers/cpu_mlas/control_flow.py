"""Control flow: If, Loop, Scan, SequenceMap.

Bodies are compiled once per session through ``ctx.compile_graph``, which partitions them over
the session's providers with the same machinery as the main graph; a body runner is called as
``runner(*body_inputs, *outer_values)``. Outer-scope values reach a kernel as the node's
implicit inputs, after its explicit ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex._errors import KernelExecutionError

from ._registry import op


def _runner(node: NodeView, ctx: ProviderContext, attr: str):
    if ctx.compile_graph is None:
        raise KernelExecutionError(f"{node.op_type} needs a session to compile its '{attr}' "
                                   "body", node=node.display_name, op_type=node.op_type)
    return ctx.compile_graph(node.attr(attr))


def _outer_picker(node: NodeView, runner):
    """Maps the node's implicit inputs (after its explicit ones) to the body's outer names."""
    names = [v.name for v in node.implicit_inputs]
    pos = [names.index(n) for n in runner.outer_names]
    n_explicit = len(node.inputs)

    def pick(args: tuple) -> list[Any]:
        implicit = args[n_explicit:]
        return [implicit[p] for p in pos]

    return pick


@op("If", since=1)
def make_if(node: NodeView, ctx: ProviderContext):
    then_run = _runner(node, ctx, "then_branch")
    else_run = _runner(node, ctx, "else_branch")
    then_outer = _outer_picker(node, then_run)
    else_outer = _outer_picker(node, else_run)

    def kernel(cond, *rest):
        args = (cond, *rest)
        if bool(np.asarray(cond).reshape(-1)[0]):
            out = then_run(*then_outer(args))
        else:
            out = else_run(*else_outer(args))
        return tuple(out)

    return kernel


@op("Loop", since=1)
def make_loop(node: NodeView, ctx: ProviderContext):
    body = _runner(node, ctx, "body")
    outer = _outer_picker(node, body)
    n_carried = len(node.inputs) - 2
    n_scan = len(body.output_names) - 1 - n_carried
    out_infos = node.outputs[n_carried:]

    def kernel(max_trip, cond, *rest):
        args = (max_trip, cond, *rest)
        carried = list(rest[:n_carried])
        outer_vals = outer(args)
        trips = None if max_trip is None else int(np.asarray(max_trip).reshape(-1)[0])
        keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        scans: list[list[Any]] = [[] for _ in range(n_scan)]
        i = 0
        while keep_going and (trips is None or i < trips):
            out = body(np.asarray(i, dtype=np.int64), np.asarray(keep_going), *carried,
                       *outer_vals)
            if cond is not None:   # with no cond input, the body's cond output is ignored
                keep_going = bool(np.asarray(out[0]).reshape(-1)[0])
            carried = list(out[1:1 + n_carried])
            for k in range(n_scan):
                scans[k].append(out[1 + n_carried + k])
            i += 1
        results = list(carried)
        for k in range(n_scan):
            info = out_infos[k] if k < len(out_infos) else None
            parts = scans[k]
            if parts and isinstance(parts[0], list):   # a scan output of sequences
                results.append([x for p in parts for x in p])
            elif parts:
                results.append(np.stack([np.asarray(p) for p in parts]))
            else:
                # No iteration ran: an empty stack, per-iteration dims as far as declared.
                dtype = info.dtype if info is not None and info.dtype is not None else np.float32
                inner = () if info is None or info.shape is None else info.shape[1:]
                shape = (0, *(d if isinstance(d, int) else 0 for d in inner))
                results.append(np.zeros(shape, dtype=dtype))
        return tuple(results)

    return kernel


@op("Scan", since=9)
def make_scan(node: NodeView, ctx: ProviderContext):
    body = _runner(node, ctx, "body")
    outer = _outer_picker(node, body)
    n_scan_in = int(node.attr("num_scan_inputs"))
    n_explicit = len(node.inputs)
    n_state = n_explicit - n_scan_in
    n_scan_out = len(body.output_names) - n_state
    in_axes = list(node.attr("scan_input_axes", (0,) * n_scan_in))
    in_dirs = list(node.attr("scan_input_directions", (0,) * n_scan_in))
    out_axes = list(node.attr("scan_output_axes", (0,) * n_scan_out))
    out_dirs = list(node.attr("scan_output_directions", (0,) * n_scan_out))

    def kernel(*args):
        state = list(args[:n_state])
        xs = []
        for k, x in enumerate(args[n_state:n_explicit]):
            x = np.moveaxis(x, in_axes[k] % x.ndim, 0)
            xs.append(x[::-1] if in_dirs[k] else x)
        outer_vals = outer(args)
        steps = xs[0].shape[0] if xs else 0
        collected: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
        for t in range(steps):
            out = body(*state, *(x[t] for x in xs), *outer_vals)
            state = list(out[:n_state])
            for k in range(n_scan_out):
                collected[k].append(np.asarray(out[n_state + k]))
        results = list(state)
        for k in range(n_scan_out):
            parts = collected[k][::-1] if out_dirs[k] else collected[k]
            y = np.stack(parts) if parts else np.zeros((0,), np.float32)
            axis = out_axes[k] % y.ndim if y.ndim else 0
            results.append(np.moveaxis(y, 0, axis))
        return tuple(results)

    return kernel


@op("Scan", since=8)
def make_scan_v8(node: NodeView, ctx: ProviderContext):
    """Scan-8: a leading batch axis on every input, optional sequence_lens (input 0)."""
    body = _runner(node, ctx, "body")
    outer = _outer_picker(node, body)
    n_scan_in = int(node.attr("num_scan_inputs"))
    n_explicit = len(node.inputs)
    n_state = n_explicit - 1 - n_scan_in
    n_scan_out = len(body.output_names) - n_state
    dirs = list(node.attr("directions", (0,) * n_scan_in))

    def kernel(seq_lens, *rest):
        args = (seq_lens, *rest)
        outer_vals = outer(args)
        states = rest[:n_state]
        scans = rest[n_state:n_explicit - 1]
        batch = (states[0] if states else scans[0]).shape[0]
        out_states: list[list[np.ndarray]] = [[] for _ in range(n_state)]
        out_scans: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
        for b in range(batch):
            st = [s[b] for s in states]
            length = scans[0].shape[1] if seq_lens is None else int(seq_lens[b])
            xs = [s[b][:length][::-1] if dirs[k] else s[b][:length] for k, s in enumerate(scans)]
            col: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
            for t in range(length):
                out = body(*st, *(x[t] for x in xs), *outer_vals)
                st = list(out[:n_state])
                for k in range(n_scan_out):
                    col[k].append(np.asarray(out[n_state + k]))
            for k in range(n_state):
                out_states[k].append(np.asarray(st[k]))
            for k in range(n_scan_out):
                out_scans[k].append(np.stack(col[k]))
        return tuple([np.stack(s) for s in out_states] + [np.stack(s) for s in out_scans])

    return kernel


@op("SequenceMap", since=17)
def make_sequence_map(node: NodeView, ctx: ProviderContext):
    body = _runner(node, ctx, "body")
    outer = _outer_picker(node, body)
    n_explicit = len(node.inputs)
    n_out = len(body.output_names)

    def kernel(*args):
        explicit = args[:n_explicit]
        outer_vals = outer(args)
        n = len(explicit[0])
        results: list[list[Any]] = [[] for _ in range(n_out)]
        for i in range(n):
            ins = [x[i] if isinstance(x, list) else x for x in explicit]
            out = body(*ins, *outer_vals)
            for k in range(n_out):
                results[k].append(out[k])
        return tuple(results)

    return kernel
