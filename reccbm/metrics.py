"""Evaluation metrics of the paper: C-Acc, C-F1, T-Acc, T-F1.

C-Acc: accuracy over all (item, concept) pairs. C-F1: macro-F1 over levels, computed per concept
and averaged over concepts. T-Acc / T-F1: grade accuracy and macro-F1 over grades. Macro-F1 averages
over the classes present in the gold or the predicted labels (scikit-learn's default, with 0 for an
undefined F1), so a grade absent from both does not count.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["accuracy", "concept_metrics", "macro_f1", "per_concept_metrics", "task_metrics"]


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
