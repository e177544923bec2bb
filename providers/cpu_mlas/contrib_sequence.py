"""com.microsoft helpers of sequence models, as onnxruntime's CPU provider runs them:

* UnfoldTensor: torch's ``Tensor.unfold`` (windows of ``size`` every ``step`` along ``dim``,
  a new last axis), as audio front ends export it;
* DynamicTimeWarping: the cheapest monotone path through a cost matrix (Whisper's word
  timestamps align tokens to audio frames with it), ties broken as onnxruntime breaks them;
* NGramRepeatBlock: a generation step's scores with every token that would repeat an n-gram
  of the sequence so far set to -inf (BART/T5 generation graphs);
* MatMulInteger16: int16 x int16 -> int32 matrix product;
* BifurcationDetector: onnxruntime's helper of aggressive (speculative) decoding, which
  copies the source's tokens while the model agrees with them;
* WordConvEmbedding: a character CNN's word embedding (character embeddings, a convolution
  over each word's characters, tanh, max over positions);
* MaxpoolWithMask: a max pool whose window scan stops at a masked position (onnxruntime's
  specialised kernel, its quirks kept).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext

from ._registry import op
from ._windows import auto_pads, ints

MS = "com.microsoft"


@op("UnfoldTensor", since=1, domain=MS)
def make_unfold_tensor(node: NodeView, ctx: ProviderContext):
    """``[..., n, ...] -> [..., (n - size) // step + 1, ..., size]`` along ``dim``."""
    dim = int(node.attr("dim", -1))
    size = int(node.attr("size"))
    step = int(node.attr("step", 1))
    if size < 1 or step < 1:
        raise ValueError(f"UnfoldTensor: size {size} and step {step} must be at least 1")

    def kernel(x: np.ndarray) -> np.ndarray:
        if not -x.ndim <= dim < x.ndim:
            raise ValueError(f"UnfoldTensor: dim {dim} is outside the input's rank {x.ndim}")
        axis = dim % x.ndim
        if x.shape[axis] < size:
            raise ValueError(f"UnfoldTensor: dimension {axis} has {x.shape[axis]} elements, "
                             f"fewer than the window size {size}")
        windows = np.lib.stride_tricks.sliding_window_view(x, size, axis=axis)
        picked = windows[(slice(None),) * axis + (slice(None, None, step),)]
        return np.ascontiguousarray(picked)

    return kernel


@op("DynamicTimeWarping", since=1, domain=MS, dtypes={0: {TP.FLOAT}})
def make_dynamic_time_warping(node: NodeView, ctx: ProviderContext):
    """``[rows, cols]`` (or ``[1, rows, cols]``) float costs -> int32 ``[2, L]``: the rows and
    columns of the cheapest path from (0, 0) to the last cell, each step one diagonal, down or
    right. Accumulated in float32 as onnxruntime does; where two predecessors cost the same,
    its order decides (diagonal only when strictly cheapest, then up, else left). Computed one
    anti-diagonal at a time (each cell needs only the two before it)."""

    def kernel(x: np.ndarray) -> np.ndarray:
        if not (x.ndim == 2 or (x.ndim == 3 and x.shape[0] == 1)):
            raise ValueError("DynamicTimeWarping takes a [rows, cols] or [1, rows, cols] cost "
                             f"matrix, got shape {list(x.shape)}")
        c = np.asarray(x, np.float32).reshape(x.shape[-2:])
        rows, cols = c.shape
        cost = np.full((rows + 1, cols + 1), np.inf, np.float32)
        cost[0, 0] = 0
        trace = np.full((rows + 1, cols + 1), -1, np.int8)
        for d in range(2, rows + cols + 1):   # cells (i, j), i + j = d, 1 <= i <= rows
            i = np.arange(max(1, d - cols), min(rows, d - 1) + 1)
            j = d - i
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            diag = (c0 < c1) & (c0 < c2)
            up = ~diag & (c1 < c0) & (c1 < c2)
            best = np.where(diag, c0, np.where(up, c1, c2))
            cost[i, j] = best + c[i - 1, j - 1]
            trace[i, j] = np.where(diag, 0, np.where(up, 1, 2))
        path = []
        i, j = rows, cols
        while i > 0 and j > 0:
            path.append((i - 1, j - 1))
            t = trace[i, j]
            i, j = (i - 1, j - 1) if t == 0 else (i - 1, j) if t == 1 else (i, j - 1)
        return np.array(path[::-1], np.int32).reshape(-1, 2).T.copy()

    return kernel


def repeated_ngram_bans(input_ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, tokens)``: for each row of ``input_ids`` [B, L], every token that would
    complete an n-gram already in it (where its last n - 1 tokens occurred before, the token
    that followed them then; with n = 1 every token in it). Empty while L < n."""
    ids = np.asarray(input_ids, np.int64)
    length = ids.shape[1]
    if length < n:   # (no n-gram yet)
        return np.zeros(0, np.intp), np.zeros(0, np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(ids, n, axis=1)   # [B, L - n + 1, n]
    tail = ids[:, length + 1 - n:]   # the last n - 1 tokens
    hit = (windows[:, :, :n - 1] == tail[:, None, :]).all(axis=2)
    rows, cols = np.nonzero(hit)
    return rows, windows[rows, cols, n - 1]


@op("NGramRepeatBlock", since=1, domain=MS, dtypes={0: {TP.INT64}, 1: {TP.FLOAT}})
def make_ngram_repeat_block(node: NodeView, ctx: ProviderContext):
    """``scores`` [B, V] with -inf for each token that would complete an n-gram
    (``ngram_size``) already in ``input_ids`` [B, L]: where the sequence's last n - 1 tokens
    occurred before, the token that followed them then."""
    n = int(node.attr("ngram_size"))
    if n < 1:
        raise ValueError(f"NGramRepeatBlock: ngram_size {n} must be at least 1")

    def kernel(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if input_ids.ndim != 2 or scores.ndim != 2 or input_ids.shape[0] != scores.shape[0]:
            raise ValueError("NGramRepeatBlock takes input_ids [B, L] and scores [B, V], got "
                             f"{list(input_ids.shape)} and {list(scores.shape)}")
        out = np.array(scores, dtype=np.float32)
        vocab = scores.shape[1]
        rows, banned = repeated_ngram_bans(input_ids, n)
        if banned.size and (banned.min() < 0 or banned.max() >= vocab):
            raise IndexError(f"NGramRepeatBlock: a token id is outside the vocabulary [0, "
                             f"{vocab})")
        out[rows, banned] = -np.inf
        return out

    return kernel


@op("MatMulInteger16", since=1, domain=MS, dtypes={0: {TP.INT16}, 1: {TP.INT16}})
def make_matmul_integer16(node: NodeView, ctx: ProviderContext):
    """``A @ B`` of int16 matrices (batched as MatMul), int32 result (wrapping as int32
    accumulation does)."""

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)

    return kernel


def _find(haystack: np.ndarray, needle: np.ndarray, start: int = 0) -> int:
    """Where ``needle`` first occurs in ``haystack[start:]`` (as an index of ``haystack``),
    or ``len(haystack)`` (C++'s std::search)."""
    n, k = len(haystack), len(needle)
    if k == 0:
        return start
    if n - start < k:
        return n
    windows = np.lib.stride_tricks.sliding_window_view(haystack[start:], k)
    hits = np.flatnonzero((windows == needle).all(axis=1))
    return start + int(hits[0]) if hits.size else n


@op("BifurcationDetector", since=1, domain=MS, dtypes={0: {TP.INT64}, 1: {TP.INT64}})
def make_bifurcation_detector(node: NodeView, ctx: ProviderContext):
    """``(src_tokens, cur_tokens, prev_suffix_match_idx, pred_tokens?) -> (tokens,
    suffix_match_idx)``: with predicted tokens, the current tokens extended by the predicted
    ones up to and including the first that departs from the source after the previous match;
    then the position in the source just past the only occurrence of the tokens' last n
    tokens, for n from min_ngram_size up (the longest n whose suffix occurs exactly once
    wins; -1 when none), as onnxruntime's kernel computes it."""
    lo, hi = int(node.attr("min_ngram_size")), int(node.attr("max_ngram_size"))
    if not 0 < lo <= hi:
        raise ValueError(f"BifurcationDetector: need 0 < min_ngram_size ({lo}) <= "
                         f"max_ngram_size ({hi})")

    def kernel(src, cur, prev, pred=None):
        src = np.asarray(src, np.int64).reshape(-1)
        cur = np.asarray(cur, np.int64).reshape(-1)
        prev = np.asarray(prev, np.int64)
        if pred is None:
            tokens = cur.copy()
        else:
            pred = np.asarray(pred, np.int64).reshape(-1)
            start = int(prev.reshape(-1)[0])
            if not (start <= len(src) and len(pred) == len(src) + 1 - start):
                raise ValueError(f"BifurcationDetector: pred_tokens has {len(pred)} tokens, "
                                 f"expected len(src_tokens) + 1 - prev_suffix_match_idx = "
                                 f"{len(src) + 1 - start}")
            tail = src[start:]
            differ = np.flatnonzero(pred[:len(tail)] != tail)
            cut = int(differ[0]) if differ.size else len(tail)
            tokens = np.concatenate([cur, pred[:cut + 1]])
        suffix = -1
        for n in range(lo, hi + 1):
            if n > len(tokens):
                break
            gram = tokens[len(tokens) - n:]
            at = _find(src, gram)
            if at == len(src):
                break
            suffix = at + n
            if suffix >= len(src):
                break
            if _find(src, gram, suffix - n + 1) != len(src):
                suffix = -1
        return tokens, np.full(prev.shape, suffix, np.int64)

    return kernel


@op("WordConvEmbedding", since=1, domain=MS, dtypes={0: {TP.INT32}})
def make_word_conv_embedding(node: NodeView, ctx: ProviderContext):
    """``(sequence [S, W] int32 character ids, conv weight [F, 1, k, E], conv bias [F],
    character embeddings [V, E]) -> [S, F]``. A word's length is its count of nonzero ids
    (0 when its first id is 0); its first max(length, k) ids are embedded (a padding id 0
    among them reads row 0), every window of k of them is convolved with each filter, plus
    the bias, tanh,
    and the word's embedding is the maximum over its windows. A word of length 0 is all
    zeros (onnxruntime leaves its row unwritten)."""
    sizes = {k: int(node.attr(k, -1)) for k in ("embedding_size", "conv_window_size",
                                                "char_embedding_size")}

    def kernel(seq, w_conv, b_conv, w_char):
        seq = np.asarray(seq)
        if seq.ndim != 2 or w_conv.ndim != 4 or w_char.ndim != 2:
            raise ValueError("WordConvEmbedding takes sequence [S, W], conv weight [F, 1, k, "
                             f"E] and character embeddings [V, E]; got {list(seq.shape)}, "
                             f"{list(w_conv.shape)}, {list(w_char.shape)}")
        filters, _, k, emb = w_conv.shape
        for name, got in (("embedding_size", filters), ("conv_window_size", k),
                          ("char_embedding_size", w_char.shape[1])):
            if sizes[name] != -1 and sizes[name] != got:
                raise ValueError(f"WordConvEmbedding: {name} is {sizes[name]}, the weights "
                                 f"make it {got}")
        if w_char.shape[1] != emb:
            raise ValueError(f"WordConvEmbedding: the character embeddings are {w_char.shape[1]}"
                             f" wide, the conv weight's last dimension {emb}")
        words, width = seq.shape
        lengths = np.where(seq[:, 0] > 0, (seq > 0).sum(axis=1), 0)
        flat = np.asarray(w_conv, np.float32).reshape(filters, k * emb)
        out = np.zeros((words, filters), np.float32)
        for i in np.flatnonzero(lengths):
            n = max(int(lengths[i]), k)
            if n > width:
                raise ValueError(f"WordConvEmbedding: word {i} needs {n} characters for a "
                                 f"window of {k}, the sequence has {width}")
            chars = np.asarray(w_char, np.float32)[seq[i, :n]]          # [n, E]
            windows = np.lib.stride_tricks.sliding_window_view(chars, (k, emb))[:, 0]
            conv = windows.reshape(-1, k * emb) @ flat.T + np.asarray(b_conv, np.float32)
            out[i] = np.maximum(np.tanh(conv).max(axis=0), np.float32(-1e12))
        return out

    return kernel


@op("MaxpoolWithMask", since=1, domain=MS, dtypes={0: {TP.FLOAT}, 1: {TP.INT32}})
def make_maxpool_with_mask(node: NodeView, ctx: ProviderContext):
    """``(X [N, C, *spatial] float, M int32) -> Y``: a 1-3-D max pool (pool attributes as
    MaxPool's) whose scan of a window stops at a position the mask holds 0, as onnxruntime's
    kernel (written for one model) does: plane ``c`` reads the flattened mask from offset
    ``c * plane_size % (M.shape[0] * M.shape[1])``; in 1-D a masked position ends the window,
    in 2-D and 3-D it ends the innermost row only, and position 0 of a plane is never
    treated as masked; an empty scan gives the lowest float."""
    kernel_shape = ints(node.attr("kernel_shape"), 0, 1)
    nd = len(kernel_shape)
    if not 1 <= nd <= 3:
        raise ValueError(f"MaxpoolWithMask: kernel_shape must have 1-3 dims, got {nd}")
    strides = ints(node.attr("strides"), nd, 1)
    auto_pad = node.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    ceil_mode = int(node.attr("ceil_mode", 0)) == 1
    lowest = np.finfo(np.float32).min

    def kernel(x, mask):
        x = np.asarray(x, np.float32)
        if x.ndim != nd + 2:
            raise ValueError(f"MaxpoolWithMask: input rank {x.ndim} does not match "
                             f"kernel_shape {list(kernel_shape)}")
        sp = x.shape[2:]
        begins, ends = auto_pads(auto_pad, sp, kernel_shape, strides, node.attr("pads"))
        out_sp = []
        for n, k, s, b, e in zip(sp, kernel_shape, strides, begins, ends):
            span = n + b + e - k
            out_sp.append((-(-span // s) if ceil_mode else span // s) + 1)
        m = np.asarray(mask)
        flat = m.reshape(-1)
        if m.ndim < 2:
            raise ValueError("MaxpoolWithMask: the mask must have at least 2 dimensions")
        total = m.shape[0] * m.shape[1]
        plane = int(np.prod(sp))
        planes = x.reshape(-1, plane)
        y = np.empty((planes.shape[0], int(np.prod(out_sp))), np.float32)
        strides_sp = [int(np.prod(sp[i + 1:])) for i in range(nd)]
        for c, xp in enumerate(planes):
            off = (c * plane) % total if total else 0
            mp = flat[off:off + plane]
            if len(mp) < plane:
                raise ValueError(f"MaxpoolWithMask: the mask ({flat.size} values) is too short "
                                 f"for plane {c} at offset {off}")
            for o, pos in enumerate(np.ndindex(*out_sp)):
                ranges = []
                for d in range(nd):
                    start = pos[d] * strides[d] - begins[d]
                    ranges.append((max(start, 0), min(start + kernel_shape[d], sp[d])))
                best = lowest
                if nd == 1:
                    for h in range(*ranges[0]):
                        if mp[h] == 0:
                            break
                        best = max(best, xp[h])
                else:
                    for outer in np.ndindex(*(hi - lo for lo, hi in ranges[:-1])):
                        base = sum((lo + i) * st for (lo, _), i, st in
                                   zip(ranges[:-1], outer, strides_sp[:-1]))
                        for last in range(*ranges[-1]):
                            idx = base + last
                            if idx > 0 and mp[idx] == 0:
                                break
                            best = max(best, xp[idx])
                y[c, o] = best
        return y.reshape(x.shape[:2] + tuple(out_sp))

    return kernel
