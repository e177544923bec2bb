"""Type stub of the compiled ``_kleidi`` extension.

Arrays go in without copies: each must already have the stated dtype, be C-contiguous and have
the stated number of dimensions, else ``ValueError``. ``variant=None`` lets dispatch choose
(``ONNXPLEX_KLEIDI_VARIANT`` honoured; ``RuntimeError`` if it names a variant that is not
compiled in or that this CPU lacks). Packed weights belong to one variant and one family.
Kernels release the GIL and split the output tiles over ``threads`` std::threads.
"""

from typing import Literal, TypedDict

import numpy as np
import numpy.typing as npt

VariantName = Literal["reference", "neon", "dotprod", "i8mm", "sme2"]
FamilyName = Literal["gemm_f32", "igemm_f32", "qgemm_qsi8cx", "qgemm_qsi4c32", "gemm_f16"]

class FamilyVariants(TypedDict):
    compiled: list[str]
    supported: list[str]
    selected: str

class UkernelInfo(TypedDict):
    name: str
    variant: str
    m_step: int
    n_step: int
    mr: int
    nr: int
    kr: int
    sr: int

class PackedRhs:
    """Weights packed once for one variant of one kernel family."""

    @property
    def family(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def k(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def data(self) -> npt.NDArray[np.uint8]: ...  # read-only view

def cpu_features() -> dict[str, object]: ...
def clamp_f32(x: npt.ArrayLike, lo: float, hi: float) -> np.ndarray: ...
def variants() -> dict[str, FamilyVariants]: ...
def ukernel_info(family: FamilyName, variant: VariantName | None = None) -> UkernelInfo: ...

# (1) fp32 GEMM: clamp(a @ b + bias)
def pack_gemm_f32(
    b: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32] | None = None,
    *,
    transpose_b: bool = False,
    variant: VariantName | None = None,
) -> PackedRhs: ...
def gemm_f32(
    a: npt.NDArray[np.float32],
    packed: PackedRhs,
    *,
    clamp_min: float = ...,
    clamp_max: float = ...,
    threads: int = 1,
) -> npt.NDArray[np.float32]: ...

# (2) fp32 2-D convolution (ONNX Conv, group 1, NCHW) by indirect matmul
def pack_conv2d_f32(
    w: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32] | None = None,
    *,
    variant: VariantName | None = None,
) -> PackedRhs: ...
def conv2d_f32(
    x: npt.NDArray[np.float32],
    packed: PackedRhs,
    *,
    strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),  # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1),
    clamp_min: float = ...,
    clamp_max: float = ...,
    threads: int = 1,
) -> npt.NDArray[np.float32]: ...

# (3) dynamic per-row int8 activations x per-channel symmetric int8 weights
def quantize_qai8dx(
    a: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32], npt.NDArray[np.float32]]: ...
def pack_qsi8cx(
    w: npt.NDArray[np.int8],
    scales: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32] | None = None,
    *,
    transpose_b: bool = False,
    variant: VariantName | None = None,
) -> PackedRhs: ...
def qgemm_qsi8cx(
    a: npt.NDArray[np.float32],
    packed: PackedRhs,
    *,
    clamp_min: float = ...,
    clamp_max: float = ...,
    threads: int = 1,
) -> npt.NDArray[np.float32]: ...

# (4) dynamic int8 activations x blockwise (32) signed int4 weights
def matmulnbits_to_qsu4c32(
    b: npt.NDArray[np.uint8],
    scales: npt.NDArray[np.float32],
    zero_points: npt.NDArray[np.uint8] | None,
    *,
    K: int,
    block_size: int,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]: ...
def pack_qsi4c32(
    nibbles: npt.NDArray[np.uint8],
    scales: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32] | None = None,
    *,
    variant: VariantName | None = None,
) -> PackedRhs: ...
def qgemm_qsi4c32(
    a: npt.NDArray[np.float32],
    packed: PackedRhs,
    *,
    clamp_min: float = ...,
    clamp_max: float = ...,
    threads: int = 1,
) -> npt.NDArray[np.float32]: ...

# (5) fp16 GEMM: float16(clamp(a @ b + bias)), float16 in and out, fp32 clamp bounds. The
# reference accumulates in fp32 and rounds once; SME2 accumulates in fp32 too; NEON accumulates
# in fp16 (error bound in providers/kleidi_sme2/src/ukernel.h, GemmF16Ukernel).
def pack_gemm_f16(
    b: npt.NDArray[np.float16],
    bias: npt.NDArray[np.float16] | None = None,
    *,
    transpose_b: bool = False,
    variant: VariantName | None = None,
) -> PackedRhs: ...
def gemm_f16(
    a: npt.NDArray[np.float16],
    packed: PackedRhs,
    *,
    clamp_min: float = ...,
    clamp_max: float = ...,
    threads: int = 1,
) -> npt.NDArray[np.float16]: ...
