"""Every Kleidi kernel family through the binding, portable reference variant, against numpy.

fp32 families are checked against float64 numpy (and onnxruntime's Conv for ONNX semantics);
the fp16 GEMM bit for bit against numpy's float32 running sum rounded once to float16, and
within its rounding bound of float64;
the quantized families against an independent numpy model of the qai8dx / qsi8cx / qsi4c32
numerics written here from the contract (bit-exact: same fp32 operations in the same order);
the MatMulNBits conversion against onnxruntime's own MatMulNBits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

_kleidi = pytest.importorskip("onnxplex.providers.kleidi_sme2._kleidi")

REF = "reference"
F32 = np.float32
RNG_SEED = 20240605

SHAPES = [(1, 1, 1), (1, 17, 33), (5, 1, 7), (13, 29, 71), (64, 48, 32), (3, 70, 300)]


@pytest.fixture
def rng():
    return np.random.default_rng(RNG_SEED)


def activations(rng, m, k, outlier=1e4, huge=1e30, tiny=1e-30, dtype=F32):
    """Rows of every awkward kind: zero, one-signed, outlier, huge, tiny (scales per dtype)."""
    a = rng.uniform(-2, 2, size=(m, k)).astype(F32)
    for i in range(m):
        kind = i % 7
        if kind == 1:
            a[i] = 0
        elif kind == 2:
            a[i] = np.abs(a[i]) + 0.5
        elif kind == 3:
            a[i] = -np.abs(a[i])
        elif kind == 4:
            a[i, k // 2] = outlier
        elif kind == 5:
            a[i] *= F32(huge)
        elif kind == 6:
            a[i] *= F32(tiny)
    return a.astype(dtype)


# ---- independent numpy model of the quantization numerics -----------------------------------


def round_half_away(x: np.ndarray) -> np.ndarray:
    # float64 keeps |x| + 0.5 exact for float32 x, so this is roundf()
    x64 = x.astype(np.float64)
    return (np.sign(x64) * np.floor(np.abs(x64) + 0.5)).astype(F32)


def qai8dx_model(a: np.ndarray):
    """Per-row asymmetric int8: (q int8, neg_zp int32, scale float32), fp32 step by step."""
    a = a.astype(F32)
    rmin = np.minimum(a.min(axis=1), F32(0))
    rmax = np.maximum(a.max(axis=1), F32(0))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        q = np.where(rmin == rmax, F32(1), F32(255) / (rmax - rmin)).astype(F32)
        scale = np.where(q == 0, F32(0), F32(1) / q).astype(F32)
    dmin, dmax = rmin * q, rmax * q
    zp = np.where((F32(-128) + dmin) + (F32(127) + dmax) > 0, F32(-128) - dmin, F32(127) - dmax)
    zp = np.rint(np.clip(zp, F32(-128), F32(127))).astype(np.int32)  # ties to even
    with np.errstate(invalid="ignore"):
        xq = round_half_away(a * q[:, None]) + zp[:, None].astype(F32)
    xq = np.clip(xq, -128, 127).astype(np.int8)
    return xq, -zp, scale


def qsi8cx_model(a, w_kn, scales, bias, lo=-np.inf, hi=np.inf):
    q, neg_zp, s_a = qai8dx_model(a)
    acc = (q.astype(np.int64) + neg_zp[:, None]) @ w_kn.astype(np.int64)
    y = acc.astype(F32) * (s_a[:, None] * scales[None, :]) + bias[None, :]
    return np.clip(y, F32(lo), F32(hi))


def unpack_nibbles(nib: np.ndarray) -> np.ndarray:
    """uint8 [N, K/2] (even k low) -> int32 [N, K] signed values nibble - 8."""
    lo = (nib & 0x0F).astype(np.int32) - 8
    hi = (nib >> 4).astype(np.int32) - 8
    return np.stack([lo, hi], axis=-1).reshape(nib.shape[0], -1)


def qsi4c32_model(a, nib, scales, bias, lo=-np.inf, hi=np.inf):
    q, neg_zp, s_a = qai8dx_model(a)
    w = unpack_nibbles(nib)  # [N, K]
    n, k = w.shape
    acc = np.zeros((a.shape[0], n), F32)
    rsum = np.zeros(n, F32)
    for b in range(k // 32):
        blk = slice(32 * b, 32 * b + 32)
        isum = q[:, blk].astype(np.int64) @ w[:, blk].T.astype(np.int64)
        acc = acc + isum.astype(F32) * scales[None, :, b]
        rsum = rsum + scales[:, b] * w[:, blk].sum(axis=1).astype(F32)
    y = s_a[:, None] * (acc + neg_zp[:, None].astype(F32) * rsum[None, :]) + bias[None, :]
    return np.clip(y, F32(lo), F32(hi))


# ---- (1) fp32 GEMM --------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_f32_matches_numpy(rng, m, n, k, transpose_b, with_bias):
    a = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    bias = rng.standard_normal(n).astype(F32) if with_bias else None
    packed = _kleidi.pack_gemm_f32(np.ascontiguousarray(b.T) if transpose_b else b, bias,
                                   transpose_b=transpose_b, variant=REF)
    assert (packed.family, packed.variant, packed.n, packed.k) == ("gemm_f32", REF, n, k)
    y = _kleidi.gemm_f32(a, packed)
    want = a.astype(np.float64) @ b + (0 if bias is None else bias)
    bound = np.abs(a).astype(np.float64) @ np.abs(b) + 1e-30
    assert y.dtype == F32 and y.shape == (m, n)
    assert np.all(np.abs(y - want) <= 1e-5 * bound)


def clamped_gemm_1_and_4_threads(rng, dtype, pack, run, lo, hi):
    """(a, b, bias, y) of a 37x19 @ 19x45 GEMM + bias clamped to [lo, hi] by the reference; y
    is also checked to be the same (bit for bit) on 4 threads: tiling never changes a result."""
    a = rng.standard_normal((37, 19)).astype(dtype)
    b = rng.standard_normal((19, 45)).astype(dtype)
    bias = rng.standard_normal(45).astype(dtype)
    packed = pack(b, bias, variant=REF)
    y1 = run(a, packed, clamp_min=lo, clamp_max=hi)
    y4 = run(a, packed, clamp_min=lo, clamp_max=hi, threads=4)
    assert y1.dtype == dtype and y1.tobytes() == y4.tobytes()
    return a, b, bias, y1


@pytest.mark.parametrize("lo,hi", [(0.0, np.inf), (-0.25, 0.25), (-np.inf, -1.0)])
def test_gemm_f32_clamp_and_threads(rng, lo, hi):
    a, b, bias, y = clamped_gemm_1_and_4_threads(rng, F32, _kleidi.pack_gemm_f32,
                                                 _kleidi.gemm_f32, lo, hi)
    want = np.clip(a.astype(np.float64) @ b + bias, lo, hi)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


# ---- (2) fp32 conv by indirect matmul -------------------------------------------------------


def conv_model(x, w, bias, strides, pads, dilations):
    """ONNX Conv, group 1, float64: explicit padding and one slice per kernel tap."""
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = strides, pads, dilations
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, co, oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dh:ky * dh + sh * (oh - 1) + 1:sh,
                       kx * dw:kx * dw + sw * (ow - 1) + 1:sw]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx])
    return y + (0 if bias is None else bias[None, :, None, None])


CONV_CASES = [
    # (N, C_in, H, W, C_out, kH, kW, strides, pads, dilations)
    (1, 3, 9, 11, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (1, 1, 7, 7, 1, 3, 3, (2, 2), (0, 0, 0, 0), (1, 1)),
    (2, 5, 12, 10, 17, 5, 3, (2, 1), (2, 1, 0, 3), (1, 2)),
    (1, 8, 6, 13, 9, 3, 5, (3, 2), (1, 2, 2, 1), (2, 1)),
    (1, 7, 5, 5, 33, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("threads", [1, 3])
def test_conv2d_f32_matches_numpy(rng, case, threads):
    n, c, h, w, co, kh, kw, strides, pads, dil = case
    x = rng.standard_normal((n, c, h, w)).astype(F32)
    wt = rng.standard_normal((co, c, kh, kw)).astype(F32)
    bias = rng.standard_normal(co).astype(F32)
    packed = _kleidi.pack_conv2d_f32(wt, bias, variant=REF)
    y = _kleidi.conv2d_f32(x, packed, strides=strides, pads=pads, dilations=dil,
                           threads=threads)
    want = conv_model(x.astype(np.float64), wt.astype(np.float64), bias, strides, pads, dil)
    bound = conv_model(np.abs(x.astype(np.float64)), np.abs(wt.astype(np.float64)), None,
                       strides, pads, dil) + np.abs(bias)[None, :, None, None]
    assert y.shape == want.shape
    assert np.all(np.abs(y - want) <= 1e-5 * bound)


def test_conv2d_f32_matches_onnxruntime_conv(rng):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    n, c, h, w, co, kh, kw, strides, pads, dil = CONV_CASES[2]
    x = rng.standard_normal((n, c, h, w)).astype(F32)
    wt = rng.standard_normal((co, c, kh, kw)).astype(F32)
    bias = rng.standard_normal(co).astype(F32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(strides),
                            pads=[pads[0], pads[1], pads[2], pads[3]], dilations=list(dil))
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, wt.shape, wt.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, bias.shape, bias)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    y = _kleidi.conv2d_f32(x, _kleidi.pack_conv2d_f32(wt, bias, variant=REF),
                           strides=strides, pads=pads, dilations=dil)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_conv2d_f32_kernel_larger_than_input_is_an_error():
    packed = _kleidi.pack_conv2d_f32(np.ones((1, 1, 5, 5), F32), variant=REF)
    with pytest.raises(ValueError, match="does not fit the padded input"):
        _kleidi.conv2d_f32(np.ones((1, 1, 3, 3), F32), packed)


# ---- (3) dynamic int8 x per-channel int8 ----------------------------------------------------


def test_quantize_qai8dx_matches_model_exactly(rng):
    a = activations(rng, 50, 77)
    a[7, :3] = [0.5 / 255 * 3, -1.5, 2.5]  # ties in x * q
    q, neg_zp, scale = _kleidi.quantize_qai8dx(a)
    mq, mzp, mscale = qai8dx_model(a)
    np.testing.assert_array_equal(scale, mscale)
    np.testing.assert_array_equal(neg_zp, mzp)
    np.testing.assert_array_equal(q, mq)
    # The range includes zero and zero is exact: a zero input quantizes to the zero point.
    assert np.all(q[1] == -neg_zp[1])


def test_quantize_qai8dx_reconstructs_within_half_a_step(rng):
    a = rng.uniform(-3, 5, size=(20, 64)).astype(F32)
    q, neg_zp, scale = _kleidi.quantize_qai8dx(a)
    back = scale[:, None] * (q.astype(F32) + neg_zp[:, None])
    assert np.all(np.abs(back - a) <= scale[:, None] * 0.5 * (1 + 1e-5))


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_qgemm_qsi8cx_matches_model_exactly(rng, m, n, k, transpose_b):
    a = activations(rng, m, k)
    w = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    scales = (rng.uniform(0.001, 0.05, size=n)).astype(F32)
    bias = rng.standard_normal(n).astype(F32)
    packed = _kleidi.pack_qsi8cx(np.ascontiguousarray(w.T) if transpose_b else w, scales, bias,
                                 transpose_b=transpose_b, variant=REF)
    y = _kleidi.qgemm_qsi8cx(a, packed, threads=2)
    np.testing.assert_array_equal(y, qsi8cx_model(a, w, scales, bias))


def test_qgemm_qsi8cx_clamp_and_close_to_float(rng):
    a = rng.standard_normal((9, 64)).astype(F32)
    w = rng.integers(-127, 128, size=(64, 11), dtype=np.int8)
    scales = np.full(11, 0.01, F32)
    bias = np.zeros(11, F32)
    packed = _kleidi.pack_qsi8cx(w, scales, bias, variant=REF)
    y = _kleidi.qgemm_qsi8cx(a, packed, clamp_min=-0.1, clamp_max=0.3)
    np.testing.assert_array_equal(y, qsi8cx_model(a, w, scales, bias, -0.1, 0.3))
    # Against float math: error per term at most half a quantization step of the row.
    _, _, s_a = qai8dx_model(a)
    exact = np.clip(a.astype(np.float64) @ (w * 0.01), -0.1, 0.3)
    bound = 0.5 * s_a[:, None] * (np.abs(w) * 0.01).sum(axis=0)[None, :] * 1.001 + 1e-6
    assert np.all(np.abs(y - exact) <= bound)


# ---- (4) dynamic int8 x blockwise int4 ------------------------------------------------------


@pytest.mark.parametrize("m,n,k", [(1, 1, 32), (1, 33, 64), (7, 5, 96), (21, 18, 256)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_qgemm_qsi4c32_matches_model_exactly(rng, m, n, k, with_bias):
    a = activations(rng, m, k)
    nib = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    scales = rng.uniform(-0.05, 0.05, size=(n, k // 32)).astype(F32)
    bias = rng.standard_normal(n).astype(F32) if with_bias else None
    packed = _kleidi.pack_qsi4c32(nib, scales, bias, variant=REF)
    y = _kleidi.qgemm_qsi4c32(a, packed, threads=3)
    want = qsi4c32_model(a, nib, scales, np.zeros(n, F32) if bias is None else bias)
    np.testing.assert_array_equal(y, want)


def test_qgemm_qsi4c32_clamp(rng):
    a = rng.standard_normal((6, 64)).astype(F32)
    nib = rng.integers(0, 256, size=(10, 32), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.05, size=(10, 2)).astype(F32)
    bias = rng.standard_normal(10).astype(F32)
    packed = _kleidi.pack_qsi4c32(nib, scales, bias, variant=REF)
    y = _kleidi.qgemm_qsi4c32(a, packed, clamp_min=0.0, clamp_max=0.5)
    np.testing.assert_array_equal(y, qsi4c32_model(a, nib, scales, bias, 0.0, 0.5))


def test_int4_k_not_a_multiple_of_the_block_is_a_clear_error():
    with pytest.raises(ValueError, match="not a positive multiple of the int4 block length 32"):
        _kleidi.pack_qsi4c32(np.zeros((4, 20), np.uint8), np.ones((4, 2), F32), variant=REF)


def matmulnbits_inputs(rng, n, k, block_size, zero_points):
    n_blocks = -(-k // block_size)
    b = rng.integers(0, 256, size=(n, n_blocks, block_size // 2), dtype=np.uint8)
    scales = rng.uniform(0.005, 0.05, size=n * n_blocks).astype(F32)
    zp = np.full(n * -(-n_blocks // 2), 0x88, np.uint8) if zero_points else None
    return b, scales, zp


@pytest.mark.parametrize("n,k,block_size,zero_points", [
    (8, 64, 32, False), (13, 96, 32, True), (5, 128, 64, False), (16, 96, 64, True),
    (3, 256, 128, False)])
def test_matmulnbits_conversion_matches_onnxruntime(rng, n, k, block_size, zero_points):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    m = 7
    b, scales, zp = matmulnbits_inputs(rng, n, k, block_size, zero_points)
    a = rng.standard_normal((m, k)).astype(F32)
    inits = [helper.make_tensor("B", TensorProto.UINT8, b.shape, b.tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, scales.shape, scales)]
    inputs = ["A", "B", "scales"]
    if zp is not None:
        inits.append(helper.make_tensor("zp", TensorProto.UINT8, zp.shape, zp.tobytes(),
                                        raw=True))
        inputs.append("zp")
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=block_size)
    graph = helper.make_graph(
        [node], "mnb", [helper.make_tensor_value_info("A", TensorProto.FLOAT, a.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"A": a})

    nib, block_scales = _kleidi.matmulnbits_to_qsu4c32(b, scales, zp, K=k, block_size=block_size)
    # The converted weights dequantize to what onnxruntime multiplies by (fp32, float64 sum).
    w = unpack_nibbles(nib).astype(np.float64) * np.repeat(block_scales, 32, axis=1)
    np.testing.assert_allclose(a.astype(np.float64) @ w.T, want, rtol=1e-4, atol=1e-4)
    # And through the int8 kernel: the only extra error is the activation rounding.
    y = _kleidi.qgemm_qsi4c32(a, _kleidi.pack_qsi4c32(nib, block_scales, variant=REF))
    _, _, s_a = qai8dx_model(a)
    bound = 0.5 * s_a[:, None] * np.abs(w).sum(axis=1)[None, :] * 1.001 + 1e-4
    assert np.all(np.abs(y - want) <= bound)


def test_matmulnbits_asymmetric_zero_points_are_refused(rng):
    b, scales, zp = matmulnbits_inputs(rng, 4, 64, 32, True)
    zp[1] = 0x78  # a zero point of 7
    with pytest.raises(ValueError, match="only symmetric MatMulNBits"):
        _kleidi.matmulnbits_to_qsu4c32(b, scales, zp, K=64, block_size=32)
    with pytest.raises(ValueError, match="not a multiple of 32"):
        _kleidi.matmulnbits_to_qsu4c32(np.ascontiguousarray(b[:, :, :8]), scales, None, K=64,
                                       block_size=16)


# ---- (5) fp16 GEMM --------------------------------------------------------------------------

F16 = np.float16


def gemm_f16_model(a, b_kn, bias, lo=-np.inf, hi=np.inf):
    """The reference's numerics in numpy: float32 running sum over k in order (each product of
    two float16 values is exact in float32), + bias, clip, one rounding to float16."""
    a32, b32 = a.astype(F32), b_kn.astype(F32)
    acc = np.zeros((a.shape[0], b_kn.shape[1]), F32)
    for kk in range(a.shape[1]):
        acc = acc + a32[:, kk:kk + 1] * b32[kk:kk + 1, :]
    if bias is not None:
        acc = acc + bias.astype(F32)
    with np.errstate(over="ignore"):  # beyond 65504 float16 is inf, in numpy as in the kernel
        return np.clip(acc, F32(lo), F32(hi)).astype(F16)


@pytest.mark.parametrize("m,n,k", SHAPES + [(4, 9, 1500)])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_f16_matches_numpy_model_exactly(rng, m, n, k, transpose_b, with_bias):
    # float16 scales: 30 is large (sums past 65504 possible at big K), 1e-3 gives subnormals
    a = activations(rng, m, k, outlier=1000, huge=30, tiny=1e-3, dtype=F16)
    b = rng.uniform(-1, 1, size=(k, n)).astype(F16)
    bias = rng.standard_normal(n).astype(F16) if with_bias else None
    packed = _kleidi.pack_gemm_f16(np.ascontiguousarray(b.T) if transpose_b else b, bias,
                                   transpose_b=transpose_b, variant=REF)
    assert (packed.family, packed.variant, packed.n, packed.k) == ("gemm_f16", REF, n, k)
    y = _kleidi.gemm_f16(a, packed, threads=2)
    assert y.dtype == F16 and y.shape == (m, n)
    want = gemm_f16_model(a, b, bias)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    # And the math: the float32 sum is within ((1 + 2^-24)^(K+1) - 1) M of the exact one
    # (M = sum |a b| + |bias|), then one float16 rounding (half an ulp, 2^-25 if subnormal).
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bias64 = np.zeros(n) if bias is None else bias.astype(np.float64)
    exact = a64 @ b64 + bias64
    mag = np.abs(a64) @ np.abs(b64) + np.abs(bias64)
    bound = np.expm1((k + 1) * np.log1p(2.0**-24)) * mag
    finite = np.isfinite(y)
    assert np.all(np.abs(exact[~finite]) > 65504)  # only a true overflow becomes inf
    err = np.abs(y[finite].astype(np.float64) - exact[finite])
    assert np.all(err <= bound[finite] * (1 + 2.0**-11) + 2.0**-11 * np.abs(exact[finite])
                  + 2.0**-25)


def test_gemm_f16_overflow_and_subnormal_results():
    # Row 0 sums past the float16 range (fp32 accumulation keeps it finite until the final
    # rounding, which gives +-inf); row 1 x column 1 is a float16 subnormal (2^-22 * 64).
    a = np.stack([np.full(64, 2000, F16), np.full(64, 2.0**-12, F16)])
    b = np.ones((64, 3), F16)
    b[:, 1] = 2.0**-10
    b[:, 2] = -1
    y = _kleidi.gemm_f16(a, _kleidi.pack_gemm_f16(b, variant=REF))
    np.testing.assert_array_equal(y.view(np.uint16), gemm_f16_model(a, b, None).view(np.uint16))
    assert y[0].tolist() == [np.inf, 125.0, -np.inf]
    assert y[1].tolist() == [2.0**-6, 2.0**-16, -(2.0**-6)]


@pytest.mark.parametrize("lo,hi", [(0.0, np.inf), (-0.3, 0.7), (-np.inf, -1.0), (-1e30, 1e30)])
def test_gemm_f16_clamp_and_threads(rng, lo, hi):
    a, b, bias, y = clamped_gemm_1_and_4_threads(rng, F16, _kleidi.pack_gemm_f16,
                                                 _kleidi.gemm_f16, lo, hi)
    want = gemm_f16_model(a, b, bias, lo, hi)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    # Bounds float16 cannot hold are met as float16(bound): clamping before or after the
    # rounding is the same, which is what lets the NEON variant clamp in float16.
    with np.errstate(over="ignore"):
        assert np.all(y >= F16(lo)) and np.all(y <= F16(hi))


def test_gemm_f16_bad_arguments_are_value_errors():
    packed = _kleidi.pack_gemm_f16(np.ones((4, 3), F16), variant=REF)
    with pytest.raises(ValueError, match="a must have dtype float16, got float32"):
        _kleidi.gemm_f16(np.ones((2, 4), F32), packed)
    with pytest.raises(ValueError, match="b must have dtype float16"):
        _kleidi.pack_gemm_f16(np.ones((4, 3), F32))
    with pytest.raises(ValueError, match="bias must have dtype float16"):
        _kleidi.pack_gemm_f16(np.ones((4, 3), F16), np.ones(3, F32))
    with pytest.raises(ValueError, match="bias must have size 3"):
        _kleidi.pack_gemm_f16(np.ones((4, 3), F16), np.ones(4, F16))
    with pytest.raises(ValueError, match="K of the packed weights"):
        _kleidi.gemm_f16(np.ones((2, 5), F16), packed)
    with pytest.raises(ValueError, match="2-D"):
        _kleidi.gemm_f16(np.ones(4, F16), packed)
    with pytest.raises(ValueError, match="C-contiguous"):
        _kleidi.gemm_f16(np.ones((4, 2), F16).T, packed)
    with pytest.raises(ValueError, match="packed for gemm_f16"):
        _kleidi.gemm_f32(np.ones((2, 4), F32), packed)
    with pytest.raises(ValueError, match="packed for gemm_f32"):
        _kleidi.gemm_f16(np.ones((2, 4), F16), _kleidi.pack_gemm_f32(np.ones((4, 3), F32)))
    with pytest.raises(ValueError, match="clamp_min must be <= clamp_max"):
        _kleidi.gemm_f16(np.ones((2, 4), F16), packed, clamp_min=1, clamp_max=0)


# ---- binding contract: checks, variants, dispatch -------------------------------------------


def test_bad_arrays_are_value_errors():
    packed = _kleidi.pack_gemm_f32(np.ones((4, 3), F32), variant=REF)
    with pytest.raises(ValueError, match="dtype float32"):
        _kleidi.gemm_f32(np.ones((2, 4)), packed)
    with pytest.raises(ValueError, match="C-contiguous"):
        _kleidi.gemm_f32(np.ones((4, 2), F32).T, packed)
    with pytest.raises(ValueError, match="K of the packed weights"):
        _kleidi.gemm_f32(np.ones((2, 5), F32), packed)
    with pytest.raises(ValueError, match="2-D"):
        _kleidi.gemm_f32(np.ones(4, F32), packed)
    with pytest.raises(ValueError, match="packed for gemm_f32"):
        _kleidi.qgemm_qsi8cx(np.ones((2, 4), F32), packed)
    with pytest.raises(ValueError, match="clamp_min must be <= clamp_max"):
        _kleidi.gemm_f32(np.ones((2, 4), F32), packed, clamp_min=1, clamp_max=0)
    with pytest.raises(ValueError, match="unknown variant"):
        _kleidi.pack_gemm_f32(np.ones((4, 3), F32), variant="avx9")


def test_packed_weights_view_is_read_only_and_keeps_owner_alive():
    packed = _kleidi.pack_gemm_f32(np.ones((4, 3), F32), np.arange(3, dtype=F32), variant=REF)
    view = packed.data
    del packed
    assert view.dtype == np.uint8 and not view.flags.writeable
    assert view.view(F32)[:3].tolist() == [0.0, 1.0, 2.0]  # the first panel starts with bias


def test_variants_and_ukernel_info():
    info = _kleidi.variants()
    assert set(info) == {"gemm_f32", "igemm_f32", "qgemm_qsi8cx", "qgemm_qsi4c32", "gemm_f16"}
    for fam, d in info.items():
        assert d["compiled"][-1] == REF and d["selected"] in d["supported"]
        t = _kleidi.ukernel_info(fam, REF)
        assert t["m_step"] % t["mr"] == 0 and t["n_step"] % t["nr"] == 0 and t["kr"] % t["sr"] == 0


def test_forced_variant_env(monkeypatch):
    monkeypatch.setenv("ONNXPLEX_KLEIDI_VARIANT", "reference")
    assert _kleidi.pack_gemm_f32(np.ones((2, 2), F32)).variant == REF
    monkeypatch.setenv("ONNXPLEX_KLEIDI_VARIANT", "bogus")
    with pytest.raises(RuntimeError, match="is not a variant"):
        _kleidi.pack_gemm_f32(np.ones((2, 2), F32))
    monkeypatch.delenv("ONNXPLEX_KLEIDI_VARIANT")
    missing = [v for v in ("sme2", "i8mm", "dotprod", "neon")
               if all(v not in d["supported"] for d in _kleidi.variants().values())]
    if missing:
        monkeypatch.setenv("ONNXPLEX_KLEIDI_VARIANT", missing[0])
        with pytest.raises(RuntimeError, match="not compiled into this build|does not support"):
            _kleidi.variants()


# ---- the native test executable -------------------------------------------------------------


REPO = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("ninja")),
                    reason="needs cmake and ninja to build tests/native/kleidi_test")
def test_native_kleidi_test_executable(tmp_path_factory):
    build = tmp_path_factory.mktemp("kleidi_native")
    env = {k: v for k, v in os.environ.items() if k != "ONNXPLEX_KLEIDI_VARIANT"}
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", "-DONNXPLEX_BUILD_PYTHON_MODULE=OFF",
                    "-DONNXPLEX_BUILD_NATIVE_TESTS=ON", "-DONNXPLEX_WERROR=ON"],
                   check=True, capture_output=True, env=env)
    subprocess.run(["cmake", "--build", str(build), "--target", "kleidi_test"], check=True,
                   capture_output=True, env=env)
    expect = "reference" if _kleidi.cpu_features()["arch"] != "aarch64" else None
    cmd = [str(build / "kleidi_test"), "--rounds", "30"]
    if expect:
        cmd += ["--expect-variant", expect]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kleidi_test OK" in run.stdout
    assert run.stdout.count("selected ") == 5
