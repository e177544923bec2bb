"""The provider contract: OpTable-derived capability, options, context."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import chain
from onnx import TensorProto

import onnxplex
from onnxplex import ExecutionProvider, OpTable, Option, ProviderContext
from onnxplex.framework.plugins import unregister_provider

TABLE = OpTable()


@TABLE.register("Relu", since=6, until=13, dtypes={"T": {TensorProto.FLOAT}})
def _relu_v6(node, ctx):
    return lambda x: np.maximum(x, np.float32(0))


@TABLE.register("Relu", since=14, dtypes={"T": {TensorProto.FLOAT}})
def _relu_v14(node, ctx):
    return lambda x: np.maximum(x, np.float32(0))


@TABLE.register("LeakyRelu", since=6,
                predicate=lambda n: None if n.attr("alpha", 0.01) > 0 else "alpha must be > 0")
def _leaky(node, ctx):
    alpha = np.float32(node.attr("alpha", 0.01))
    return lambda x: np.where(x > 0, x, x * alpha)


class TableProvider(ExecutionProvider):
    name = "table"
    op_table = TABLE
    option_specs = {"level": Option(1, int, "a number", check=lambda v: None if v >= 0
                                    else "must be >= 0")}
    contexts: list[ProviderContext] = []

    def __init__(self, options=None, *, context=None):
        super().__init__(options, context=context)
        type(self).contexts.append(self.context)


@pytest.fixture
def table():
    TableProvider.contexts = []
    onnxplex.register_provider(TableProvider)
    yield TableProvider
    unregister_provider("table")


def _model_at(view_op, opset):
    return onnxplex.load_model(chain([view_op], opset=opset)).node_views[0]


def test_lookup_picks_newest_since_within_range():
    cfg, _ = TABLE.lookup(_model_at("Relu", 13))
    assert cfg.factory is _relu_v6
    cfg, _ = TABLE.lookup(_model_at("Relu", 21))
    assert cfg.factory is _relu_v14
    cfg, why = TABLE.lookup(_model_at("Relu", 5))
    assert cfg is None and "outside the supported opset range" in why


def test_lookup_answers_once_per_view_until_a_config_is_added():
    calls = []
    table = OpTable()

    @table.register("Relu", since=6, predicate=lambda n: calls.append(n) or None)
    def _relu(node, ctx):
        return np.negative

    view = _model_at("Relu", 17)
    first = table.lookup(view)
    assert table.lookup(view) == first and len(calls) == 1   # asked once per view
    table.lookup(_model_at("Relu", 17))                       # another view: asked again
    assert len(calls) == 2

    @table.register("Relu", since=14, predicate=lambda n: "declined by the newer config")
    def _relu14(node, ctx):
        return np.negative

    assert table.lookup(view) == (None, "declined by the newer config")


def test_dtype_and_predicate_declines_have_reasons(table):
    m = chain(["Relu", "LeakyRelu"], opset=17)
    m.graph.node[1].attribute.add(name="alpha", f=-1.0, type=1)
    sess = onnxplex.InferenceSession(m, providers=["table"])
    plan = sess.get_provider_assignment()
    assert plan.assignment() == {"A": "table", "B": "cpu_mlas"}
    assert plan.placements[1].declined == (("table", "alpha must be > 0"),)

    m = chain(["Relu"], opset=17)
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    sess = onnxplex.InferenceSession(m, providers=["table"])
    (p,) = sess.get_provider_assignment().placements
    assert p.provider == "cpu_mlas"
    assert p.declined == (("table", "type T is double, supported: float"),)
    x = np.array([[-1.0, 2.0, 3.0]] * 2)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_intra_op_threads_and_config_reach_providers(table):
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("custom.key", "v")
    onnxplex.InferenceSession(chain(["Relu"]), so, providers=["table"])
    (ctx,) = table.contexts
    assert ctx.intra_op_num_threads == 1 and ctx.session_config["custom.key"] == "v"


def test_option_conversion_and_check(table):
    s = onnxplex.InferenceSession(chain(["Relu"]), providers=[("table", {"level": "3"})])
    assert s.get_provider_options()["table"] == {"level": "3"}
    with pytest.raises(onnxplex.ProviderOptionError, match="must be >= 0"):
        onnxplex.InferenceSession(chain(["Relu"]), providers=[("table", {"level": -1})])
    with pytest.raises(onnxplex.ProviderOptionError, match="must be int"):
        onnxplex.InferenceSession(chain(["Relu"]), providers=[("table", {"level": "x"})])
    # ORT-style parallel provider_options list
    s = onnxplex.InferenceSession(chain(["Relu"]), providers=["table"],
                                  provider_options=[{"level": 5}])
    assert s.get_provider_options()["table"]["level"] == "5"


def test_registered_name_must_match_class():
    onnxplex.register_provider("test_provider:TableProvider", name="other_name")
    try:
        with pytest.raises(onnxplex.PluginLoadError, match="must match"):
            onnxplex.framework.plugins.provider_entry("other_name").load()
    finally:
        unregister_provider("other_name")
