"""The channels-last average pool (``_mlas_native.avgpool_nhwc_f32``, the layout level's
AveragePool: DenseNet's transitions, Inception's 3x3 pools) against a float64 reference:
channel counts through every channel path (blocks of four vectors, single vectors, a last
vector overlapping the one before, half vectors, single channels), strides, dilations, uneven
pads, with and without the padding counted, one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

from onnxplex.providers.cpu_mlas._native import native

nat = native()
pytestmark = pytest.mark.skipif(nat is None or not hasattr(nat, "avgpool_nhwc_f32"),
                                reason="the _mlas_native module is not built")
RNG = np.random.default_rng(41)


def avgpool_ref(x, k, s, d, pb, pe, include_pad):
    """[N, H, W, C] -> [N, Ho, Wo, C] in float64: the window's taps inside the input summed,
    divided by their count, or with ``include_pad`` by the taps inside the padded extent."""
    n, h, w, c = x.shape
    ho = (h + pb[0] + pe[0] - ((k[0] - 1) * d[0] + 1)) // s[0] + 1
    wo = (w + pb[1] + pe[1] - ((k[1] - 1) * d[1] + 1)) // s[1] + 1
    y = np.zeros((n, ho, wo, c))
    for oy in range(ho):
        for ox in range(wo):
            total, inside, padded = np.zeros((n, c)), 0, 0
            for i in range(k[0]):
                iy = oy * s[0] + i * d[0] - pb[0]
                for j in range(k[1]):
                    ix = ox * s[1] + j * d[1] - pb[1]
                    if -pb[0] <= iy < h + pe[0] and -pb[1] <= ix < w + pe[1]:
                        padded += 1
                    if 0 <= iy < h and 0 <= ix < w:
                        total += x[:, iy, ix]
                        inside += 1
            count = padded if include_pad else inside
            y[:, oy, ox] = total / count if count else 0.0
    return y


# (H, W, kernel, stride, dilation, pads begin, pads end)
GEOMETRIES = [
    ((9, 10), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),   # Inception's 3x3, same size
    ((8, 8), (2, 2), (2, 2), (1, 1), (0, 0), (0, 0)),    # DenseNet's transitions
    ((7, 9), (3, 2), (2, 1), (1, 2), (2, 0), (0, 1)),    # uneven pads, dilation
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("include_pad", [False, True], ids=["pad_excluded", "pad_counted"])
@pytest.mark.parametrize("c", [64, 80, 100, 24, 5, 288])
@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
def test_avgpool_nhwc_matches_reference(geo, c, include_pad, threads):
    (h, w), k, s, d, pb, pe = geo
    x = RNG.standard_normal((2, h, w, c)).astype(np.float32)
    ref = avgpool_ref(x.astype(np.float64), k, s, d, pb, pe, include_pad)
    y = np.full(ref.shape, np.nan, np.float32)
    nat.avgpool_nhwc_f32(x, y, k, s, d, pb, pe, include_pad, threads)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
