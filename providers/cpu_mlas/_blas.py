"""BLAS and intra-op threading policy of cpu_mlas.

OpenBLAS (as bundled in numpy wheels) synchronises its threads with busy-wait barriers that
assume it owns every core: when another process or another of our threads holds one, each
call waits for a descheduled worker. On a shared 2-core machine a 32x1024x1024 GEMM went from
0.9 ms on one BLAS thread to 32 ms on two. So cpu_mlas keeps the BLAS single-threaded and
splits work itself: :func:`parallel_for` runs chunks on a small pool of sleeping worker
threads *and on the calling thread*, which takes chunks from the same counter. A worker that
is late or descheduled only means the caller does more of the chunks; nobody waits for a
thread to wake up (the scheme of onnxruntime's thread pool). :func:`matmul` is a GEMM split
that way.

Float32 products with a constant operand (weights) skip BLAS where ``_mlas_native`` has its
AVX-512 GEMM: :func:`pack_weight` lays the weight out once for the micro-kernel, and
:func:`gemm` multiplies with it, adding a bias and clamping in the same pass, threaded by the
native pool (``threads`` = this pool's size). Its micro-kernel keeps a 12 x 32 tile in
registers and reads the activation rows in place (no packing of A); numpy's OpenBLAS packs
both operands on every call, which for transformer-sized products (M = 64..128) costs it
15-30% (``benchmarks/gemm.py``).

Both settings are process-wide: the BLAS thread count (pinned to 1 when a cpu_mlas session is
created) and the pool's size (the last session created with a non-zero
``intra_op_num_threads`` wins; otherwise the CPUs this process may run on). Unknown BLAS
builds are left alone, with a log line.

The library does not tune malloc (``mallopt`` M_MMAP_THRESHOLD / M_TRIM_THRESHOLD): the
setting would be process-wide, which is the application's call. glibc's dynamic mmap threshold
serves most models' per-run temporaries from the heap after the first runs (ResNet-18/50,
MobileNetV2/V3, GoogLeNet, SqueezeNet: no page faults per run in steady state), but not all:
DenseNet-121's concatenations of growing width took ~2,400 faults a run and Whisper-tiny's
encoder ~8,000. Sessions now plan their large intermediates instead (memory patterns,
``onnxplex.framework.mempattern``, onnxruntime's ``enable_mem_pattern``): none there.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ._native import native

logger = logging.getLogger(__name__)

__all__ = ["get_blas_threads", "set_blas_threads", "configure_threads", "intra_threads",
           "native_threads", "parallel_for", "split", "matmul", "PackedWeight", "pack_weight",
           "gemm"]

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads_64_",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads_64_",
            "openblas_get_num_threads64_", "openblas_get_num_threads")

# Below this many multiply-adds per chunk, waking a worker costs more than it saves.
_MIN_CHUNK_MACS = 4 << 20
# Below this many multiply-adds a product is one np.dot / np.matmul, even where computing it
# transposed would be faster (the split's bookkeeping, 5-16 us, would cost more).
SMALL_MACS = 1 << 15
# Chunks per thread: a late worker then costs at most a fraction of the call.
_CHUNKS_PER_THREAD = 2
# matmul computes (B^T A^T)^T when A has 2 to this many rows and B this many times as many
# columns.
_WIDE_MAX_ROWS = 128
_WIDE_RATIO = 4


@functools.cache
def _library() -> ctypes.CDLL | None:
    root = os.path.dirname(os.path.dirname(np.__file__))
    for path in sorted(glob.glob(os.path.join(root, "numpy.libs", "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _symbol(names: tuple[str, ...]):
    lib = _library()
    if lib is None:
        return None
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def get_blas_threads() -> int | None:
    """The BLAS library's current thread count, or None when it cannot be queried."""
    fn = _symbol(_GETTERS)
    return None if fn is None else int(fn())


def set_blas_threads(n: int) -> bool:
    """Set the BLAS thread count (n >= 1); returns False when the BLAS is not controllable."""
    fn = _symbol(_SETTERS)
    if fn is None:
        logger.info("BLAS thread count not controllable here; left as it is (wanted %d)", n)
        return False
    fn(ctypes.c_int(int(n)))
    return True


# --------------------------------------------------------------------------------------------
# The intra-op pool
# --------------------------------------------------------------------------------------------


class _Job:
    """``n`` chunks of ``fn``, handed out by an atomic counter (``next`` on an
    ``itertools.count`` holds the GIL for its whole call)."""

    def __init__(self, fn: Callable[[int], None], n: int) -> None:
        self.fn = fn
        self.n = n
        self._next = itertools.count().__next__
        self._left = n
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        while True:
            i = self._next()
            if i >= self.n:
                return
            try:
                self.fn(i)
            except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
                self.error = e
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.done.set()


class _Pool:
    def __init__(self) -> None:
        self.size = 1
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def resize(self, n: int) -> None:
        with self._lock:
            self.size = max(1, int(n))
            while len(self._workers) < self.size - 1:
                t = threading.Thread(target=self._serve, daemon=True,
                                     name=f"onnxplex-cpu-{len(self._workers) + 1}")
                self._workers.append(t)
                t.start()
            # Extra workers (after a shrink) stay asleep: jobs are posted to size - 1 of them.

    def _serve(self) -> None:
        self._local.worker = True
        while True:
            self._queue.get().work()

    def run(self, fn: Callable[[int], None], n: int) -> None:
        helpers = min(self.size, n) - 1
        if helpers <= 0 or getattr(self._local, "worker", False):
            for i in range(n):  # nested calls from a worker run inline
                fn(i)
            return
        job = _Job(fn, n)
        for _ in range(helpers):
            self._queue.put(job)
        job.work()
        job.done.wait()
        if job.error is not None:
            raise job.error


_POOL = _Pool()


def _default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def configure_threads(intra_op_num_threads: int) -> None:
    """Size the pool (0: one thread per available CPU) and pin the BLAS to one thread."""
    n = intra_op_num_threads if intra_op_num_threads > 0 else _default_threads()
    set_blas_threads(1)
    _POOL.resize(n)


def intra_threads() -> int:
    """Threads :func:`parallel_for` may use (the caller included)."""
    return _POOL.size


def native_threads(intra_op_num_threads: int) -> int:
    """A session's thread count as a native call's ``threads`` argument: the setting, or for
    0 the CPUs this process may run on. Not 0 itself: the native pool resolves 0 through
    std::thread::hardware_concurrency on every call, which glibc answers by reading /sys
    (a 1 x 10 x 32 qgemm_i32: 17.8 us with threads=0, 1.3 with 2)."""
    return intra_op_num_threads if intra_op_num_threads > 0 else _default_threads()


def parallel_for(n: int, fn: Callable[[int], None]) -> None:
    """Call ``fn(i)`` for ``i`` in ``range(n)``, spread over the pool and the caller.

    Chunks may run in any order and concurrently; ``fn`` must write disjoint outputs. The first
    exception raised by a chunk is re-raised here once every chunk has finished.
    """
    _POOL.run(fn, n)


def split(size: int, work: float, align: int = 1) -> list[tuple[int, int]]:
    """``[begin, end)`` ranges over ``size`` items for :func:`parallel_for`: as many as the
    pool can use while each keeps at least ``_MIN_CHUNK_MACS`` of ``work`` (multiply-adds for
    the whole range), boundaries on multiples of ``align``."""
    threads = _POOL.size
    if threads <= 1 or size <= align:
        return [(0, size)]
    n = min(threads * _CHUNKS_PER_THREAD, int(work // _MIN_CHUNK_MACS), -(-size // align))
    if n <= 1:
        return [(0, size)]
    step = -(-size // n)
    step = -(-step // align) * align
    return [(b, min(size, b + step)) for b in range(0, size, step)]


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
           epilogue: Callable[[np.ndarray, slice, slice], None] | None = None) -> np.ndarray:
    """``np.matmul(a, b)`` (``a [..., M, K]``, ``b [..., K, N]``) split over the pool along
    the larger of M and N; slices of C-ordered matrices keep BLAS-compatible strides, so no
    chunk copies. ``epilogue(out_chunk, rows, cols)`` runs on each chunk right after its GEMM
    (cache-hot), in place. A 2-D product with few rows and many columns is computed
    transposed (see ``_WIDE_RATIO``). With no ``out``, a product of fewer than ``SMALL_MACS``
    multiply-adds, or one that would not be split (and is not computed transposed), is one
    ``np.dot``/``np.matmul``. Returns ``out`` (a new C-ordered array when None)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    wide = (a.ndim == 2 and b.ndim == 2 and m * _WIDE_RATIO <= n
            and 2 <= m <= _WIDE_MAX_ROWS and a.dtype == b.dtype)
    if out is None and (a.ndim == 2 or b.ndim == 2 or a.shape[:-2] == b.shape[:-2]):
        # the batch axes of one operand, if any, are the product's
        work = max(a.size * n, b.size * m)
        if work < SMALL_MACS or (not wide and len(split(max(m, n), work, 16)) == 1):
            y = np.dot(a, b) if a.ndim == 2 and b.ndim == 2 else np.matmul(a, b)
            if epilogue is not None:
                epilogue(y, slice(None), slice(None))
            return y
    if wide and (out is None or out.flags.c_contiguous):
        # Few rows, many columns (a batch through a Linear layer): OpenBLAS is much faster
        # on the transposed problem (0.67 vs 1.02 ms for 32x1024 @ 1024x1024); transposing
        # the small result back is cheap, and so is one epilogue pass over it.
        t = matmul(b.T, a.T)
        if out is None:
            out = np.ascontiguousarray(t.T)
        else:
            np.copyto(out, t.T)
        if epilogue is not None:
            epilogue(out, slice(None), slice(None))
        return out
    if out is None:
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n)
        out = np.empty(shape, dtype=np.result_type(a, b))
    batch = out.size // max(m * n, 1)
    work = float(batch) * m * n * k
    by_rows = m >= n
    chunks = split(m if by_rows else n, work, 16)
    every = slice(None)

    def run(i: int) -> None:
        lo, hi = chunks[i]
        r, c = (slice(lo, hi), every) if by_rows else (every, slice(lo, hi))
        o = out[..., r, c]
        np.matmul(a[..., r, :], b[..., :, c], out=o)
        if epilogue is not None:
            epilogue(o, r, c)

    if len(chunks) == 1:
        run(0)
    else:
        parallel_for(len(chunks), run)
    return out


# --------------------------------------------------------------------------------------------
# Float32 GEMM with a packed constant operand (the native micro-kernel)
# --------------------------------------------------------------------------------------------


@functools.cache
def _sgemm_module() -> Any | None:
    """``_mlas_native`` when it has a vector float GEMM for this CPU (its portable variant
    is slower than BLAS: then weights stay numpy arrays)."""
    nat = native()
    if nat is None or not hasattr(nat, "sgemm") or nat.sgemm_isa() == "scalar":
        return None
    return nat


def gemm_plan(w: PackedWeight, bias: np.ndarray | None, lo: float = -np.inf,
              hi: float = np.inf) -> Callable[[np.ndarray, int], np.ndarray] | None:
    """``plan(x, threads)``: ``clip(x @ W + bias, lo, hi)`` as :func:`gemm` computes it into a
    new array, with everything but ``x`` bound once (the native ``SgemmPlan``: a batch-1
    call converts two arguments instead of ten); None for a left weight or without the
    native GEMM."""
    nat = _sgemm_module()
    if nat is None or w.left or not hasattr(nat, "SgemmPlan"):
        return None
    return nat.SgemmPlan(w.packed, bias, float(lo), float(hi))


def pool() -> _Pool:
    """The intra-op pool (its ``size``: the threads a native call should use)."""
    return _POOL


class PackedWeight:
    """A constant float32 operand laid out once for the native GEMM: the right operand
    ``B [K, N]`` of ``x @ B`` (``left=False``) or the left operand ``A [M, K]`` of ``A @ x``
    (``left=True``, a convolution's weight against its columns)."""

    __slots__ = ("packed", "shape", "left")

    def __init__(self, packed: Any, shape: tuple[int, int], left: bool) -> None:
        self.packed = packed
        self.shape = shape
        self.left = left


def pack_weight(w: np.ndarray, left: bool = False) -> PackedWeight | None:
    """``w`` (2-D float32, any strides) packed for :func:`gemm`, or None when the native
    GEMM is not available (the caller keeps its numpy path)."""
    nat = _sgemm_module()
    if nat is None or w.ndim != 2 or w.dtype != np.float32 or 0 in w.shape:
        return None
    pack = nat.sgemm_pack_a if left else nat.sgemm_pack_b
    packed = pack(w, threads=_POOL.size)
    return PackedWeight(packed, (int(w.shape[0]), int(w.shape[1])), left)


def gemm(x: np.ndarray, w: PackedWeight, out: np.ndarray | None = None,
         bias: np.ndarray | None = None, lo: float = -np.inf, hi: float = np.inf,
         accumulate: bool = False) -> np.ndarray:
    """``clip(x @ W + bias, lo, hi)`` (or ``W @ x`` for a left weight, the bias then per row)
    on the native GEMM over this pool's thread count. ``x`` is a 2-D float32 array (any
    strides; contiguous rows are read in place); ``accumulate`` adds the product to ``out``'s
    values. Returns ``out`` (a new array when None)."""
    # Positional arguments: the binding matches keywords by name, ~0.9 of its ~2.8 us per call
    # on a tiny product.
    if w.left:
        return _sgemm_module().sgemm(w.packed, x, out, bias, "row", lo, hi, accumulate,
                                     _POOL.size)
    return _sgemm_module().sgemm(x, w.packed, out, bias, "col", lo, hi, accumulate, _POOL.size)

