"""Random inputs from a session's declared input shapes (CLI, optimizer verification)."""

from __future__ import annotations

import numpy as np

from ._dtypes import np_dtype
from ._graph import check_tensor_size

__all__ = ["random_feeds"]


def random_feeds(session, seed: int = 0, dim: int = 1) -> dict[str, np.ndarray]:
    """Random inputs from the declared shapes (symbolic/unknown dims become ``dim``); raises
    :class:`onnxplex.TensorSizeError` for an input too large to allocate."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        info = session._input_infos[arg.name]
        shape = [d if isinstance(d, int) else dim for d in (info.shape or ())]
        # declared static dims were checked at load; with symbolic dims filled in, check again
        check_tensor_size(shape, info.elem_type, f"random input {arg.name!r}")
        dt = np_dtype(info.elem_type) if info.elem_type is not None else np.dtype(np.float32)
        if dt.kind == "f" or dt.name in ("bfloat16",) or "float8" in dt.name:
            arr = rng.standard_normal(shape).astype(dt)
        elif dt.kind in "iu":
            arr = rng.integers(0, _index_bound(session, arg.name, 8), size=shape).astype(dt)
        elif dt.kind == "b":
            arr = rng.integers(0, 2, size=shape).astype(bool)
        elif dt == np.dtype(object):
            arr = np.full(shape, "a", dtype=object)
        else:
            arr = np.zeros(shape, dt)
        feeds[arg.name] = arr
    return feeds


def _index_bound(session, name: str, default: int) -> int:
    """An exclusive upper bound for random integers fed to ``name``: ``default``, lowered to
    the size of the gathered axis when the input indexes a Gather (token ids, segment ids):
    a random id past an embedding table's rows would only make the run fail."""
    bound = default
    model = session.model
    for i in model.consumer_indices.get(name, ()):
        node = model.node_views[i]
        indices, data = node.input(1), node.input(0)
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or \
                indices is None or indices.name != name or data is None or not data.shape:
            continue
        axis = int(node.attr("axis", 0))
        size = data.shape[axis] if -len(data.shape) <= axis < len(data.shape) else None
        if isinstance(size, int) and size > 0:
            bound = min(bound, size)
    return bound
