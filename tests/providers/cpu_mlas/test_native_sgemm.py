"""The native float32 GEMM of cpu_mlas (``_mlas_native.sgemm``, providers/cpu_mlas/src/sgemm*)
against float64 numpy: every variant, packed and unpacked operands in any strides, partial
micro-tiles, the epilogue (bias per row or column, clamp, accumulate), threads; the
weight-carrying kernels (MatMul, Gemm, FusedMatMul, MatMulNBits) on it against onnxruntime;
and ``conv2d_f32`` (im2col panels packed from the image) against a direct convolution."""

from __future__ import annotations

import numpy as np
import pytest
from models import quantize_nbits

from onnxplex.providers.cpu_mlas import _blas, _native

from ._oracle import check

NAT = _native.native()
pytestmark = pytest.mark.skipif(NAT is None or not hasattr(NAT, "sgemm"),
                                reason="_mlas_native (with sgemm) is not built")


def _isa_ok(name: str) -> bool:
    try:
        NAT.sgemm(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32), isa=name)
    except ValueError:
        return False
    return True


ISAS = [i for i in ("scalar", "avx2", "avx512") if NAT is not None and _isa_ok(i)]
# M, K, N: single elements, partial 12-row / 32-column tiles, K past one 256 block, tasks.
SHAPES = [(1, 1, 1), (13, 7, 33), (12, 256, 32), (25, 257, 65), (130, 600, 100), (3, 0, 5),
          (7, 64, 49), (30, 31, 41),   # AVX2: 12 x 8 and 6 x 16 partial blocks
          (20, 1024, 40), (4, 2048, 9),  # A's rows 4 KiB apart: copied per task; in place
          (2, 700, 70)]                   # a packed B's panels read over all of K at once


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _close(got, want, k):
    # float32 sums of k products against float64: a few ulps of the magnitudes involved
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.sqrt(k)))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("layout", ["raw", "packed_b", "packed_b_transposed", "packed_a",
                                    "transposed", "reversed"])
def test_sgemm_matches_float64(isa, m, k, n, layout):
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    want = a.astype(np.float64) @ b
    if layout == "raw":
        got = NAT.sgemm(a, b, isa=isa)
    elif layout == "packed_b":
        got = NAT.sgemm(a, NAT.sgemm_pack_b(b), isa=isa)
    elif layout == "packed_b_transposed":  # a Gemm transB weight: packed in blocks of 16 k
        got = NAT.sgemm(a, NAT.sgemm_pack_b(np.ascontiguousarray(b.T).T), isa=isa)
    elif layout == "packed_a":
        got = NAT.sgemm(NAT.sgemm_pack_a(a), b, isa=isa)
    elif layout == "transposed":  # column-major views: strides other than (K, 1)
        got = NAT.sgemm(np.asfortranarray(a), np.asfortranarray(b), isa=isa)
    else:  # negative strides
        got = NAT.sgemm(a[::-1, ::-1].copy()[::-1, ::-1], b[::-1].copy()[::-1], isa=isa)
    assert got.shape == (m, n) and got.dtype == np.float32
    _close(got, want, k)


@pytest.mark.parametrize("isa", ISAS)
def test_every_row_stride_of_an_in_place_a(isa):
    """Full tiles reading A in place at each row stride a multiple of 16 floats up to 1040
    (the AVX-512 kernel has a variant per stride up to 1024), as rows of a wider array (stride
    and K differ) and as whole rows, with a packed and an unpacked B, and the epilogue."""
    rng = np.random.default_rng(16)
    b_full = _rand(rng, 1040, 64)
    bias = _rand(rng, 64)
    for lda in range(16, 1041, 16):
        for k in sorted({lda, max(1, lda - 9)}):
            a = _rand(rng, 24, lda)[:, :k]   # 2 full row tiles, rows lda floats apart
            b = b_full[:k]
            want = np.clip(a.astype(np.float64) @ b + bias, -1.5, 2.0)
            for bb in (b, NAT.sgemm_pack_b(b)):
                got = NAT.sgemm(a, bb, bias=bias, bias_axis="col", lo=-1.5, hi=2.0, isa=isa)
                _close(got, want, k)


@pytest.mark.parametrize("operand", ["b", "b_transposed", "a"])
def test_packing_on_threads_gives_the_same_panels(operand):
    """A weight's panels packed on several threads (as a session packs them) are the panels
    packed on one: the same products, bit for bit, over panels of 12 rows or 32 columns and a
    partial last one."""
    rng = np.random.default_rng(7)
    a, b = _rand(rng, 37, 70), _rand(rng, 70, 100)
    if operand == "a":
        one, many = (NAT.sgemm(NAT.sgemm_pack_a(a, threads=t), b) for t in (1, 3))
    else:
        w = np.ascontiguousarray(b.T).T if operand == "b_transposed" else b
        one, many = (NAT.sgemm(a, NAT.sgemm_pack_b(w, threads=t)) for t in (1, 3))
    np.testing.assert_array_equal(many, one)
    _close(one, a.astype(np.float64) @ b, 70)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("axis", ["row", "col"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_sgemm_epilogue(isa, axis, accumulate):
    rng = np.random.default_rng(1)
    m, k, n = 29, 300, 45
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = _rand(rng, m if axis == "row" else n)
    c0 = _rand(rng, m, n)
    out = c0.copy()
    NAT.sgemm(a, NAT.sgemm_pack_b(b), out=out, bias=bias, bias_axis=axis, lo=-1.0, hi=2.5,
              accumulate=accumulate, isa=isa)
    full = a.astype(np.float64) @ b + (bias[:, None] if axis == "row" else bias[None, :])
    if accumulate:
        full += c0
    _close(out, np.clip(full, -1.0, 2.5), k)


def test_sgemm_writes_into_a_strided_output_and_keeps_the_rest():
    rng = np.random.default_rng(2)
    a, b = _rand(rng, 20, 40), _rand(rng, 40, 50)
    big = np.full((20, 64), 7.0, np.float32)
    NAT.sgemm(a, NAT.sgemm_pack_b(b), out=big[:, 5:55])
    _close(big[:, 5:55], a.astype(np.float64) @ b, 40)
    assert (big[:, :5] == 7).all() and (big[:, 55:] == 7).all()


@pytest.mark.parametrize("rows", [1, 5])
def test_rows_with_stride_zero(rows):
    """x[None] and np.broadcast_to give A rows 0 bytes apart: read right, not as packed."""
    rng = np.random.default_rng(6)
    row, b = _rand(rng, 40), _rand(rng, 40, 20)
    a = row[None] if rows == 1 else np.broadcast_to(row, (rows, 40))
    assert a.strides[0] == 0
    got = NAT.sgemm(a, NAT.sgemm_pack_b(b))
    _close(got, np.broadcast_to(row.astype(np.float64) @ b, (rows, 20)), 40)


def test_empty_k_gives_the_epilogue_alone():
    out = np.ones((3, 5), np.float32)
    bias = np.arange(5, dtype=np.float32)
    NAT.sgemm(np.zeros((3, 0), np.float32), np.zeros((0, 5), np.float32), out=out, bias=bias,
              accumulate=True, hi=3.0)
    np.testing.assert_array_equal(out, np.minimum(1 + bias[None, :].repeat(3, 0), 3.0))


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threads_give_the_same_bits(threads):
    """Tasks split the output, never K: every thread count sums in the same order."""
    rng = np.random.default_rng(3)
    a, b = _rand(rng, 200, 700), _rand(rng, 700, 300)
    pb = NAT.sgemm_pack_b(b)
    np.testing.assert_array_equal(NAT.sgemm(a, pb, threads=threads), NAT.sgemm(a, pb, threads=1))


@pytest.mark.skipif(len(ISAS) < 2, reason="needs a vector variant")
def test_vector_variant_sums_like_the_scalar_one():
    rng = np.random.default_rng(4)
    a, b = _rand(rng, 37, 513), _rand(rng, 513, 77)
    s = NAT.sgemm(a, b, isa="scalar")
    v = NAT.sgemm(a, b, isa=ISAS[-1])
    np.testing.assert_allclose(v, s, rtol=1e-5, atol=1e-4)


def test_bad_arguments_are_clear_errors():
    a = np.zeros((4, 5), np.float32)
    b = np.zeros((5, 6), np.float32)
    with pytest.raises(TypeError, match="a must be a float32 array of rank 2"):
        NAT.sgemm(a.astype(np.float64), b)
    with pytest.raises(ValueError, match="a has K=5, b has K=6"):
        NAT.sgemm(a, np.zeros((6, 6), np.float32))
    with pytest.raises(ValueError, match="packed as the left"):
        NAT.sgemm(a, NAT.sgemm_pack_a(b))
    with pytest.raises(ValueError, match=r"shape \(4, 6\)"):
        NAT.sgemm(a, b, out=np.zeros((4, 5), np.float32))
    ro = np.zeros((4, 6), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        NAT.sgemm(a, b, out=ro)
    with pytest.raises(ValueError, match="contiguous rows"):
        NAT.sgemm(a, b, out=np.zeros((4, 12), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="bias must have 6 values"):
        NAT.sgemm(a, b, bias=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="needs out"):
        NAT.sgemm(a, b, accumulate=True)
    with pytest.raises(ValueError, match="unknown sgemm variant"):
        NAT.sgemm(a, b, isa="avx9000")


def test_packed_weight_reports_its_shape_and_size():
    p = NAT.sgemm_pack_b(np.zeros((10, 33), np.float32))
    assert p.shape == (10, 33) and not p.is_a and p.nbytes == 10 * 64 * 4
    q = NAT.sgemm_pack_a(np.zeros((13, 10), np.float32))
    assert q.shape == (13, 10) and q.is_a and q.nbytes == 24 * 10 * 4


def test_pack_weight_declines_what_it_cannot_pack():
    assert _blas.pack_weight(np.zeros((4, 4), np.float64)) is None
    assert _blas.pack_weight(np.zeros((2, 4, 4), np.float32)) is None
    assert _blas.pack_weight(np.zeros((0, 4), np.float32)) is None


# --------------------------------------------------------------------------------------------
# The kernels with a constant weight, on the native GEMM
# --------------------------------------------------------------------------------------------

@pytest.mark.skipif(_blas._sgemm_module() is None, reason="no vector sgemm on this CPU")
@pytest.mark.parametrize("case", ["MatMul3d", "Gemm_bias", "Gemm_transA", "FusedMatMul",
                                  "MatMulNBits"])
def test_weight_kernels_match_onnxruntime_on_the_native_gemm(case):
    """The constant-weight kernels now on the native GEMM, against onnxruntime."""
    rng = np.random.default_rng(5)
    if case == "MatMul3d":
        check("MatMul", [_rand(rng, 2, 37, 70), _rand(rng, 70, 45)], const_inputs=[1],
              rtol=1e-5, atol=1e-5)
    elif case == "Gemm_bias":
        check("Gemm", [_rand(rng, 30, 70), _rand(rng, 45, 70), _rand(rng, 45)],
              const_inputs=[1, 2], transB=1, alpha=0.5, rtol=1e-5, atol=1e-5)
    elif case == "Gemm_transA":
        check("Gemm", [_rand(rng, 70, 30), _rand(rng, 70, 45)], const_inputs=[1], transA=1,
              rtol=1e-5, atol=1e-5)
    elif case == "FusedMatMul":
        check("FusedMatMul", [_rand(rng, 3, 20, 64), _rand(rng, 33, 64)], const_inputs=[1],
              domain="com.microsoft", transB=1, alpha=2.0, rtol=1e-5, atol=1e-5)
    else:
        w = _rand(rng, 64, 48)
        q, scales = quantize_nbits(w, 32)
        check("MatMulNBits", [_rand(rng, 5, 64), q, scales], const_inputs=[1, 2],
              domain="com.microsoft", K=64, N=48, bits=4, block_size=32, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# conv2d_f32: the GEMM reading im2col panels straight from the image
# --------------------------------------------------------------------------------------------


def _conv_ref(x, w, stride, pad, dil):
    """float64 direct convolution (NCHW, group 1, symmetric pads)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dil, j * dil
            win = xp[:, :, r0:r0 + stride * oh:stride, c0:c0 + stride * ow:stride]
            y += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j].astype(np.float64))
    return y


@pytest.mark.parametrize("k,stride,pad,dil,hw", [
    (1, 1, 0, 1, 9), (3, 1, 1, 1, 11), (3, 2, 1, 1, 13), (7, 2, 3, 1, 20), (3, 1, 2, 2, 10),
    (1, 2, 0, 1, 9)])
def test_conv2d_matches_a_direct_convolution(k, stride, pad, dil, hw):
    rng = np.random.default_rng(k * 100 + stride * 10 + pad)
    x = _rand(rng, 2, 5, hw, hw + 3)
    w = _rand(rng, 14, 5, k, k)
    want = _conv_ref(x, w, stride, pad, dil)
    y = np.empty(want.shape, np.float32)
    bias = _rand(rng, 14)
    NAT.conv2d_f32(x, NAT.sgemm_pack_a(w.reshape(14, -1)), y, (k, k), (stride, stride),
                   (dil, dil), (pad, pad), bias=bias, lo=-0.5)
    _close(y, np.maximum(want + bias[None, :, None, None], -0.5), 5 * k * k)


@pytest.mark.parametrize("orientation", ["direct", "transposed"])
@pytest.mark.parametrize("k, kc_blocks", [(1, 1), (3, 3)])
def test_conv2d_z_is_read_in_place_of_the_output(orientation, k, kc_blocks):
    """z: out = clamp(conv + bias + z), z read where out's values would be (out's own
    values are ignored), in both orientations and past one k block (K > 256)."""
    rng = np.random.default_rng(k)
    c = 40 * kc_blocks
    x, w = _rand(rng, 2, c, 6, 7), _rand(rng, 32, c, k, k)
    want = _conv_ref(x, w, 1, k // 2, 1)
    bias, z = _rand(rng, 32), _rand(rng, *want.shape)
    packed = (NAT.sgemm_pack_a(w.reshape(32, -1)) if orientation == "direct"
              else NAT.sgemm_pack_b(w.reshape(32, -1).T))
    y = np.full(want.shape, np.nan, np.float32)   # garbage that must not be read
    NAT.conv2d_f32(x, packed, y, (k, k), (1, 1), (1, 1), (k // 2, k // 2), bias=bias, lo=-1.0,
                   hi=2.0, z=z)
    _close(y, np.clip(want + bias[None, :, None, None] + z, -1.0, 2.0), c * k * k)
    with pytest.raises(ValueError, match="not both"):
        NAT.conv2d_f32(x, packed, y, (k, k), (1, 1), (1, 1), (k // 2, k // 2), z=z,
                       accumulate=True)
    with pytest.raises(ValueError, match="shape of out"):
        NAT.conv2d_f32(x, packed, y, (k, k), (1, 1), (1, 1), (k // 2, k // 2), z=z[:, :5].copy())


def test_conv2d_bad_arguments_are_clear_errors():
    x = np.zeros((1, 3, 8, 8), np.float32)
    w = NAT.sgemm_pack_a(np.zeros((4, 27), np.float32))
    y = np.zeros((1, 4, 8, 8), np.float32)
    with pytest.raises(ValueError, match="K = 28, x needs C\\*kh\\*kw = 27"):  # W^T as B
        NAT.conv2d_f32(x, NAT.sgemm_pack_b(np.zeros((28, 4), np.float32)), y, (3, 3), (1, 1),
                       (1, 1), (1, 1))
    with pytest.raises(ValueError, match="C\\*kh\\*kw = 12"):
        NAT.conv2d_f32(x, w, y, (2, 2), (1, 1), (1, 1), (0, 0))
    with pytest.raises(ValueError, match="out must have shape"):
        NAT.conv2d_f32(x, w, np.zeros((1, 5, 8, 8), np.float32), (3, 3), (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="must be positive"):
        NAT.conv2d_f32(x, w, y, (3, 3), (0, 1), (1, 1), (1, 1))
    with pytest.raises(TypeError, match="C-contiguous float32 array of rank 4"):
        NAT.conv2d_f32(x[:, :, ::2], w, y, (3, 3), (1, 1), (1, 1), (1, 1))


# ---- 4-bit B kept packed (MatMulNBits) ----------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k,n,block", [(200, 70, 32), (100, 33, 16), (512, 96, 128),
                                       (101, 40, 16), (513, 35, 32),   # odd K: a last lone row
                                       (64, 1, 64), (300, 130, 256)])
def test_nbits4_b_dequantizes_exactly_as_the_float_weight(isa, k, n, block):
    from onnxplex.providers.cpu_mlas.quant import dequantize_nbits

    rng = np.random.default_rng(k * n + block)
    kb = -(-k // block)
    q = rng.integers(0, 256, (n, kb, block // 2)).astype(np.uint8)
    scales = (rng.random((n, kb)) * 0.1 + 0.01).astype(np.float32)
    zps = rng.integers(0, 16, (n, kb)).astype(np.float32)
    w = dequantize_nbits(q, scales, zps, k, n, 4, block)   # [K, N] float32
    packed = NAT.sgemm_pack_b_nbits4(q, scales, zps, k, n, block)
    # at most half the float32 panels' bytes (4 bits a weight, 64 per block of a column)
    assert packed.shape == (k, n) and packed.nbytes <= 2 * k * (-(-n // 32) * 32)
    for m, threads in ((1, 1), (37, 2), (300, 3)):
        a = _rand(rng, m, k)
        bias = _rand(rng, n)
        got = NAT.sgemm(a, packed, bias=bias, lo=-5.0, hi=5.0, threads=threads, isa=isa)
        # the same float32 weights as the dequantized matrix: only the summation order differs
        want = NAT.sgemm(a, NAT.sgemm_pack_b(np.ascontiguousarray(w)), bias=bias, lo=-5.0,
                         hi=5.0, threads=1, isa=isa)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        ref = np.clip(a.astype(np.float64) @ w + bias, -5, 5)
        _close(got, ref, k)


def test_nbits4_pack_rejects_bad_shapes():
    q = np.zeros((4, 2, 16), np.uint8)
    s = np.ones((4, 2), np.float32)
    with pytest.raises(ValueError, match="q must be"):
        NAT.sgemm_pack_b_nbits4(q[:, :1], s, s, 64, 4, 32)
    with pytest.raises(ValueError, match="scales and zero points"):
        NAT.sgemm_pack_b_nbits4(q, s[:, :1], s, 64, 4, 32)
    with pytest.raises(ValueError, match="block must be even"):
        NAT.sgemm_pack_b_nbits4(q, s, s, 64, 4, 3)


@pytest.mark.parametrize("m,k,n", [(1, 10, 32), (1, 32, 3), (3, 7, 5), (40, 64, 96), (0, 4, 5)])
@pytest.mark.parametrize("bias,lo", [(False, -np.inf), (True, -np.inf), (True, 0.0)])
def test_bound_gemm_plan_is_the_gemm_call(m, k, n, bias, lo):
    """SgemmPlan (B, bias and bounds bound once: a batch-1 Gemm's path) gives exactly what
    _blas.gemm gives for the same operands, on contiguous and strided x."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    w = _blas.pack_weight(rng.standard_normal((k, n)).astype(np.float32))
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    plan = _blas.gemm_plan(w, b, lo)
    x = rng.standard_normal((m, 2 * k)).astype(np.float32)
    for xs in (np.ascontiguousarray(x[:, :k]), x[:, ::2]):
        want = _blas.gemm(xs, w, None, b, lo)
        for threads in (1, 2):
            got = plan(xs, threads)
            assert got.shape == (m, n) and got.dtype == np.float32
            np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="K="):
        plan(np.zeros((1, k + 1), np.float32), 1)
    with pytest.raises(ValueError, match="bias must have"):
        _blas.gemm_plan(w, np.zeros(n + 1, np.float32))
