"""Evaluation metrics: the paper's C-Acc, C-F1, T-Acc, T-F1, and the grade metrics of the scoring field.

Grade metrics (:func:`grade_metrics`) treat grades as points on an ordinal scale 0..S: quadratic
weighted kappa (QWK), Pearson r, RMSE, exact agreement (= T-Acc) and adjacent agreement (|ŷ − y| <= 1).

C-Acc: accuracy over all (item, concept) pairs. C-F1: macro-F1 over levels, computed per concept
and averaged over concepts. T-Acc / T-F1: grade accuracy and macro-F1 over grades. Macro-F1 averages
over the classes present in the gold or the predicted labels (scikit-learn's default, with 0 for an
undefined F1), so a grade absent from both does not count.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "accuracy",
    "adjacent_agreement",
    "concept_metrics",
    "concept_score_reliability",
    "grade_metrics",
    "macro_f1",
    "pearson",
    "per_concept_metrics",
    "quadratic_weighted_kappa",
    "rmse",
    "task_metrics",
]


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    t, p = np.asarray(y_true), np.asarray(y_pred)
    return float((t == p).mean()) if t.size else float("nan")


def macro_f1(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Unweighted mean of per-class F1 over the classes seen in y_true or y_pred."""
    t, p = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    if t.size == 0:
        return float("nan")
    scores = []
    for c in np.union1d(t, p):
        tp = float(np.sum((t == c) & (p == c)))
        denom = float(np.sum(t == c) + np.sum(p == c))
        scores.append(2 * tp / denom if denom else 0.0)
    return float(np.mean(scores))


def concept_metrics(c_true: ArrayLike, c_pred: ArrayLike) -> dict[str, float]:
    """C-Acc and C-F1 for (N, K) level arrays."""
    _, per_f1 = per_concept_metrics(c_true, c_pred)
    return {"c_acc": accuracy(c_true, c_pred), "c_f1": float(np.mean(per_f1))}


def per_concept_metrics(c_true: ArrayLike, c_pred: ArrayLike) -> tuple[list[float], list[float]]:
    """Accuracy and macro-F1 of each concept (column) of (N, K) level arrays."""
    t, p = np.asarray(c_true), np.asarray(c_pred)
    if t.ndim != 2 or t.shape != p.shape:
        raise ValueError(f"concept arrays must both be (N, K), got {t.shape} and {p.shape}")
    K = t.shape[1]
    return [accuracy(t[:, k], p[:, k]) for k in range(K)], [macro_f1(t[:, k], p[:, k]) for k in range(K)]


def task_metrics(y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """T-Acc and T-F1 (macro over grades)."""
    return {"t_acc": accuracy(y_true, y_pred), "t_f1": macro_f1(y_true, y_pred)}


def quadratic_weighted_kappa(y_true: ArrayLike, y_pred: ArrayLike, num_classes: int | None = None) -> float:
    """Cohen's κ with quadratic weights w_ij = (i − j)² / (C − 1)² over classes 0..C−1:
    1 − Σ w O / Σ w E, O the observed confusion counts and E the outer product of the marginals / N."""
    t, p = np.asarray(y_true, dtype=np.int64).ravel(), np.asarray(y_pred, dtype=np.int64).ravel()
    if t.size == 0:
        return float("nan")
    lo = int(min(t.min(), p.min()))
    C = num_classes if num_classes is not None else int(max(t.max(), p.max())) - lo + 1
    t, p = t - lo, p - lo
    O = np.zeros((C, C))
    np.add.at(O, (t, p), 1.0)  # (C, C) observed
    E = np.outer(O.sum(1), O.sum(0)) / t.size  # (C, C) expected by chance
    i = np.arange(C)
    w = (i[:, None] - i[None, :]) ** 2 / max(1, (C - 1) ** 2)
    denom = float((w * E).sum())
    return 1.0 - float((w * O).sum()) / denom if denom > 0 else float("nan")


def pearson(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Pearson r between gold and predicted grades (NaN when either is constant)."""
    t, p = np.asarray(y_true, dtype=float).ravel(), np.asarray(y_pred, dtype=float).ravel()
    if t.size < 2 or t.std() == 0 or p.std() == 0:
        return float("nan")
    return float(np.corrcoef(t, p)[0, 1])


def rmse(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    t, p = np.asarray(y_true, dtype=float).ravel(), np.asarray(y_pred, dtype=float).ravel()
    return float(np.sqrt(np.mean((t - p) ** 2))) if t.size else float("nan")


def adjacent_agreement(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Share of predictions within one grade point of the gold grade."""
    t, p = np.asarray(y_true, dtype=float).ravel(), np.asarray(y_pred, dtype=float).ravel()
    return float((np.abs(t - p) <= 1).mean()) if t.size else float("nan")


def grade_metrics(y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """T-Acc (= exact agreement), T-F1, QWK, Pearson r, RMSE and adjacent agreement on grades 0..S."""
    return task_metrics(y_true, y_pred) | {
        "qwk": quadratic_weighted_kappa(y_true, y_pred),
        "pearson": pearson(y_true, y_pred),
        "rmse": rmse(y_true, y_pred),
        "adjacent": adjacent_agreement(y_true, y_pred),
    }


def concept_score_reliability(c_hat: ArrayLike, c_true: ArrayLike, M: int) -> dict[str, list[float]]:
    """How noisy each concept score is on answers the model never trained on (test outputs), per concept k.

    With s̃_k = ĉ_k / M and c_k / M the label on [0, 1] (LCEC's measurement model s̃ = z + e, Eq. 17-18):
    ``sigma2`` σ̂_k² = var(s̃_k − c_k/M), the noise variance of the score; ``reliability``
    var(c_k/M) / (var(c_k/M) + σ̂_k²), the share of the score's variance that is signal — A_kk of the
    paper's diagonal case (Remark), but fixed by the data, whereas LCEC's σ_k² is identified only together
    with its prior precision; ``slope`` the least-squares slope of c_k/M on s̃_k, the A_kk that minimises
    L_den for a diagonal A. c_hat: (N, K) expected levels in [0, M]; c_true: (N, K) levels 0..M.
    """
    s = np.asarray(c_hat, dtype=float) / M  # (N, K)
    c = np.asarray(c_true, dtype=float) / M  # (N, K)
    if s.shape != c.shape or s.ndim != 2 or len(s) < 2:
        raise ValueError(f"expected two (N >= 2, K) arrays of the same shape, got {s.shape} and {c.shape}")
    sigma2 = (s - c).var(0)  # (K,)
    var_c, var_s = c.var(0), s.var(0)  # (K,)
    cov = ((c - c.mean(0)) * (s - s.mean(0))).mean(0)  # (K,)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(var_c + sigma2 > 0, var_c / (var_c + sigma2), np.nan)
        slope = np.where(var_s > 0, cov / var_s, np.nan)
    return {"sigma2": sigma2.tolist(), "reliability": rel.tolist(), "slope": slope.tolist()}
