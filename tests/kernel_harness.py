"""Run one ONNX node through a provider's kernel, without a session (for kernel unit tests)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper

from onnxplex import ProviderContext, load_model
from onnxplex._dtypes import onnx_elem_type


def node_model(op_type: str, inputs: Sequence[np.ndarray | None], n_outputs: int = 1, *,
               opset: int = 21, domain: str = "", const_inputs: Sequence[int] = (),
               node_attrs: dict | None = None, **attrs) -> onnx.ModelProto:
    """A one-node model; inputs listed in ``const_inputs`` become initializers.
    ``node_attrs``: more attributes, for names this function's keywords take (QLinearSoftmax's
    ``opset``)."""
    attrs.update(node_attrs or {})
    in_names, graph_inputs, inits = [], [], []
    for i, arr in enumerate(inputs):
        if arr is None:
            in_names.append("")
            continue
        name = f"in{i}"
        in_names.append(name)
        if i in const_inputs:
            inits.append(onnx.numpy_helper.from_array(np.asarray(arr), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, onnx_elem_type(np.asarray(arr).dtype), np.asarray(arr).shape))
    out_names = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, in_names, out_names, domain=domain or None, **attrs)
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
               for o in out_names]
    graph = helper.make_graph([node], "g", graph_inputs, outputs, initializer=inits)
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def run_kernel(provider_cls, op_type: str, inputs: Sequence[np.ndarray | None],
               n_outputs: int = 1, *, opset: int = 21, domain: str = "",
               const_inputs: Sequence[int] = (), **attrs) -> tuple[np.ndarray, ...]:
    """Build the node, look it up in the provider's op table, build and call its kernel."""
    model = load_model(node_model(op_type, inputs, n_outputs, opset=opset, domain=domain,
                                  const_inputs=const_inputs, **attrs))
    node = model.node_views[0]
    config, reason = provider_cls.op_table.lookup(node)
    assert config is not None, reason
    kernel = config.factory(node, ProviderContext())
    # As the executor does: constants as loaded (read-only), other inputs read-only too, so a
    # kernel that writes into its inputs fails here.
    args = []
    for i, a in enumerate(inputs):
        if a is None:
            args.append(None)
        elif i in const_inputs:
            args.append(node.inputs[i].const)
        else:
            view = np.asarray(a).view()
            view.flags.writeable = False
            args.append(view)
    with np.errstate(all="ignore"):   # as a session runs its kernels
        out = kernel(*args)
    return out if isinstance(out, tuple) else (out,)
