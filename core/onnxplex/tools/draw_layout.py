"""A layered (Sugiyama-style) layout of a directed acyclic graph, in pure Python.

The graph pictures (``onnxplex partition --format svg|html``) need positions for a few hundred
nodes without a graphviz binary. The steps are the classic ones, kept simple:

1. *Ranks*: the longest path from a source (so every edge points down). Nodes that no pinned
   node (the graph inputs) reaches -- constant subgraphs -- are pulled down to just above their
   first reader instead of piling up in the first row.
2. *Long edges* get one invisible "dummy" item per rank they cross. The long edges leaving one
   node share one chain of dummies (a trunk that readers branch off), which keeps a value read
   by many later nodes (an attention mask, a residual) from adding one column per reader.
3. *Order within a rank*: barycentre sweeps down and up, keeping the ordering with the fewest
   edge crossings. Items of one group (a fused partition) stay next to each other, so a
   group's outline per rank is one interval.
4. *x coordinates*: each rank is placed as close as possible to the mean position of its
   neighbours in the rank above, subject to keeping the order and the minimum separation --
   a weighted isotonic regression, solved exactly with pool-adjacent-violators.

Everything is deterministic: ties fall back to the input order.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Layout", "layered_layout"]

NODE_GAP = 18.0      # horizontal space between two boxes
DUMMY_GAP = 8.0      # ... when one of them is an edge passing through the rank
GROUP_GAP = 22.0     # extra space where one group (partition) ends and another item begins
OUTLINE_PAD = 7.0    # group outline distance from its boxes (must stay < GROUP_GAP / 2 + gaps)
SWEEPS = 8


@dataclass
class _Item:
    rank: int
    width: float
    group: Hashable | None
    seq: float                    # input order, the tie-break everywhere
    key: str | None = None        # None for a dummy
    anchored: bool = True         # reached from a pinned item (False: constant subgraphs)
    up: list[int] = field(default_factory=list)
    down: list[int] = field(default_factory=list)


@dataclass
class Layout:
    """Positions from :func:`layered_layout` (pixels; y grows downwards).

    ``x``/``y`` are box centres per node key; ``edges`` holds one polyline per input edge, in
    input order (start at the bottom of the source box, end at the top of the target box).
    """

    x: dict[str, float]
    y: dict[str, float]
    rank: dict[str, int]
    edges: list[list[tuple[float, float]]]
    width: float
    height: float
    node_height: float
    _items: list[_Item]
    _xs: list[float]
    _ys: list[float]

    def outlines(self, group: Hashable) -> list[list[tuple[float, float]]]:
        """Closed polygons around every item of ``group`` (one per run of consecutive ranks):
        per rank the interval its boxes (and the edges inside it) span, joined rank to rank."""
        spans: dict[int, list[float]] = {}
        for it, x in zip(self._items, self._xs):
            if it.group != group:
                continue
            lo, hi = x - it.width / 2, x + it.width / 2
            s = spans.setdefault(it.rank, [lo, hi])
            s[0], s[1] = min(s[0], lo), max(s[1], hi)
        ranks = sorted(spans)
        runs: list[list[int]] = []
        for r in ranks:
            if runs and runs[-1][-1] == r - 1:
                runs[-1].append(r)
            else:
                runs.append([r])
        half = self.node_height / 2 + OUTLINE_PAD
        row_y = {it.rank: y for it, y in zip(self._items, self._ys)}
        polys = []
        for run in runs:
            left = [p for r in run for p in ((spans[r][0] - OUTLINE_PAD, row_y[r] - half),
                                             (spans[r][0] - OUTLINE_PAD, row_y[r] + half))]
            right = [p for r in reversed(run)
                     for p in ((spans[r][1] + OUTLINE_PAD, row_y[r] + half),
                               (spans[r][1] + OUTLINE_PAD, row_y[r] - half))]
            polys.append(left + right)
        return polys


def layered_layout(keys: Sequence[str], widths: Mapping[str, float],
                   edges: Sequence[tuple[str, str]], *,
                   groups: Mapping[str, Hashable] | None = None,
                   pinned: Sequence[str] = (), node_height: float = 34.0,
                   row_gap: float = 30.0, margin: float = 20.0) -> Layout:
    """Lay out the DAG ``keys`` / ``edges`` top to bottom.

    ``widths`` gives each box's width; ``groups`` maps keys to a group id (kept contiguous per
    rank; missing keys have none); ``pinned`` keys (graph inputs) anchor the ranks: nodes they
    do not reach are placed just above their readers. Raises ``ValueError`` on a cycle or an
    edge naming an unknown key.
    """
    groups = groups or {}
    index = {k: i for i, k in enumerate(keys)}
    n = len(keys)
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        if a not in index or b not in index:
            raise ValueError(f"edge {a!r} -> {b!r} names a node that is not in the graph")
        u, v = index[a], index[b]
        if v not in succ[u]:
            succ[u].append(v)
            pred[v].append(u)
    topo = _topological(n, succ, pred)
    rank, reached = _ranks(topo, succ, pred, [index[k] for k in pinned if k in index])

    seq = {v: k for k, v in enumerate(topo)}
    items = [_Item(rank[i], float(widths[k]), groups.get(k), float(seq[i]), k,
                   anchored=i in reached or not reached)
             for i, k in enumerate(keys)]
    paths = _add_dummies(items, succ, rank, [(index[a], index[b]) for a, b in edges])
    layers: list[list[int]] = [[] for _ in range(max(rank, default=0) + 1)]
    for i in sorted(range(len(items)), key=lambda i: items[i].seq):
        layers[items[i].rank].append(i)
    layers = _order(items, layers)
    xs = _positions(items, layers)

    lo = min((xs[i] - items[i].width / 2 for i in range(len(items))), default=0.0)
    xs = [x - lo + margin for x in xs]
    pitch = node_height + row_gap
    ys = [margin + node_height / 2 + it.rank * pitch for it in items]
    half = node_height / 2
    polylines = []
    for path in paths:
        pts = [(xs[path[0]], ys[path[0]] + half)]
        for d in path[1:-1]:
            pts += [(xs[d], ys[d] - half), (xs[d], ys[d] + half)]
        pts.append((xs[path[-1]], ys[path[-1]] - half))
        polylines.append(pts)
    width = max((xs[i] + items[i].width / 2 for i in range(len(items))), default=0.0) + margin
    height = margin * 2 + len(layers) * pitch - row_gap
    return Layout({k: xs[i] for i, k in enumerate(keys)}, {k: ys[i] for i, k in enumerate(keys)},
                  {k: rank[i] for i, k in enumerate(keys)}, polylines, width, height,
                  node_height, items, xs, ys)


def _topological(n: int, succ: list[list[int]], pred: list[list[int]]) -> list[int]:
    """Kahn's algorithm, smallest index first (the input order when it is already valid)."""
    import heapq

    missing = [len(p) for p in pred]
    ready = [i for i in range(n) if not missing[i]]
    heapq.heapify(ready)
    out = []
    while ready:
        u = heapq.heappop(ready)
        out.append(u)
        for v in succ[u]:
            missing[v] -= 1
            if not missing[v]:
                heapq.heappush(ready, v)
    if len(out) != n:
        raise ValueError("the graph has a cycle; a layered layout needs a DAG")
    return out


def _ranks(topo: list[int], succ: list[list[int]], pred: list[list[int]],
           pinned: list[int]) -> tuple[list[int], set[int]]:
    rank = [0] * len(topo)
    for v in topo:
        rank[v] = max((rank[u] + 1 for u in pred[v]), default=0)
    reached = set(pinned)
    for v in topo:
        if v in reached:
            reached.update(succ[v])
    for v in reversed(topo):   # constant subgraphs: as late as their readers allow
        if v not in reached and succ[v]:
            rank[v] = min(rank[w] for w in succ[v]) - 1
    return rank, reached


def _add_dummies(items: list[_Item], succ: list[list[int]], rank: list[int],
                 edges: list[tuple[int, int]]) -> list[list[int]]:
    """Give each node's long out-edges one shared chain of dummies; return each edge's path."""
    chains: dict[int, dict[int, int]] = {}
    for u, readers in enumerate(succ):
        far = [w for w in readers if rank[w] > rank[u] + 1]
        if not far:
            continue
        chain: dict[int, int] = {}
        prev = u
        for r in range(rank[u] + 1, max(rank[w] for w in far)):
            # The trunk belongs to the source's group while every reader further down does.
            later = [w for w in far if rank[w] > r]
            g = items[u].group
            if g is not None and any(items[w].group != g for w in later):
                g = None
            d = len(items)
            items.append(_Item(r, 0.0, g, items[u].seq + 0.5, anchored=items[u].anchored))
            _link(items, prev, d)
            chain[r] = prev = d
        for w in far:
            _link(items, chain[rank[w] - 1], w)
        chains[u] = chain
    for u, readers in enumerate(succ):
        for w in readers:
            if rank[w] == rank[u] + 1:
                _link(items, u, w)
    return [[u, *(chains[u][r] for r in range(rank[u] + 1, rank[w])), w] for u, w in edges]


def _link(items: list[_Item], a: int, b: int) -> None:
    if b not in items[a].down:
        items[a].down.append(b)
        items[b].up.append(a)


def _order(items: list[_Item], layers: list[list[int]]) -> list[list[int]]:
    best = [list(layer) for layer in layers]
    best_cross = _crossings(items, best)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        rng = range(1, len(layers)) if down else range(len(layers) - 2, -1, -1)
        for r in rng:
            ref = layers[r - 1] if down else layers[r + 1]
            pos = {v: k for k, v in enumerate(ref)}
            bary = {}
            for k, i in enumerate(layers[r]):
                nb = [pos[j] for j in (items[i].up if down else items[i].down) if j in pos]
                bary[i] = sum(nb) / len(nb) if nb else float(k) * len(ref) / max(1, len(layers[r]))
            layers[r] = _grouped_sort(items, layers[r], bary)
        c = _crossings(items, layers)
        if c < best_cross:
            best, best_cross = [list(layer) for layer in layers], c
    return best


def _grouped_sort(items: list[_Item], layer: list[int], bary: dict[int, float]) -> list[int]:
    """Sort by barycentre, keeping the members of a group next to each other (ordered by the
    group's mean barycentre)."""
    blocks: dict[Hashable, list[int]] = {}
    for i in layer:
        g = items[i].group
        blocks.setdefault(("g", g) if g is not None else ("i", i), []).append(i)

    def block_key(members: list[int]) -> tuple[float, float]:
        return (sum(bary[i] for i in members) / len(members), min(items[i].seq for i in members))

    out = []
    for members in sorted(blocks.values(), key=block_key):
        out += sorted(members, key=lambda i: (bary[i], items[i].seq))
    return out


def _crossings(items: list[_Item], layers: list[list[int]]) -> int:
    total = 0
    for r in range(len(layers) - 1):
        below = {v: k for k, v in enumerate(layers[r + 1])}
        segs = sorted((a, below[d]) for a, i in enumerate(layers[r]) for d in items[i].down
                      if d in below)
        # pairs (a1 < a2) with b1 > b2 cross: count inversions of the b sequence
        total += _inversions([b for _, b in segs])
    return total


def _inversions(seq: list[int]) -> int:
    if len(seq) < 2:
        return 0
    mid = len(seq) // 2
    left, right = sorted(seq[:mid]), sorted(seq[mid:])
    count = _inversions(seq[:mid]) + _inversions(seq[mid:])
    j = 0
    for x in left:          # for each x in the left half, right-half values smaller than x
        while j < len(right) and right[j] < x:
            j += 1
        count += j
    return count


def _separation(a: _Item, b: _Item) -> float:
    gap = NODE_GAP if (a.key is not None and b.key is not None) else DUMMY_GAP
    if a.group != b.group and (a.group is not None or b.group is not None):
        gap += GROUP_GAP
    return (a.width + b.width) / 2 + gap


def _positions(items: list[_Item], layers: list[list[int]]) -> list[float]:
    """x per item. Each rank, top to bottom, is placed as close as its order and separation
    allow to where its items want to be: under the mean of their producers, weighted by how
    many there are (edges passing through weigh more, so long edges stay straight). Items
    with nothing above them (graph inputs) and constant subgraphs want to be over their
    readers but weigh almost nothing: they move aside rather than push the main flow sideways, which
    otherwise drifts a little further every rank on a deep network."""
    xs = [0.0] * len(items)
    offsets: list[list[float]] = []
    for layer in layers:
        off = [0.0]
        for a, b in zip(layer, layer[1:]):
            off.append(off[-1] + _separation(items[a], items[b]))
        offsets.append(off)
        mid = off[-1] / 2 if off else 0.0
        for i, o in zip(layer, off):
            xs[i] = o - mid
    for _ in range(3):
        for layer, off in zip(layers, offsets):
            want, weight = [], []
            for i in layer:
                it = items[i]
                # the main flow follows the main flow: weights read from constant subgraphs
                # (four BatchNormalization parameters) must not pull it sideways
                up = [j for j in it.up if items[j].anchored] or it.up
                if up and it.anchored:
                    want.append(sum(xs[j] for j in up) / len(up))
                    weight.append(2.0 if it.key is None else float(len(up)))
                else:
                    nb = it.down
                    want.append(sum(xs[j] for j in nb) / len(nb) if nb else xs[i])
                    weight.append(1e-6)
            placed = _isotonic([w - o for w, o in zip(want, off)], weight)
            for i, p, o in zip(layer, placed, off):
                xs[i] = p + o
    return xs


def _isotonic(values: list[float], weights: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in weighted least squares (pool
    adjacent violators)."""
    blocks: list[list[float]] = []   # [mean, weight, count]
    for v, w in zip(values, weights):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    out = []
    for m, _, c in blocks:
        out += [m] * int(c)
    return out
