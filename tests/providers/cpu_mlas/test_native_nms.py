"""NonMaxSuppression's native selection (``_mlas_native.nms``, nms.h): the numpy kernel's
selection exactly (ties, NaN scores and coordinates, empty and flipped boxes, thresholds,
limits), and onnxruntime's on a detector-sized case."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplex.providers.cpu_mlas import vision
from onnxplex.providers.cpu_mlas._native import native

from ._oracle import ort_run, ours

pytestmark = pytest.mark.skipif(native() is None or not hasattr(native(), "nms"),
                                reason="the _mlas_native module is not built")


def _case(rng, nb, nc, n, *, ties=False, nans=False, degenerate=False):
    yx = rng.uniform(0, 10, (nb, n, 2))
    hw = rng.uniform(0.5, 4, (nb, n, 2))
    boxes = np.concatenate([yx, yx + hw], axis=-1)
    flip = rng.random((nb, n)) < 0.3   # corners given in either order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = rng.random((nb, nc, n))
    if ties:
        scores = np.round(scores * 4) / 4
    if degenerate:
        boxes[:, ::7, 2] = boxes[:, ::7, 0]   # zero height
    if nans:
        scores[:, :, ::5] = np.nan
        boxes[:, 3::11, 1] = np.nan
    return boxes.astype(np.float32), scores.astype(np.float32)


def _both(monkeypatch, args, **attrs):
    got = ours("NonMaxSuppression", args, opset=11, **attrs)
    monkeypatch.setattr(vision, "native", lambda: None)
    want = ours("NonMaxSuppression", args, opset=11, **attrs)
    return got[0], want[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["plain", "ties", "nans", "degenerate"])
@pytest.mark.parametrize("center", [0, 1])
def test_native_selection_is_the_numpy_selection(monkeypatch, seed, kind, center):
    rng = np.random.default_rng(seed)
    nb, nc, n = 1 + seed % 2, 1 + seed % 3, 40 + 9 * seed
    boxes, scores = _case(rng, nb, nc, n, ties=kind == "ties", nans=kind == "nans",
                          degenerate=kind == "degenerate")
    max_out = np.array([[0, 3, 10, 1000][seed % 4]], np.int64)
    iou = np.array([[0.3, 0.5, 0.0, 0.9][seed % 4]], np.float32)
    args = [boxes, scores, max_out, iou]
    if seed % 2:
        args.append(np.array([0.4], np.float32))
    got, want = _both(monkeypatch, args, center_point_box=center)
    assert got.dtype == np.int64 and got.shape[1:] == (3,)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["class_offsets", "wide", "far", "nans", "ties"])
@pytest.mark.parametrize("iou", [0.5, 0.0, -0.1])
def test_many_boxes_take_the_grid_and_select_the_same(monkeypatch, seed, kind, iou):
    """From 256 candidates on, nms.h bins the selected boxes in a grid of cells (the median box
    size) and compares a candidate only with its cells' boxes: the same selection as the numpy
    kernel's, with boxes over many cells, coordinates too large for cell numbers, boxes in
    clusters far apart (a detector's class-offset batched NMS), NaNs, ties and the threshold
    at or below 0."""
    rng = np.random.default_rng(100 + seed)
    n = 600 + 150 * seed
    boxes, scores = _case(rng, 1, 2, n, ties=kind == "ties", nans=kind == "nans")
    if kind == "class_offsets":
        boxes += (np.arange(n) % 23 * 50.0)[None, :, None].astype(np.float32)
    elif kind == "wide":
        boxes[:, ::17, 2:] += 1e4
    elif kind == "far":
        boxes[:, ::13] += np.float32(1e30)
    args = [boxes, scores, np.array([[n, 50, n, 7][seed]], np.int64),
            np.array([iou], np.float32)]
    got, want = _both(monkeypatch, args)
    np.testing.assert_array_equal(got, want)
    assert len(got) > 0


def test_detector_sized_case_matches_onnxruntime():
    """Thousands of overlapping boxes of one class (a detector's batched NMS)."""
    rng = np.random.default_rng(11)
    boxes, scores = _case(rng, 1, 1, 3000)
    args = [boxes, scores, np.array([300], np.int64), np.array([0.5], np.float32),
            np.array([0.05], np.float32)]
    got = ours("NonMaxSuppression", args, opset=11)[0]
    want = ort_run("NonMaxSuppression", args, opset=11)[0]
    assert len(got) == 300
    np.testing.assert_array_equal(got, want)


def test_binding_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"corners must be \[nb, n, 4\]"):
        native().nms(np.zeros((1, 5, 4)), np.zeros((1, 2, 6)), 10, 0.5, None)
