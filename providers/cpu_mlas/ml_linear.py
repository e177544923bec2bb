"""ai.onnx.ml linear models, SVMs and feature transforms: SVMClassifier, SVMRegressor,
LinearClassifier, LinearRegressor, Normalizer, Scaler, Imputer (all ai.onnx.ml opset 1, the
only version of each).

Numerics follow onnxruntime's CPU kernels (``core/providers/cpu/ml``): classifiers and
regressors cast their input to float32 and score in float32 (RBF distances are taken in
float64 and SVM decision values summed in float64, as onnxruntime sums them); labels come from
the raw scores (SVMs: from the one-vs-one votes) before the post-transform; ties go to the
first class. Everything the attributes decide (matrices, label tables, the vote and
pairwise-coupling layouts) is prepared in the factory; a call is a few numpy operations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from operator import mul

import numpy as np

from onnxplex import NodeView, ProviderContext

from . import _ml_common as mc
from . import _native
from ._registry import op

ML = "ai.onnx.ml"
F32 = np.float32
Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _check_features(x: np.ndarray, n_features: int, op_type: str) -> None:
    if x.shape[1] != n_features:
        raise ValueError(f"{op_type}: input has {x.shape[1]} features, the model expects "
                         f"{n_features}")


# Products on the per-call path use ndarray.dot: the same BLAS GEMM as ``@``, dispatched in
# ~1 us less (a batch-1 call makes a few).

# --------------------------------------------------------------------------------------------
# SVM kernels
# --------------------------------------------------------------------------------------------

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


class _SvmKernel:
    """K(x, v) for every row x and support vector v: [N, V] float32, as onnxruntime's.

    RBF distances come from one float64 GEMM (|x|^2 + |v|^2 - 2 x.v: no float32
    cancellation) and are exponentiated in float32 (float64 exp costs four times as much);
    the other kernels are a float32 GEMM and float32 element-wise work, as in onnxruntime."""

    def __init__(self, node: NodeView, vectors: np.ndarray) -> None:
        self.kind = mc.enum_attr(node, "kernel_type", "LINEAR", _KERNELS)
        params = mc.floats(node, "kernel_params")
        if params.size and params.size < 3:
            raise ValueError(f"{node.op_type}: attribute 'kernel_params' needs gamma, coef0 "
                             f"and degree, got {params.size} values")
        gamma, coef0, degree = params[:3].tolist() if params.size else (0.0, 0.0, 0.0)
        self.gamma_raw = gamma
        self.gamma, self.coef0, self.degree = F32(gamma), F32(coef0), F32(degree)
        self.vectors = vectors
        self.vt: np.ndarray | None = None   # (the products' operands: made at the first call)

    def _prepare(self) -> None:
        v = np.asarray(self.vectors, dtype=np.float64)                    # [V, F]
        if self.kind == "RBF":
            # -gamma |x - v|^2 = x.(2 gamma v) - gamma |v|^2 - gamma |x|^2
            gamma = self.gamma_raw
            self.gamma_d = float(gamma)
            self.bias = -gamma * np.einsum("ij,ij->i", v, v)
            self.vt = np.ascontiguousarray(v.T * (2.0 * gamma))
        else:
            self.vt = np.ascontiguousarray(v.T, dtype=F32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``x`` is float32 [N, F]."""
        if self.vt is None:
            self._prepare()   # (a race prepares the same arrays twice)
        if self.kind == "RBF":
            xd = x.astype(np.float64)
            k = xd.dot(self.vt)
            k += self.bias
            k -= (self.gamma_d * np.einsum("ij,ij->i", xd, xd))[:, None]
            # floored at -87: no subnormal results (slow), and exp(-87) < 2e-38 is 0 to a sum
            np.maximum(k, -87.0, out=k)
            return np.exp(k, dtype=F32)
        k = x.dot(self.vt)
        if self.kind == "LINEAR":
            return k
        k *= self.gamma
        k += self.coef0
        if self.kind == "SIGMOID":
            return np.tanh(k, out=k)
        if self.degree == 2:
            return np.square(k, out=k)
        if self.degree == 3:
            return k * k * k
        return np.power(k, self.degree, out=k)


# --------------------------------------------------------------------------------------------
# Pairwise coupling (libsvm's multiclass_probability, as onnxruntime runs it)
# --------------------------------------------------------------------------------------------

# up to this many rows the probabilities are computed row by row in Python floats
_SCALAR_ROWS = 8


def _pair_probabilities(dec: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray
                        ) -> np.ndarray:
    """sigmoid_probability of each decision value, clamped to [1e-7, 1 - 1e-7] (float32)."""
    p = F32(1) - mc.logistic(dec * prob_a + prob_b)
    return np.clip(p, F32(1e-7), F32(1) - F32(1e-7))


_ONE_MINUS = 1.0 - 1e-7


class _Coupling:
    """Class probabilities [N, C] from the one-vs-one decision values [N, P]: each pair's
    Platt-scaled probability r_ij = 1 - logistic(dec * prob_a + prob_b), clamped to
    [1e-7, 1 - 1e-7], then the iterative coupling of Wu, Lin and Weng (2004) that libsvm and
    onnxruntime use: at most 100 sweeps, a row stopping once max |Qp - pQp| < 0.005 / C.

    Many rows run in numpy in float32, in onnxruntime's order of operations; a few rows run in
    Python floats (double precision, as libsvm), which costs less than numpy calls on tiny
    arrays."""

    def __init__(self, n_classes: int, prob_a: np.ndarray, prob_b: np.ndarray) -> None:
        c = n_classes
        self.c = c
        self.i, self.j = np.triu_indices(c, 1)
        self.pairs = list(zip(self.i.tolist(), self.j.tolist(), prob_a.tolist(),
                              prob_b.tolist()))
        self.pa, self.pb = prob_a, prob_b
        self.eps = F32(0.005 / c)
        self.eps_f = float(self.eps)
        self.diag = np.arange(c)

    def __call__(self, dec: np.ndarray) -> np.ndarray:
        if dec.shape[0] <= _SCALAR_ROWS:
            return np.array([self._row(d) for d in dec.tolist()], F32).reshape(-1, self.c)
        # class-major layout ([C, C, N], [C, N]): every operation runs along N, contiguous
        rp = _pair_probabilities(dec, self.pa, self.pb).T
        c, n = self.c, rp.shape[1]
        r = np.zeros((c, c, n), F32)
        r[self.i, self.j] = rp
        r[self.j, self.i] = F32(1) - rp
        q = -(r * r.transpose(1, 0, 2))
        q[self.diag, self.diag] = (r * r).sum(axis=0)
        p = np.full((c, n), F32(1.0 / c), F32)
        rows = np.arange(n)
        qa, pa = q, p.copy()
        for _ in range(100):
            qp = (qa * pa).sum(axis=1)
            pqp = (pa * qp).sum(axis=0)
            done = np.abs(qp - pqp).max(axis=0) < self.eps
            if done.any():
                p[:, rows[done]] = pa[:, done]
                keep = ~done
                rows, qa, pa, qp, pqp = (rows[keep], qa[:, :, keep], pa[:, keep], qp[:, keep],
                                         pqp[keep])
                if rows.size == 0:
                    break
            for i in range(c):
                qii = qa[i, i]
                diff = (pqp - qp[i]) / qii
                pa[i] += diff
                one = F32(1) + diff
                pqp = (pqp + diff * (diff * qii + F32(2) * qp[i])) / one / one
                qp += diff * qa[i]
                qp /= one
                pa /= one
        else:
            p[:, rows] = pa
        return np.ascontiguousarray(p.T)

    def _row(self, dec: list[float]) -> list[float]:
        c = self.c
        # Q[i][j] = -r_ji r_ij, Q[i][i] = sum_j r_ji^2, from r_ij = v, r_ji = 1 - v (i < j)
        q = [[0.0] * c for _ in range(c)]
        for (i, j, a, b), d in zip(self.pairs, dec):
            v = d * a + b
            if v >= 0:
                e = math.exp(-v)
                v = e / (1.0 + e)
            else:
                v = 1.0 / (1.0 + math.exp(v))
            v = 1e-7 if v < 1e-7 else (_ONE_MINUS if v > _ONE_MINUS else v)
            w = 1.0 - v
            q[i][j] = q[j][i] = -v * w
            q[i][i] += w * w
            q[j][j] += v * v
        p = [1.0 / c] * c
        eps = self.eps_f
        for _ in range(100):
            qp = [sum(map(mul, qi, p)) for qi in q]
            pqp = sum(map(mul, p, qp))
            if max(qp) - pqp < eps and pqp - min(qp) < eps:
                break
            # one sweep. Each step divides p and Qp by (1 + diff): p is kept as p * s, with
            # the divisions multiplied into s; the step needs only the i-th entry of Qp,
            # qp[i] + sum_k<i ds_k Q[k][i] (Q is symmetric), scaled by s
            s = 1.0
            ds: list[float] = []
            for i in range(c):
                qi = q[i]
                qii = qi[i]
                qpi = (qp[i] + sum(map(mul, ds, qi))) / s
                diff = (pqp - qpi) / qii
                one = 1.0 + diff
                pqp = (pqp + diff * (diff * qii + 2.0 * qpi)) / (one * one)
                d = diff * s
                p[i] += d
                ds.append(d)
                s *= one
            p = [a / s for a in p]
        return p


# --------------------------------------------------------------------------------------------
# SVMClassifier
# --------------------------------------------------------------------------------------------

# up to this many class pairs the winner of each sign pattern is tabulated
_TABLE_PAIRS = 16


class _VoteWinner:
    """The label each row's one-vs-one votes elect (the first class of the most votes), from
    the [N, P] signs of its decision values: up to 16 pairs (7 classes) through a table of
    all 2^P sign patterns, so a call is one product and one lookup."""

    def __init__(self, labels: np.ndarray, vote_diff: np.ndarray, vote_base: np.ndarray) -> None:
        n_pairs = vote_diff.shape[0]
        self.diff, self.base, self.labels = vote_diff, vote_base, labels
        self.table = None
        if n_pairs <= _TABLE_PAIRS:
            self.powers = np.left_shift(1, np.arange(n_pairs, dtype=np.int64))
            codes = np.arange(1 << n_pairs, dtype=np.int64)
            signs = (codes[:, None] >> np.arange(n_pairs)) & 1
            self.table = labels[(signs @ vote_diff + vote_base).argmax(axis=1)]

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self.table[pos.dot(self.powers)]
        votes = pos @ self.diff
        votes += self.base
        return self.labels[votes.argmax(axis=1)]



@op("SVMClassifier", domain=ML, since=1)
def make_svm_classifier(node: NodeView, ctx: ProviderContext) -> Kernel:
    name = "SVMClassifier"
    labels, _ = mc.class_labels(node)
    n_classes = labels.size
    if n_classes == 0:
        raise ValueError(f"{name}: one of 'classlabels_ints', 'classlabels_strings' is required")
    coefs = mc.floats(node, "coefficients", required=True)
    rho = mc.floats(node, "rho", required=True)
    prob_a, prob_b = mc.floats(node, "prob_a"), mc.floats(node, "prob_b")
    if prob_a.size != prob_b.size:
        raise ValueError(f"{name}: attributes 'prob_a' and 'prob_b' differ in length "
                         f"({prob_a.size} and {prob_b.size})")
    have_proba = prob_a.size > 0
    post = mc.post_transform(node)
    per_class = mc.ints(node, "vectors_per_class")
    n_vectors = int(per_class.sum()) if per_class.size else 0
    all_positive = bool((coefs >= 0).all())
    mc.enum_attr(node, "kernel_type", "LINEAR", _KERNELS)

    if n_vectors == 0:
        return _linear_svc(node, labels, coefs, rho, post, have_proba, all_positive)

    if per_class.size != n_classes:
        raise ValueError(f"{name}: 'vectors_per_class' has {per_class.size} entries for "
                         f"{n_classes} class labels")
    if (per_class < 0).any():
        raise ValueError(f"{name}: 'vectors_per_class' has a negative count")
    sv = mc.floats(node, "support_vectors")
    if sv.size == 0 or sv.size % n_vectors:
        raise ValueError(f"{name}: 'support_vectors' has {sv.size} values, not a multiple of "
                         f"the {n_vectors} vectors of 'vectors_per_class'")
    n_features = sv.size // n_vectors
    n_pairs = n_classes * (n_classes - 1) // 2
    if coefs.size < (n_classes - 1) * n_vectors:
        raise ValueError(f"{name}: 'coefficients' has {coefs.size} values, expected "
                         f"(classes - 1) * vectors = {(n_classes - 1) * n_vectors}")
    if rho.size < n_pairs:
        raise ValueError(f"{name}: 'rho' has {rho.size} values, expected {n_pairs} (one per "
                         "pair of classes)")
    if have_proba and prob_a.size < n_pairs:
        raise ValueError(f"{name}: 'prob_a'/'prob_b' have {prob_a.size} values, expected "
                         f"{n_pairs}")
    kern = _SvmKernel(node, sv.reshape(n_vectors, n_features))
    coef = coefs[:(n_classes - 1) * n_vectors].reshape(n_classes - 1, n_vectors)
    pairs = list(itertools.combinations(range(n_classes), 2))   # one-vs-one, libsvm's order
    start = [0, *itertools.accumulate(per_class.tolist())]
    rho_d = rho[:n_pairs].astype(np.float64)
    pa, pb = prob_a[:n_pairs], prob_b[:n_pairs]
    # two classes without probabilities: [-s, s] (LOGISTIC: [logistic(-s), logistic(s)]),
    # else [1 - s, s] untransformed, as onnxruntime 1.32 writes them
    binary_second = "negate" if post in (mc.NONE, mc.LOGISTIC) else "complement"

    def scores_of(dec: np.ndarray, n: int) -> np.ndarray:
        if have_proba or n_classes > 2:
            return mc.transform_scores(dec, post)
        if n_classes == 2:
            return mc.one_score(dec[:, 0], post, binary_second)
        return np.zeros((n, 2), F32)     # one class: onnxruntime writes no score

    # the native evaluator (every batch size): pair (i, j) sums class i's vectors with
    # coefficient row j - 1 and class j's with row i
    segs = [(start[k], int(per_class[k]), row * n_vectors + start[k])
            for i, j in pairs for k, row in ((i, j - 1), (j, i))]
    native = _native_svm(kern, sv, n_features, coef.reshape(-1), segs, 2, rho_d, n_classes,
                         pa if have_proba else None, pb if have_proba else None, ctx)
    if native is not None:
        def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            index, dec = native(x)
            return labels[index], scores_of(dec, index.shape[0])

        return kernel

    # numpy: the decision values of the one-vs-one pairs as one product, dec = K @ w + rho,
    # where pair (i, j)'s column holds class i's vectors' coefficients of row j-1 and class
    # j's of row i
    w = np.zeros((n_vectors, n_pairs), np.float64)     # summed in double, as onnxruntime
    # a pair votes for i when its decision value is > 0, else for j: votes = pos @ vote_diff +
    # vote_base, pos the [N, P] signs
    vote_diff = np.zeros((n_pairs, n_classes), np.int64)
    vote_base = np.zeros(n_classes, np.int64)
    for pair, (i, j) in enumerate(pairs):
        si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
        w[si, pair] = coef[j - 1, si]
        w[sj, pair] = coef[i, sj]
        vote_diff[pair, i] += 1
        vote_diff[pair, j] -= 1
        vote_base[j] += 1
    winner = _VoteWinner(labels, vote_diff, vote_base)
    coupling = _Coupling(n_classes, pa, pb) if have_proba else None

    def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xf = mc.as_float32_2d(x, name)
        _check_features(xf, n_features, name)
        dec = kern(xf).dot(w)
        dec += rho_d
        label = winner(dec > 0)
        dec = dec.astype(F32)
        if coupling is not None:
            dec = coupling(dec)
        return label, scores_of(dec, xf.shape[0])

    return kernel


def _native_svm(kern: _SvmKernel, sv: np.ndarray, n_features: int, coefs: np.ndarray,
                segs: list[tuple[int, int, int]], segs_per_output: int, bias: np.ndarray,
                n_classes: int, prob_a: np.ndarray | None, prob_b: np.ndarray | None,
                ctx: ProviderContext) -> Callable[[np.ndarray], object] | None:
    """The native evaluator's ``run`` (svm.h), None without the native module: ``segs`` are
    (first vector, count, offset into ``coefs``), ``segs_per_output`` of them an output.

    With support vectors the native evaluator serves every batch size: one call without
    temporaries at batch 1 (~2 us against ~60-100 us of numpy calls), and at batch 1000 it is
    faster than the numpy products too (threaded over rows, a vectorised float exp)."""
    mod = _native.native()
    if mod is None or not hasattr(mod, "svm") or not segs:
        return None
    start, count, off = (np.array(c, np.int64).reshape(-1) for c in zip(*segs))
    empty = np.zeros(0, F32)
    model = mod.svm(
        np.ascontiguousarray(sv, F32), n_features, _KERNELS.index(kern.kind),
        float(kern.gamma_raw), float(kern.coef0), float(kern.degree),
        np.ascontiguousarray(coefs, F32), start, count, off,
        np.arange(0, len(segs) + 1, segs_per_output, dtype=np.int64),
        np.asarray(bias, np.float64).reshape(-1), n_classes,
        empty if prob_a is None else prob_a, empty if prob_b is None else prob_b,
        _native.threads(ctx.intra_op_num_threads))
    return model.run


def _linear_svc(node: NodeView, labels: np.ndarray, coefs: np.ndarray, rho: np.ndarray,
                post: int, have_proba: bool, all_positive: bool) -> Kernel:
    """SVMClassifier without support vectors (liblinear): scores = x @ coefficients^T + rho[0]
    ([N, classes]); the label is the best score's, but for two classes onnxruntime picks the
    second label when the best score is >= 0.5 (all coefficients >= 0) or > 0 (mixed signs)."""
    name = "SVMClassifier"
    n_classes = labels.size
    if coefs.size % n_classes:
        raise ValueError(f"{name}: 'coefficients' has {coefs.size} values, not a multiple of "
                         f"the {n_classes} classes")
    if rho.size < 1:
        raise ValueError(f"{name}: attribute 'rho' is required")
    coef_t = np.ascontiguousarray(coefs.reshape(n_classes, -1).T)
    n_features = coef_t.shape[0]
    bias = F32(rho[0])
    pick_second = n_classes == 2 and not have_proba

    def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xf = mc.as_float32_2d(x, name)
        _check_features(xf, n_features, name)
        s = xf.dot(coef_t)
        s += bias
        best = s.argmax(axis=1)
        if pick_second:
            top = s[np.arange(s.shape[0]), best]
            second = (top >= 0.5) if all_positive else (top > 0)
            best = np.where(second, 1, best)
        label = labels[best]
        scores = (mc.transform_scores(s, post) if n_classes > 1
                  else mc.one_score(s[:, 0], post, None))
        return label, scores

    return kernel


# --------------------------------------------------------------------------------------------
# SVMRegressor
# --------------------------------------------------------------------------------------------


@op("SVMRegressor", domain=ML, since=1)
def make_svm_regressor(node: NodeView, ctx: ProviderContext) -> Kernel:
    """onnxruntime ignores ``post_transform`` here, and so does this kernel; ``one_class``
    maps the score to +1 (> 0) or -1."""
    name = "SVMRegressor"
    coefs = mc.floats(node, "coefficients", required=True)
    rho = mc.floats(node, "rho", required=True)
    mc.post_transform(node)   # validated, not applied (as in onnxruntime)
    n_sv = int(node.attr("n_supports", 0))
    one_class = bool(node.attr("one_class", 0))
    bias = rho[0]
    if n_sv > 0:
        sv = mc.floats(node, "support_vectors")
        if sv.size == 0 or sv.size % n_sv:
            raise ValueError(f"{name}: 'support_vectors' has {sv.size} values, not a multiple "
                             f"of n_supports = {n_sv}")
        if coefs.size < n_sv:
            raise ValueError(f"{name}: 'coefficients' has {coefs.size} values for {n_sv} "
                             "support vectors")
        n_features = sv.size // n_sv
        kern = _SvmKernel(node, sv.reshape(n_sv, n_features))
        w = coefs[:n_sv].reshape(n_sv, 1)
        native = _native_svm(kern, sv, n_features, coefs[:n_sv], [(0, n_sv, 0)], 1,
                             rho[:1].astype(np.float64), 0, None, None, ctx)
    else:
        mc.enum_attr(node, "kernel_type", "LINEAR", _KERNELS)   # validated; linear here
        n_features = coefs.size
        kern = native = None
        w = coefs.reshape(n_features, 1)

    def kernel(x: np.ndarray) -> np.ndarray:
        if native is not None:
            y = native(x)
        else:
            xf = mc.as_float32_2d(x, name)
            _check_features(xf, n_features, name)
            y = (kern(xf) if kern is not None else xf).dot(w)
            y += bias
        if one_class:
            return np.where(y > 0, F32(1), F32(-1))
        return y

    return kernel


# --------------------------------------------------------------------------------------------
# LinearClassifier, LinearRegressor
# --------------------------------------------------------------------------------------------


def _coef_matrix(node: NodeView, coefs: np.ndarray, n_rows: int) -> np.ndarray:
    """coefficients as the transposed [F, n_rows] matrix of a GEMM."""
    if n_rows <= 0 or coefs.size % n_rows:
        raise ValueError(f"{node.op_type}: 'coefficients' has {coefs.size} values, not a "
                         f"multiple of {n_rows} (the number of "
                         f"{'targets' if node.op_type == 'LinearRegressor' else 'intercepts'})")
    return np.ascontiguousarray(coefs.reshape(n_rows, -1).T)


@op("LinearClassifier", domain=ML, since=1)
def make_linear_classifier(node: NodeView, ctx: ProviderContext) -> Kernel:
    """scores = x @ coefficients^T + intercepts ([N, classes], classes = len(intercepts)).
    One score per row is binary: the label is the second one (or 1) when the score is > 0, and
    with two class labels the scores become [1 - s, s] (no other transform but PROBIT
    applies to one score, as in onnxruntime)."""
    name = "LinearClassifier"
    coefs = mc.floats(node, "coefficients", required=True)
    intercepts = mc.floats(node, "intercepts")
    labels, is_str = mc.class_labels(node)
    post = mc.post_transform(node)
    mc.ints(node, "multi_class")   # onnxruntime reads it and ignores it
    n_classes = intercepts.size
    if n_classes == 0:
        raise ValueError(f"{name}: attribute 'intercepts' is required (its length is the "
                         "number of classes)")
    coef_t = _coef_matrix(node, coefs, n_classes)
    n_features = coef_t.shape[0]
    if n_classes == 1:
        if labels.size == 2:
            neg, pos = labels[0], labels[1]
        else:
            neg, pos = ("0", "1") if is_str else (0, 1)
        two = mc.obj_array([neg, pos]) if is_str else np.array([neg, pos], np.int64)
        second = "complement" if labels.size == 2 else None
    elif labels.size < n_classes:
        raise ValueError(f"{name}: {labels.size} class labels for {n_classes} classes")

    small, small_post = _small_linear(coef_t, intercepts, post if n_classes > 1 else mc.NONE)

    def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if small is not None and _take_small(x, n_features * n_classes, post):
            best, s = small(x)
            if n_classes > 1:
                return labels[best], mc.transform_scores(s, small_post)
        else:
            xf = mc.as_float32_2d(x, name)
            _check_features(xf, n_features, name)
            s = xf.dot(coef_t)
            s += intercepts
            if n_classes > 1:
                return labels[s.argmax(axis=1)], mc.transform_scores(s, post)
        col = s[:, 0]
        return two[(col > 0).view(np.int8)], mc.one_score(col, post, second)

    return kernel


# A linear model is scored by the native routine (linear.h: one call for the product,
# intercepts, first best index and LOGISTIC/SOFTMAX, a scalar loop) when the whole product is
# small or each row's is: [1000, 10] @ [10, 3] 12 us against numpy's 16 (argmax and all, 21);
# numpy's BLAS product otherwise ([16, 100] @ [100, 10]: 2.0 us against the loop's 5.1).
_SMALL_MACS = 4096
_SMALL_ROW_MACS = 64


_SMALL_ROWS = 16   # PROBIT's scores: up to this many rows only (its inverse erf magnifies the
# loop's other summation order past onnxruntime's 1e-5 on some rows: as before)


def _take_small(x: np.ndarray, row_macs: int, post: int) -> bool:
    if x.ndim == 1:
        return True
    if x.ndim != 2:
        return False
    if post == mc.PROBIT:
        return x.shape[0] <= _SMALL_ROWS
    return row_macs <= _SMALL_ROW_MACS or x.shape[0] * row_macs <= _SMALL_MACS
_NATIVE_POST = {mc.NONE: 0, mc.LOGISTIC: 1, mc.SOFTMAX: 2}


def _small_linear(coef_t: np.ndarray, bias: np.ndarray | None, post: int
                  ) -> tuple[Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None, int]:
    """The native small-batch scorer of coefficients ``coef_t`` [F, n_out] and ``bias`` (None:
    zeros), applying ``post`` when it can (NONE, LOGISTIC, SOFTMAX), and the transform left to
    apply to its scores (``post`` or NONE); (None, post) without the native module."""
    mod = _native.native()
    if mod is None or not hasattr(mod, "linear") or coef_t.shape[1] == 0:
        return None, post
    n_out = coef_t.shape[1]
    b = np.zeros(n_out, F32) if bias is None else bias
    code = _NATIVE_POST.get(post)
    lin = mod.linear(np.ascontiguousarray(coef_t.T, F32), np.asarray(b, F32),
                     0 if code is None else code)
    return lin.run, (post if code is None else mc.NONE)


@op("LinearRegressor", domain=ML, since=1)
def make_linear_regressor(node: NodeView, ctx: ProviderContext) -> Kernel:
    """y = x @ coefficients^T + intercepts ([N, targets], float32); intercepts are used only
    when there is one per target; one target takes no transform but PROBIT."""
    name = "LinearRegressor"
    targets = int(node.attr("targets", 1))
    coefs = mc.floats(node, "coefficients", required=True)
    intercepts = mc.floats(node, "intercepts")
    post = mc.post_transform(node)
    coef_t = _coef_matrix(node, coefs, targets)
    n_features = coef_t.shape[0]
    bias = intercepts if intercepts.size == targets else None

    small, small_post = _small_linear(coef_t, bias, post if targets > 1 else mc.NONE)

    def kernel(x: np.ndarray) -> np.ndarray:
        if small is not None and _take_small(x, n_features * targets, post):
            y = small(x)[1]
            if targets > 1:
                return mc.transform_scores(y, small_post)
        else:
            xf = mc.as_float32_2d(x, name)
            _check_features(xf, n_features, name)
            y = xf.dot(coef_t)
            if bias is not None:
                y += bias
        if targets == 1:
            return mc.one_score(y[:, 0], post, None) if post == mc.PROBIT else y
        return mc.transform_scores(y, post)

    return kernel


# --------------------------------------------------------------------------------------------
# Normalizer, Scaler, Imputer
# --------------------------------------------------------------------------------------------


def _rows(x: np.ndarray, op_type: str) -> np.ndarray:
    """[N, F] view of a rank-1 or rank-2 input."""
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim != 2:
        raise ValueError(f"{op_type}: input must have rank 1 or 2, got shape {x.shape}")
    return x


@op("Normalizer", domain=ML, since=1)
def make_normalizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """Rows divided by their max, L1 or L2 norm in float32 (a row whose norm is 0 is copied);
    L2 squares in the input type first, as onnxruntime does. A float32 input is one native
    call (:func:`_native_rows`), summing in float32 as onnxruntime does."""
    norm = mc.enum_attr(node, "norm", "MAX", ("MAX", "L1", "L2"))
    rows = _native_rows("normalize_rows_f32")
    code = ("MAX", "L1", "L2").index(norm)

    def kernel(x: np.ndarray) -> np.ndarray:
        if rows is not None and x.dtype == F32 and x.size and x.ndim in (1, 2):
            return rows(x.reshape(1, -1) if x.ndim == 1 else x, code).reshape(x.shape)
        xr = _rows(x, "Normalizer")
        xf = xr if xr.dtype == F32 else xr.astype(F32)
        if xf.shape[1] == 0:
            return xf.reshape(x.shape)
        if norm == "MAX":
            d = mc.row_max(xf)
        elif norm == "L1":      # abs in the input type, then float: the same as this
            d = mc.row_sum(np.abs(xf))
        else:
            sq = xf * xf if xr.dtype == F32 else (xr * xr).astype(F32)
            d = mc.row_sum(sq)
        zero = None if d.all() else (d == 0)     # such rows are copied
        if zero is not None:
            d = np.where(zero, F32(1), d)
        if norm != "L2":
            return (xf / d).reshape(x.shape)
        y = np.sqrt(sq / d)
        np.copysign(y, xf, out=y)
        if zero is not None:
            y = np.where(zero, xf, y)
        return y.reshape(x.shape)

    return kernel


def _native_rows(name: str) -> Callable[..., np.ndarray] | None:
    """The native row kernel ``name`` (src/rows.h: Scaler, Imputer, Normalizer on float32
    rows, one call in place of two to six numpy calls), or None without the native module:
    kernels look it up once, at build time."""
    return getattr(_native.native(), name, None)


def _per_feature(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A per-feature vector laid against x as onnxruntime indexes it (element i takes value
    i % stride, stride = dim 1, or dim 0 of a vector)."""
    if x.ndim <= 2:
        return values
    return np.resize(values, x.size).reshape(x.shape)


def _stride(x: np.ndarray, op_type: str) -> int:
    if x.ndim == 0:
        raise ValueError(f"{op_type}: input has no dimensions")
    return x.shape[0] if x.ndim == 1 else x.shape[1]


@op("Scaler", domain=ML, since=1)
def make_scaler(node: NodeView, ctx: ProviderContext) -> Kernel:
    """y = float((x - offset) * scale): float32 arithmetic, double for a double input, an
    integer input converted to float first; offset and scale have one value per feature or
    one in all."""
    name = "Scaler"
    scale = mc.floats(node, "scale", required=True)
    offset = mc.floats(node, "offset")
    if offset.size != scale.size:
        raise ValueError(f"{name}: attributes 'scale' and 'offset' differ in length "
                         f"({scale.size} and {offset.size})")
    scale_d, offset_d = scale.astype(np.float64), offset.astype(np.float64)
    n = scale.size
    rows = _native_rows("scale_rows_f32")

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype == F32 and x.ndim == 2 and x.shape[1] == n:    # the usual call
            if rows is not None:
                return rows(x, offset, scale)
            y = x - offset
            y *= scale
            return y
        stride = _stride(x, name)
        if n != stride and n != 1:
            raise ValueError(f"{name}: 'scale' and 'offset' must have one value per feature "
                             f"({stride}) or one value, got {n}")
        if x.dtype == np.float64:
            y = (x - _per_feature(offset_d, x)) * _per_feature(scale_d, x)
            return y.astype(F32)
        xf = x if x.dtype == F32 else x.astype(F32)
        y = xf - _per_feature(offset, x)
        y *= _per_feature(scale, x)
        return y

    return kernel


@op("Imputer", domain=ML, since=1)
def make_imputer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """Values equal to the replaced value (NaN matching NaN) become the imputed value of their
    feature (or the one imputed value). Float inputs use the float attributes, integer inputs
    the int64 ones (onnxruntime runs float and int64 only; double and int32 are served too)."""
    name = "Imputer"
    imp_f = mc.floats(node, "imputed_value_floats")
    imp_i = mc.ints(node, "imputed_value_int64s")
    if (imp_f.size == 0) == (imp_i.size == 0):
        raise ValueError(f"{name}: exactly one of 'imputed_value_floats' and "
                         "'imputed_value_int64s' must be given")
    rep_f = F32(node.attr("replaced_value_float", 0.0))
    rep_i = np.int64(node.attr("replaced_value_int64", 0))
    nan_f = bool(np.isnan(rep_f))
    fill_f32 = imp_f if imp_f.size else None     # a float32 [N, F] input's fill values
    rows = _native_rows("impute_rows_f32")

    def kernel(x: np.ndarray) -> np.ndarray:
        if (fill_f32 is not None and x.dtype == F32 and x.ndim == 2
                and x.shape[1] == fill_f32.size):    # the usual call
            if rows is not None:
                return rows(x, fill_f32, rep_f, nan_f)
            return np.where(np.isnan(x) if nan_f else x == rep_f, fill_f32, x)
        is_float = x.dtype.kind == "f"
        values = imp_f if is_float else imp_i
        if values.size == 0:
            wanted = "imputed_value_floats" if is_float else "imputed_value_int64s"
            raise ValueError(f"{name}: a {x.dtype} input needs attribute {wanted!r}")
        stride = _stride(x, name)
        values = values.astype(x.dtype, copy=False)
        fill = _per_feature(values, x) if values.size == stride else values[0]
        if is_float:
            rep = x.dtype.type(rep_f)
            hit = np.isnan(x) if np.isnan(rep_f) else (x == rep)
        else:
            hit = x == rep_i
        return np.where(hit, fill, x)

    return kernel
