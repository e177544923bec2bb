"""Type stub of the compiled ``_mlas_native`` module (providers/cpu_mlas/src)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

def cpu_features() -> dict[str, bool]: ...
def isa() -> str: ...
def isa_available(name: str) -> bool: ...

class PackedB:
    """B of an integer GEMM, centered and laid out for one qgemm variant (immutable)."""

    @property
    def k(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def isa(self) -> str: ...
    @property
    def nbytes(self) -> int: ...

def pack_b(b: npt.NDArray[np.int8] | npt.NDArray[np.uint8],
           zero_point: npt.ArrayLike | None = None, isa: str = "",
           threads: int = 1) -> PackedB: ...
def qgemm_i32(a: npt.NDArray[np.int8] | npt.NDArray[np.uint8],
              a_zero_point: npt.ArrayLike | None, b: PackedB,
              threads: int = 0) -> npt.NDArray[np.int32]: ...
def qgemm_f32(a: npt.NDArray[np.int8] | npt.NDArray[np.uint8],
              a_zero_point: npt.ArrayLike | None, b: PackedB, scale: npt.ArrayLike,
              bias: npt.ArrayLike | None = None,
              threads: int = 0) -> npt.NDArray[np.float32]: ...
def dynamic_qgemm_f32(a: npt.NDArray[np.float32], b: PackedB, b_scale: npt.ArrayLike,
                      bias: npt.ArrayLike | None = None,
                      threads: int = 0) -> tuple[npt.NDArray[np.float32], float, int]: ...
def dwconv_f32(x: npt.NDArray[np.float32], w: npt.NDArray[np.float32],
               bias: npt.NDArray[np.float32] | None, y: npt.NDArray[np.float32],
               strides: tuple[int, int], dilations: tuple[int, int], pads: tuple[int, int],
               lo: float = ..., hi: float = ..., threads: int = ...) -> None: ...
def bias_act_f32(y: npt.NDArray[np.float32], bias: npt.NDArray[np.float32] | None,
                 z: npt.NDArray[np.float32] | None, lo: float = ...,
                 hi: float = ...) -> None: ...
def attention_f32(q: npt.NDArray[np.float32], k: npt.NDArray[np.float32],
                  v: npt.NDArray[np.float32], y: npt.NDArray[np.float32], scale: float,
                  bias: npt.NDArray[np.float32] | None = None, threads: int = 0) -> None: ...
def topk(x: npt.NDArray[Any], k: int, largest: bool, threads: int
         ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]] | None: ...
