"""Pictures: ``onnxplex partition --format svg|html|dot`` and ``onnxplex profile --png``."""

from __future__ import annotations

import html.parser
import re
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from graphs import chain
from models import light_model_paths, transformer_encoder, transformer_feed
from onnx import TensorProto, helper, numpy_helper
from test_charts import has_colour, read_png

import onnxplex as ort
from onnxplex.tools.cli import main
from onnxplex.tools.draw import GraphPicture, _distinct_labels, provider_colors, tint
from onnxplex.tools.draw_layout import layered_layout

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module", autouse=True)
def _delegate_own_kernels():
    """The pictures need the delegate to claim the encoder's partitions: its own kernels (on
    x86 with cpu_mlas's native ones its policy leaves a transformer's ops to cpu_mlas)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ONNXPLEX_XNNPACK_MLAS", "0")
        yield


@pytest.fixture(scope="module")
def mixed_session():
    """The test transformer on xnnpack_like + cpu_mlas: fused partitions, and the shape
    plumbing falling back to cpu_mlas with a reason per node."""
    return ort.InferenceSession(transformer_encoder().SerializeToString(),
                                providers=["xnnpack_like", "cpu_mlas"])


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("pictures") / "encoder.onnx"
    onnx.save(transformer_encoder(), path)
    return path


def _svg_nodes(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-node"): g for g in root.iter(f"{SVG}g")
            if "op" in (g.get("class") or "").split()}


def _box(g: ET.Element) -> tuple[float, float, float, float]:
    r = g.find(f"{SVG}rect")
    x, y = float(r.get("x")), float(r.get("y"))
    return x, y, x + float(r.get("width")), y + float(r.get("height"))


def _polygons(d: str) -> list[list[tuple[float, float]]]:
    return [[tuple(map(float, p.split(","))) for p in re.findall(r"-?[\d.]+,-?[\d.]+", sub)]
            for sub in d.split("Z") if sub.strip()]


def _inside(pt: tuple[float, float], poly: list[tuple[float, float]]) -> bool:
    """Ray casting; points on the boundary count as outside or inside arbitrarily."""
    x, y = pt
    hit = False
    for (x1, y1), (x2, y2) in zip(poly, poly[1:] + poly[:1]):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            hit = not hit
    return hit


def _members(g: ET.Element) -> list[str]:
    """The node names a box draws: its own, or those of a collapsed (compact) box."""
    return (g.get("data-nodes") or g.get("data-node")).split(" ")


def test_svg_nodes_colours_partitions_and_fallbacks(mixed_session, model_path, tmp_path, capsys):
    out = tmp_path / "placement.svg"
    assert main(["partition", str(model_path), "--providers", "xnnpack_like,cpu_mlas",
                 "--format", "svg", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG}svg"
    # the encoder is deeper than AUTO_COMPACT_RANKS rows: the command draws it compact
    _check_placement_svg(root, mixed_session, compact=True)
    full = GraphPicture.from_session(mixed_session, compact=False)
    _check_placement_svg(ET.fromstring(full.to_svg()), mixed_session, compact=False)
    # --compact no: every node its own box, from the command line too
    assert main(["partition", str(model_path), "--providers", "xnnpack_like,cpu_mlas",
                 "--format", "svg", "--compact", "no", "-o", str(out)]) == 0
    _check_placement_svg(ET.parse(out).getroot(), mixed_session, compact=False)


def _check_placement_svg(root: ET.Element, session, compact: bool) -> None:
    plan = session.get_provider_assignment()
    nodes = _svg_nodes(root)
    # every node is drawn exactly once, in its own box or in a collapsed one
    drawn = [name for g in nodes.values() for name in _members(g)]
    assert sorted(drawn) == sorted(p.name for p in plan.placements) and len(drawn) == 93
    assert (len(nodes) < 60) == compact and (len(nodes) == 93) != compact
    box_of = {name: g for g in nodes.values() for name in _members(g)}
    colors = provider_colors(plan.providers)
    assert len(set(colors.values())) == 2
    fell = {p.name: p.fell_back for p in plan.placements}
    for p in plan.placements:
        g = box_of[p.name]
        assert g.get("data-provider") == p.provider
        assert g.find(f"{SVG}rect").get("fill") == tint(colors[p.provider], 0.6)
        hover = g.find(f"{SVG}title").text
        assert p.op_type in hover and p.name in hover and p.provider in hover
        # fallback nodes are marked, with every reason of the placement report
        assert (g.get("data-fallback") == "1") == any(fell[n] for n in _members(g))
        for prov, reason in p.declined:
            assert f"declined by {prov}: {reason}" in hover
    assert sum(p.fell_back for p in plan.placements) == 19   # the shape plumbing
    # inputs and output appear too
    io = {g.get("data-node") for g in root.iter(f"{SVG}g")
          if (g.get("class") or "").split()[1:2] in (["input"], ["output"])}
    assert io == {"input_ids", "attention_mask", "last_hidden_state"}
    # no two boxes overlap
    boxes = sorted(_box(g) for g in nodes.values())
    for k, a in enumerate(boxes):
        for b in boxes[k + 1:]:
            if b[0] >= a[2]:
                break
            assert a[3] <= b[1] or b[3] <= a[1], (a, b)
    # every fused partition is outlined in its provider's colour, around its nodes only
    fused = [p for p in plan.partitions if p.fused]
    outlines = {int(g.get("data-partition")): g for g in root.iter(f"{SVG}g")
                if g.get("class") == "partition"}
    assert set(outlines) == {p.id for p in fused} and len(fused) == 4
    for part in fused:
        path = outlines[part.id].find(f"{SVG}path")
        assert path.get("stroke") == colors[part.provider]
        polys = _polygons(path.get("d"))
        members = {plan.placements[i].name for i in part.nodes}
        for name, g in nodes.items():
            # a collapsed box never spans partitions: all its nodes are in one or none
            assert len({m in members for m in _members(g)}) == 1, _members(g)
            x0, y0, x1, y1 = _box(g)
            centre_in = any(_inside(((x0 + x1) / 2, (y0 + y1) / 2), q) for q in polys)
            assert centre_in == (name in members), (part.id, name)
            if name in members:   # the whole box, not only its centre
                assert any(all(_inside(c, q) for c in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)))
                           for q in polys), (part.id, name)


@pytest.mark.parametrize("compact", [False, True])
def test_svg_edges_run_downwards_and_cross_providers_marked(mixed_session, compact):
    pic = GraphPicture.from_session(mixed_session, compact=compact)
    root = ET.fromstring(pic.to_svg())
    edges = [g for g in root.iter(f"{SVG}g") if (g.get("class") or "").split()[:1] == ["edge"]]
    assert len(edges) == len(pic.edges) > (60 if compact else 93)
    by_key = {n.key: n for n in pic.nodes}
    for g in edges:
        pts = [tuple(map(float, p.split(",")))
               for p in g.find(f"{SVG}polyline").get("points").split()]
        assert all(b[1] >= a[1] for a, b in zip(pts, pts[1:]))   # top to bottom
        a, b = by_key[g.get("data-from")], by_key[g.get("data-to")]
        crosses = a.provider is not None and b.provider is not None and a.provider != b.provider
        assert ("boundary" in g.get("class")) == crosses


class _Collect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.rows: list[list[str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])

    def handle_data(self, data):
        self.text.append(data)
        if self.rows and data.strip():
            self.rows[-1].append(data.strip())


def test_html_has_svg_legend_partitions_and_fallbacks(mixed_session, model_path, tmp_path):
    out = tmp_path / "placement.html"
    assert main(["partition", str(model_path), "--providers", "xnnpack_like,cpu_mlas",
                 "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    parser = _Collect()
    parser.feed(page)
    parser.close()
    assert parser.tags[0] == "html" and "svg" in parser.tags and parser.tags.count("table") == 2
    plan = mixed_session.get_provider_assignment()
    text = " ".join(parser.text)
    assert "xnnpack_like: 74 nodes" in text and "cpu_mlas: 19 nodes" in text
    # rows: 1 header + one per partition, then 1 header + one per fallback node
    assert len(parser.rows) == 1 + len(plan.partitions) + 1 + 19
    fall = [p for p in plan.placements if p.fell_back]
    for p in fall:
        assert any(r[0] == p.name and f"declined by xnnpack_like: {p.declined[0][1]}" in r
                   for r in parser.rows)
    # the embedded SVG is the same picture (compact: the encoder is deep)
    svg = page[page.index("<svg"):page.index("</svg>") + 6]
    boxes = _svg_nodes(ET.fromstring(svg)).values()
    assert sum(len(_members(g)) for g in boxes) == len(plan.placements) > len(boxes)
    assert "Drawn compact" in text


def test_dot_has_every_node_and_a_cluster_per_partition(mixed_session):
    dot = GraphPicture.from_session(mixed_session, "enc", compact=False).to_dot()
    plan = mixed_session.get_provider_assignment()
    assert dot.startswith('digraph "enc" {') and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    declared = set(re.findall(r'^\s*"([^"]+)" \[label=', dot, re.M))
    assert declared == {f"n{p.index}" for p in plan.placements} | {
        "in:input_ids", "in:attention_mask", "out:last_hidden_state"}
    colors = provider_colors(plan.providers)
    for part in (p for p in plan.partitions if p.fused):
        block = dot.split(f"subgraph cluster_p{part.id} {{", 1)[1].split("  }", 1)[0]
        assert set(re.findall(r'^\s*"(n\d+)" \[', block, re.M)) == {f"n{i}" for i in part.nodes}
        assert f'color="{colors[part.provider]}"' in block
    for p in plan.placements:
        line = next(s for s in dot.splitlines() if s.strip().startswith(f'"n{p.index}" [label='))
        assert f'fillcolor="{tint(colors[p.provider], 0.6)}"' in line
        assert ('penwidth=2' in line) == p.fell_back
    edge_lines = re.findall(r'^  "[^"]+" -> "[^"]+" \[', dot, re.M)
    assert len(edge_lines) == len(GraphPicture.from_session(mixed_session, compact=False).edges)
    # compact: a box per chain, declared once, in its partition's cluster
    pic = GraphPicture.from_session(mixed_session, "enc", compact=True)
    dot = pic.to_dot()
    declared = re.findall(r'^\s*"([^"]+)" \[label=', dot, re.M)
    assert sorted(declared) == sorted(n.key for n in pic.nodes) and len(declared) < 60
    for part in (p for p in plan.partitions if p.fused):
        block = dot.split(f"subgraph cluster_p{part.id} {{", 1)[1].split("  }", 1)[0]
        assert set(re.findall(r'^\s*"(n\d+)" \[', block, re.M)) == {
            pic.box_of[f"n{i}"] for i in part.nodes}


def test_large_graphs_stay_legible():
    """ResNet-50 (onnx's light model, 176 nodes) and an unoptimized 12-layer encoder (500+
    nodes): one column of boxes per branch, not one very wide row."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    resnet = next(p for p in light_model_paths() if p.endswith("light_resnet50.onnx"))
    bert = transformer_encoder(layers=12).SerializeToString()
    for model, expect in ((resnet, 170), (bert, 500)):
        sess = ort.InferenceSession(model, so, providers=["xnnpack_like", "cpu_mlas"])
        pic = GraphPicture.from_session(sess, compact=False)
        root = ET.fromstring(pic.to_svg())
        assert len(_svg_nodes(root)) == len(sess.model.nodes) >= expect
        lay = pic.layout()
        widest = max(sum(1 for k in lay.rank if lay.rank[k] == r) for r in set(lay.rank.values()))
        assert lay.width < 300 * widest + 400     # no runaway width from long edges
        assert lay.height < 80 * len(sess.model.nodes)


def residual_net(blocks: int = 16, channels: int = 8) -> onnx.ModelProto:
    """A ResNet-sized graph of ``blocks`` bottlenecks (Conv -> Relu -> Conv -> Relu -> Conv,
    + the block's input, Relu), 115 nodes named as torch names them
    (``/layer2/layer2.1/conv1/Conv``): every conv's name ends the same way, only the layer and
    block tell them apart. One shared 1x1 weight; [1, 8, 4, 4] activations."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w"], ["s0"], name="/stem/conv/Conv"),
             helper.make_node("Relu", ["s0"], ["h0"], name="/stem/relu/Relu")]
    prev = "h0"
    for b in range(blocks):
        p = f"/layer{b // 4 + 1}/layer{b // 4 + 1}.{b % 4}"
        t = prev
        for k in (1, 2, 3):
            nodes.append(helper.make_node("Conv", [t, "w"], [f"{p}c{k}"], name=f"{p}/conv{k}/Conv"))
            t = f"{p}c{k}"
            if k < 3:
                relu = "relu" if k == 1 else "relu_1"
                nodes.append(helper.make_node("Relu", [t], [f"{p}r{k}"], name=f"{p}/{relu}/Relu"))
                t = f"{p}r{k}"
        nodes.append(helper.make_node("Add", [t, prev], [f"{p}a"], name=f"{p}/Add"))
        nodes.append(helper.make_node("Relu", [f"{p}a"], [f"{p}o"], name=f"{p}/relu_2/Relu"))
        prev = f"{p}o"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="/out/Identity"))
    shape = [1, channels, 4, 4]
    g = helper.make_graph(nodes, "residual",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          initializer=[numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _session(model: onnx.ModelProto, level: str = "ORT_ENABLE_ALL"):
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["cpu_mlas"])


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"])
def test_labels_tell_the_nodes_of_an_op_type_apart(level):
    """After optimization every conv is an NhwcFusedConv named '.../FusedConv/nhwc'; each box's
    second line must still say which one it is, in the SVG and the DOT text."""
    sess = _session(residual_net(), level)
    plan = sess.get_provider_assignment()
    convs = [p for p in plan.placements if "Conv" in p.op_type]
    assert len(convs) == 1 + 3 * 16
    if level == "ORT_ENABLE_ALL":   # the names that made every conv read "FusedConv/nhwc"
        assert all(p.name.endswith("FusedConv/nhwc") for p in convs)
    pic = GraphPicture.from_session(sess, compact=False)
    root = ET.fromstring(pic.to_svg())
    seen: dict[tuple[str, str], str] = {}
    for g in _svg_nodes(root).values():
        first, second = (t.text for t in g.findall(f"{SVG}text")[:2])
        assert first == g.get("data-op")
        assert (first, second) not in seen, (second, g.get("data-node"), seen.get((first, second)))
        seen[first, second] = g.get("data-node")
        assert len(second) <= 28
    assert len(seen) == len(plan.placements)
    # the label comes from the name: the block the node is in
    conv_labels = [pic.nodes_by_index(p.index).sub for p in convs]
    assert sum("layer3.2" in t for t in conv_labels) == 3
    dot_labels = re.findall(r'\[label="([^"]+)"', pic.to_dot())
    assert len(set(dot_labels)) == len(dot_labels)


def test_distinct_labels_from_names():
    names = ["n2/FusedConv/nhwc", "n6/FusedConv/nhwc", "n6/FusedConv/nhwc", "",
             "/bert/encoder/layer.0/attention/self/query/MatMul",
             "/bert/encoder/layer.1/attention/self/query/MatMul",
             "/bert/encoder/layer.0/attention/self/key/MatMul",
             "/bert/encoder/layer.0/attention/self/query/Add", "gpu_0/data_0/ToNHWC"]
    ops = ["FusedConv"] * 4 + ["MatMul"] * 3 + ["Add", "Transpose"]
    labels = _distinct_labels(names, ops)
    assert labels[:2] == ["n2", "n6 #1"] and labels[2] == "n6 #2" and labels[3] == "#3"
    # the fewest parts that no other node of the op type holds all of
    assert labels[4:7] == ["layer.0/\u2026/query", "layer.1", "key"]
    assert labels[7] == "query" and labels[8] == "ToNHWC"   # alone of its op: one part
    assert len(_distinct_labels(["a/" + "x" * 40], ["Relu"])[0]) <= 28


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"])
def test_compact_shrinks_a_resnet_sized_graph(level):
    sess = _session(residual_net(), level)
    plan = sess.get_provider_assignment()
    full = GraphPicture.from_session(sess, compact=False)
    auto = GraphPicture.from_session(sess)
    assert auto.compact and not full.compact        # deep: compact unless told otherwise
    assert len(full.nodes) == len(plan.placements) + 2
    svg = ET.fromstring(auto.to_svg())
    boxes = _svg_nodes(svg)
    assert len(boxes) <= len(plan.placements) * 0.7
    assert auto.layout().height <= full.layout().height * 0.6
    assert float(svg.get("height")) <= float(ET.fromstring(full.to_svg()).get("height")) * 0.6
    # each node in exactly one box, boxes of one provider; collapsed boxes say how many
    drawn = [name for g in boxes.values() for name in _members(g)]
    assert sorted(drawn) == sorted(p.name for p in plan.placements)
    chains = [g for g in boxes.values() if g.get("data-count")]
    assert chains and all("chain" in g.get("class") for g in chains)
    for g in chains:
        k = int(g.get("data-count"))
        texts = [t.text for t in g.findall(f"{SVG}text")]
        assert k == len(_members(g)) > 1 and texts[1].startswith(f"{k} nodes: ")
        hover = g.find(f"{SVG}title").text
        assert all(m in hover for m in _members(g))
    if level == "ORT_DISABLE_ALL":   # Conv -> Relu -> Conv -> Relu -> Conv in one box
        assert any(g.get("data-count") == "5" and "Conv" in g.get("data-op") for g in chains)
    # the edges join boxes, top to bottom; the legend says the picture is compact
    keys = {n.key for n in auto.nodes}
    assert all(a in keys and b in keys and a != b for a, b, _ in auto.edges)
    assert "compact:" in auto.to_svg()
    # a shallow graph stays as it is
    small = GraphPicture.from_session(_session(residual_net(blocks=2), level))
    assert not small.compact and not any(n.members for n in small.nodes)


def test_compact_chains_stop_at_branches_and_providers_and_fold_constants():
    """x -> r1 -> r2 -> {Shape, Add}; Shape -> Gather -> output; a ConstantOfShape (a constant
    subgraph: no graph input reaches it) feeds the Add. On xnnpack_like + cpu_mlas the Relus
    and the Add are the delegate's, the shape plumbing falls back to cpu_mlas."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Shape", ["b"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i0"], ["sf"], name="gather"),
             helper.make_node("ConstantOfShape", ["shp"], ["k"], name="const",
                              value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("Add", ["b", "k"], ["y"], name="add")]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("sf", TensorProto.INT64, [])],
        initializer=[numpy_helper.from_array(np.array([2, 3], np.int64), "shp"),
                     numpy_helper.from_array(np.array(0, np.int64), "i0")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["xnnpack_like", "cpu_mlas"])
    runs_on = {p.name: p.provider for p in sess.get_provider_assignment().placements}
    assert runs_on["r1"] == runs_on["r2"] == runs_on["add"] == "xnnpack_like"
    assert runs_on["shape"] == runs_on["gather"] == runs_on["const"] == "cpu_mlas"
    pic = GraphPicture.from_session(sess, compact=True)
    boxes = {n.name: [m.name for m in n.members] or [n.name] for n in pic.nodes
             if n.kind == "op"}
    # r2 feeds two nodes: the chain r1 -> r2 ends there; shape -> gather is a chain of its own
    # (another provider); the constant folds into its reader, whatever runs it
    assert boxes == {"r1": ["r1", "r2"], "shape": ["shape", "gather"], "add": ["const", "add"]}
    add = next(n for n in pic.nodes if n.name == "add")
    assert add.provider == "xnnpack_like" and add.label == "Add \u00d71"
    assert "ConstantOfShape  const  (constant, on cpu_mlas)" in add.hover
    assert add.sub == "2 nodes: add"


def test_layout_ranks_and_constant_subgraphs():
    # x -> a -> b -> c -> d, and a constant k read only by d
    keys = ["x", "a", "b", "c", "k", "d"]
    edges = [("x", "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("k", "d"), ("a", "d")]
    lay = layered_layout(keys, dict.fromkeys(keys, 40), edges, pinned=["x"])
    assert [lay.rank[k] for k in keys] == [0, 1, 2, 3, 3, 4]   # k sits just above its reader
    # the long edge a -> d goes through one dummy per rank it crosses
    assert len(lay.edges[5]) == 2 + 2 * 2
    with pytest.raises(ValueError, match="cycle"):
        layered_layout(["a", "b"], {"a": 1, "b": 1}, [("a", "b"), ("b", "a")])
    with pytest.raises(ValueError, match="not in the graph"):
        layered_layout(["a"], {"a": 1}, [("a", "zz")])


def test_profile_png_timeline_from_a_real_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(transformer_encoder().SerializeToString(), so,
                                providers=["xnnpack_like", "cpu_mlas"])
    for _ in range(2):
        sess.run(None, transformer_feed(1, 8))
    profile = sess.end_profiling()
    png = tmp_path / "timeline.png"
    assert main(["profile", profile, "--png", str(png), "--run", "1"]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    img = read_png(png)
    import json

    events = json.load(open(profile))
    run1 = sorted((e for e in events if e["name"] == "model_run"), key=lambda e: e["ts"])
    node_events = [e for e in events if e["cat"] == "Node"
                   and run1[0]["ts"] <= e["ts"] < run1[1]["ts"]]
    assert img.shape[1] == 1200 and img.shape[0] >= 11 * len(node_events) > 11 * 30
    for prov in ("xnnpack_like", "cpu_mlas"):
        assert has_colour(img, provider_colors([prov])[prov])
    # the default run is the last one; asking for one that does not exist is an error
    assert main(["profile", profile, "--png", str(png)]) == 0
    assert main(["profile", profile, "--png", str(png), "--run", "3"]) == 2
    assert "run 3 does not exist: the profile holds 2 run(s)" in capsys.readouterr().err


def test_profile_png_without_node_events_is_an_error(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "m.onnx"
    onnx.save(chain(["Relu"]), path)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(str(path), so)
    profile = sess.end_profiling()            # no run at all
    assert main(["profile", profile, "--png", str(tmp_path / "t.png")]) == 2
    assert "no node events" in capsys.readouterr().err
    sess = ort.InferenceSession(str(path), so)
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert main(["profile", sess.end_profiling(), "--png", str(tmp_path / "t.png")]) == 0
