"""ai.onnx.ml linear models, SVMs and feature transforms: SVMClassifier, SVMRegressor,
LinearClassifier, LinearRegressor, Normalizer, Scaler, Imputer (all ai.onnx.ml opset 1, the
only version of each).

Numerics follow onnxruntime's CPU kernels (``core/providers/cpu/ml``): classifiers and
regressors cast their input to float32 and score in float32 (SVM kernel values and decision
sums are computed here in float64 and rounded, which is at least as accurate); labels come
from the raw scores (SVMs: from the one-vs-one votes) before the post-transform; ties go to
the first class. Everything the attributes decide (matrices, label tables, the vote and
pairwise-coupling layouts) is prepared in the factory; a call is a few numpy operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import mul

import numpy as np

from onnxplex import NodeView, ProviderContext

from . import _ml_common as mc
from ._registry import op

ML = "ai.onnx.ml"
F32 = np.float32
Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _check_features(x: np.ndarray, n_features: int, op_type: str) -> None:
    if x.shape[1] != n_features:
        raise ValueError(f"{op_type}: input has {x.shape[1]} features, the model expects "
                         f"{n_features}")


# --------------------------------------------------------------------------------------------
# SVM kernels
# --------------------------------------------------------------------------------------------

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


class _SvmKernel:
    """K(x, v) for every row x and support vector v: [N, V] float64. RBF distances come from
    one GEMM (|x|^2 + |v|^2 - 2 x.v in float64, so no float32 cancellation)."""

    def __init__(self, node: NodeView, vectors: np.ndarray) -> None:
        self.kind = mc.enum_attr(node, "kernel_type", "LINEAR", _KERNELS)
        params = mc.floats(node, "kernel_params").astype(np.float64)
        if params.size and params.size < 3:
            raise ValueError(f"{node.op_type}: attribute 'kernel_params' needs gamma, coef0 "
                             f"and degree, got {params.size} values")
        self.gamma, self.coef0, self.degree = (params[:3].tolist() if params.size
                                               else (0.0, 0.0, 0.0))
        v = np.asarray(vectors, dtype=np.float64)                    # [V, F]
        if self.kind == "RBF":
            # -gamma |x - v|^2 = x.(2 gamma v) - gamma |v|^2 - gamma |x|^2
            self.vt = np.ascontiguousarray(v.T * (2.0 * self.gamma))
            self.bias = -self.gamma * np.einsum("ij,ij->i", v, v)
        else:
            self.vt = np.ascontiguousarray(v.T)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        xd = x.astype(np.float64)
        k = xd @ self.vt
        if self.kind == "RBF":
            k += self.bias
            k -= (self.gamma * np.einsum("ij,ij->i", xd, xd))[:, None]
            np.minimum(k, 0.0, out=k)
            return np.exp(k, out=k)
        if self.kind == "LINEAR":
            return k
        k *= self.gamma
        k += self.coef0
        if self.kind == "SIGMOID":
            return np.tanh(k, out=k)
        if self.degree == 2.0:
            return np.square(k, out=k)
        return np.power(k, self.degree, out=k)


# up to this many rows the probabilities are computed row by row in Python floats
_SCALAR_ROWS = 8


# --------------------------------------------------------------------------------------------
# Pairwise coupling (libsvm's multiclass_probability, as onnxruntime runs it)
# --------------------------------------------------------------------------------------------


def _pair_probabilities(dec: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray
                        ) -> np.ndarray:
    """sigmoid_probability of each decision value, clamped to [1e-7, 1 - 1e-7] (float32)."""
    p = F32(1) - mc.logistic(dec * prob_a + prob_b)
    return np.clip(p, F32(1e-7), F32(1) - F32(1e-7))


def _pair_probability(v: float) -> float:
    """1 - logistic(v), clamped, in Python floats."""
    if v >= 0:
        e = math.exp(-v)
        p = e / (1.0 + e)
    else:
        p = 1.0 / (1.0 + math.exp(v))
    return min(max(p, 1e-7), 1.0 - 1e-7)


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
        self.diag = np.arange(c)

    def __call__(self, dec: np.ndarray) -> np.ndarray:
        if dec.shape[0] <= _SCALAR_ROWS:
            return np.array([self._row(d) for d in dec.tolist()], F32).reshape(-1, self.c)
        rp = _pair_probabilities(dec.astype(F32), self.pa, self.pb)
        n, c = rp.shape[0], self.c
        r = np.zeros((n, c, c), F32)
        r[:, self.i, self.j] = rp
        r[:, self.j, self.i] = F32(1) - rp
        q = -(r * r.transpose(0, 2, 1))
        q[:, self.diag, self.diag] = np.einsum("nji,nji->ni", r, r)
        p = np.full((n, c), F32(1.0 / c), F32)
        rows = np.arange(n)
        qa, pa = q, p.copy()
        for _ in range(100):
            qp = np.einsum("nij,nj->ni", qa, pa)
            pqp = np.einsum("ni,ni->n", pa, qp)
            done = np.abs(qp - pqp[:, None]).max(axis=1) < self.eps
            if done.any():
                p[rows[done]] = pa[done]
                keep = ~done
                rows, qa, pa, qp, pqp = rows[keep], qa[keep], pa[keep], qp[keep], pqp[keep]
                if rows.size == 0:
                    return p
            for i in range(c):
                qii = qa[:, i, i]
                diff = (pqp - qp[:, i]) / qii
                pa[:, i] += diff
                one = F32(1) + diff
                pqp = (pqp + diff * (diff * qii + F32(2) * qp[:, i])) / one / one
                qp = (qp + diff[:, None] * qa[:, i, :]) / one[:, None]
                pa /= one[:, None]
        p[rows] = pa
        return p

    def _row(self, dec: list[float]) -> list[float]:
        c = self.c
        r = [[0.0] * c for _ in range(c)]
        for (i, j, a, b), d in zip(self.pairs, dec):
            v = _pair_probability(d * a + b)
            r[i][j] = v
            r[j][i] = 1.0 - v
        q = [[-r[j][i] * r[i][j] for j in range(c)] for i in range(c)]
        for i in range(c):
            q[i][i] = sum(r[j][i] * r[j][i] for j in range(c))
        p = [1.0 / c] * c
        eps = float(self.eps)
        for _ in range(100):
            qp = [sum(map(mul, qi, p)) for qi in q]
            pqp = sum(map(mul, p, qp))
            if max(abs(v - pqp) for v in qp) < eps:
                break
            # one sweep; p and qp are kept as p * s and qp * s, so that each step's division
            # of both by (1 + diff) is one product into s
            s = 1.0
            for i in range(c):
                qi = q[i]
                qii = qi[i]
                qpi = qp[i] / s
                diff = (pqp - qpi) / qii
                one = 1.0 + diff
                pqp = (pqp + diff * (diff * qii + 2.0 * qpi)) / one / one
                ds = diff * s
                p[i] += ds
                qp = [a + ds * b for a, b in zip(qp, qi)]
                s *= one
            p = [a / s for a in p]
        return p


# --------------------------------------------------------------------------------------------
# SVMClassifier
# --------------------------------------------------------------------------------------------


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

    # decision values of the one-vs-one pairs as one product: dec = K @ w + rho, where pair
    # (i, j)'s column holds class i's vectors' coefficients of row j-1 and class j's of row i
    start = np.concatenate([[0], np.cumsum(per_class)])
    w = np.zeros((n_vectors, max(n_pairs, 1)), np.float64)
    # votes = (dec > 0) @ vote_diff + vote_base: a pair votes for i when dec > 0, else for j
    vote_diff = np.zeros((max(n_pairs, 1), n_classes), np.float64)
    vote_base = np.zeros(n_classes, np.float64)
    pair = 0
    for i in range(n_classes - 1):
        for j in range(i + 1, n_classes):
            si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
            w[si, pair] = coef[j - 1, si]
            w[sj, pair] = coef[i, sj]
            vote_diff[pair, i] += 1.0
            vote_diff[pair, j] -= 1.0
            vote_base[j] += 1.0
            pair += 1
    w = w[:, :n_pairs]
    vote_diff = vote_diff[:n_pairs]
    rho_d = rho[:n_pairs].astype(np.float64)
    pa, pb = prob_a[:n_pairs], prob_b[:n_pairs]
    coupling = _Coupling(n_classes, pa, pb) if have_proba else None
    # two classes without probabilities: [-s, s] (LOGISTIC: [logistic(-s), logistic(s)]),
    # else [1 - s, s] untransformed, as onnxruntime 1.32 writes them
    binary_second = "negate" if post in (mc.NONE, mc.LOGISTIC) else "complement"

    def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xf = mc.as_float32_2d(x, name)
        _check_features(xf, n_features, name)
        dec = kern(xf) @ w
        dec += rho_d
        votes = (dec > 0) @ vote_diff
        votes += vote_base
        label = labels[votes.argmax(axis=1)]
        dec32 = dec.astype(F32)
        if coupling is not None:
            scores = mc.transform_scores(coupling(dec), post)
        elif n_classes > 2:
            scores = mc.transform_scores(dec32, post)
        elif n_classes == 2:
            scores = mc.one_score(dec32[:, 0], post, binary_second)
        else:   # one class: onnxruntime writes no score
            scores = np.zeros((xf.shape[0], 2), F32)
        return label, scores

    return kernel


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
        s = xf @ coef_t
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
    coefs = mc.floats(node, "coefficients", required=True).astype(np.float64)
    rho = mc.floats(node, "rho", required=True)
    mc.post_transform(node)   # validated, not applied (as in onnxruntime)
    n_sv = int(node.attr("n_supports", 0))
    one_class = bool(node.attr("one_class", 0))
    bias = np.float64(rho[0])
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
    else:
        n_features = coefs.size
        kern = None
        w = coefs.reshape(n_features, 1)

    def kernel(x: np.ndarray) -> np.ndarray:
        xf = mc.as_float32_2d(x, name)
        _check_features(xf, n_features, name)
        k = kern(xf) if kern is not None else xf.astype(np.float64)
        y = k @ w
        y += bias
        if one_class:
            return np.where(y > 0, F32(1), F32(-1))
        return y.astype(F32)

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

    def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xf = mc.as_float32_2d(x, name)
        _check_features(xf, n_features, name)
        s = xf @ coef_t
        s += intercepts
        if n_classes == 1:
            col = s[:, 0]
            return two[(col > 0).view(np.int8)], mc.one_score(col, post, second)
        return labels[s.argmax(axis=1)], mc.transform_scores(s, post)

    return kernel


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

    def kernel(x: np.ndarray) -> np.ndarray:
        xf = mc.as_float32_2d(x, name)
        _check_features(xf, n_features, name)
        y = xf @ coef_t
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
    L2 squares in the input type first, as onnxruntime does."""
    norm = mc.enum_attr(node, "norm", "MAX", ("MAX", "L1", "L2"))

    def kernel(x: np.ndarray) -> np.ndarray:
        shape = x.shape
        xr = _rows(x, "Normalizer")
        xf = xr.astype(F32)
        if norm == "MAX":
            d = xf.max(axis=1, keepdims=True) if xf.shape[1] else np.zeros((xf.shape[0], 1), F32)
            y = xf / np.where(d == 0, F32(1), d)
        elif norm == "L1":
            d = np.abs(xr).astype(F32).sum(axis=1, keepdims=True, dtype=F32)
            y = xf / np.where(d == 0, F32(1), d)
        else:
            sq = (xr * xr).astype(F32)
            d = sq.sum(axis=1, keepdims=True, dtype=F32)
            y = np.sqrt(sq / np.where(d == 0, F32(1), d))
            np.negative(y, out=y, where=xr < 0)
            y = np.where(d == 0, xf, y)
        return y.reshape(shape)

    return kernel


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

    def kernel(x: np.ndarray) -> np.ndarray:
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

    def kernel(x: np.ndarray) -> np.ndarray:
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
