"""Evaluation across folds: pooled grade and concept metrics, the baselines, and paired bootstrap CIs.

A k-fold run directory (``rubrictool train --folds 5``) holds one ordinary run per fold
(``fold-0/`` …) and, once every fold is done, ``pooled_predictions.csv`` (each item's test
prediction from the one fold that tested it, next to its gold grade and concepts), ``folds.json``
(per-fold and pooled metrics, the majority-class and oracle-concept baselines) and ``folds.md``.

* majority class: always the most common grade of the fold's training split;
* oracle concepts: a multinomial logistic regression from the one-hot *gold* concept levels to the
  grade, fitted on the fold's training split, its L2 strength chosen on dev T-F1 — what a linear
  head could do if every concept were right.

:func:`paired_bootstrap` resamples items with replacement and recomputes a metric for two sets of
predictions of the same items: the 95 % percentile interval of the difference B − A.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from scipy.stats import spearmanr
from sklearn.linear_model import LogisticRegression

from reccbm.metrics import concept_metrics, grade_metrics, macro_f1, quadratic_weighted_kappa
from rubrictool.errors import TrainError

__all__ = [
    "BOOTSTRAP_METRICS",
    "compare_runs",
    "majority_baseline",
    "oracle_concept_baseline",
    "paired_bootstrap",
    "pooled_metrics",
    "spearman_with_ci",
]

# metric name -> f(y_true, y_pred); larger is better for all but rmse
BOOTSTRAP_METRICS: dict[str, Callable[[NDArray[Any], NDArray[Any]], float]] = {
    "t_acc": lambda t, p: float((t == p).mean()),
    "t_f1": macro_f1,
    "qwk": quadratic_weighted_kappa,
    "adjacent": lambda t, p: float((np.abs(t - p) <= 1).mean()),
    "rmse": lambda t, p: float(np.sqrt(np.mean((t - p) ** 2))),
}

ORACLE_CS = (0.01, 0.1, 1.0, 10.0, 100.0)


def pooled_metrics(pooled: pd.DataFrame, keys: list[str]) -> dict[str, float]:
    """Grade metrics of ``grade`` vs ``grade_true``, concept metrics of ``<key>_level`` vs ``<key>_true``
    when present, and the oracle intervention (``grade_oracle``) when present."""
    out = grade_metrics(pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy())
    if keys and all(f"{k}_level" in pooled and f"{k}_true" in pooled for k in keys):
        true = pooled[[f"{k}_true" for k in keys]].to_numpy()
        pred = pooled[[f"{k}_level" for k in keys]].to_numpy()
        out |= concept_metrics(true, pred)
    if "grade_oracle" in pooled:
        oracle = grade_metrics(pooled["grade_true"].to_numpy(), pooled["grade_oracle"].to_numpy())
        out |= {"oracle_t_acc": oracle["t_acc"], "oracle_t_f1": oracle["t_f1"], "oracle_qwk": oracle["qwk"]}
        out["oracle_gain_t_acc"] = out["oracle_t_acc"] - out["t_acc"]
    return out


def majority_baseline(train_grades: ArrayLike, n_test: int) -> NDArray[Any]:
    """The most common training grade (ties: the lower grade), repeated for each test item."""
    values, counts = np.unique(np.asarray(train_grades), return_counts=True)
    return np.full(n_test, values[np.argmax(counts)])


def _one_hot(levels: NDArray[Any], num_levels: int) -> NDArray[Any]:
    N, K = levels.shape
    out = np.zeros((N, K * num_levels))
    out[np.arange(N)[:, None], np.arange(K)[None, :] * num_levels + levels] = 1.0
    return out


def oracle_concept_baseline(
    levels: dict[str, NDArray[Any]], grades: dict[str, NDArray[Any]], num_levels: int
) -> NDArray[Any]:
    """Test grades predicted from the gold concept levels (0..M) by a logistic regression fitted on
    ``train``, its L2 strength C chosen on ``dev`` (macro-F1, then accuracy)."""
    X = {s: _one_hot(np.asarray(levels[s], dtype=np.int64), num_levels) for s in ("train", "dev", "test")}
    best: tuple[tuple[float, float], Any] | None = None
    for C in ORACLE_CS:
        clf = LogisticRegression(C=C, max_iter=2000).fit(X["train"], grades["train"])
        p = clf.predict(X["dev"])
        key = (macro_f1(grades["dev"], p), float((p == grades["dev"]).mean()))
        if best is None or key > best[0]:
            best = (key, clf)
    assert best is not None
    out: NDArray[Any] = best[1].predict(X["test"])
    return out


def paired_bootstrap(
    y_true: ArrayLike, pred_a: ArrayLike, pred_b: ArrayLike, metric: str = "t_acc", n_boot: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Difference metric(B) − metric(A) on the same items with its 95 % percentile bootstrap interval
    (items resampled with replacement, the same resample for A and B) and the share of resamples in
    which B is not better than A (a one-sided bootstrap p-value; for rmse, lower is better)."""
    if metric not in BOOTSTRAP_METRICS:
        raise TrainError(f"unknown metric {metric!r}; use one of {', '.join(BOOTSTRAP_METRICS)}")
    f = BOOTSTRAP_METRICS[metric]
    t, a, b = (np.asarray(x) for x in (y_true, pred_a, pred_b))
    if not (len(t) == len(a) == len(b)) or len(t) == 0:
        raise TrainError("paired bootstrap needs the same, non-empty set of items for both predictions")
    rng = np.random.default_rng(seed)
    diffs = np.empty(n_boot)
    for i in range(n_boot):
        idx = rng.integers(0, len(t), len(t))
        diffs[i] = f(t[idx], b[idx]) - f(t[idx], a[idx])
    sign = -1.0 if metric == "rmse" else 1.0
    return {
        "diff": f(t, b) - f(t, a),
        "lo": float(np.percentile(diffs, 2.5)),
        "hi": float(np.percentile(diffs, 97.5)),
        "p_not_better": float(np.mean(sign * diffs <= 0)),
    }


def _read_pooled(run: Path) -> pd.DataFrame:
    path = run / "pooled_predictions.csv"
    if not path.is_file():
        raise TrainError(f"{run} has no pooled_predictions.csv: it is not a finished k-fold run (train --folds)")
    df = pd.read_csv(path, dtype={"id": str})
    if not {"id", "grade", "grade_true"} <= set(df.columns):
        raise TrainError(f"{path}: expected columns id, grade and grade_true")
    return df


def compare_runs(
    run_a: str | Path, run_b: str | Path, metrics: tuple[str, ...] = ("t_acc", "t_f1", "qwk", "adjacent", "rmse"),
    n_boot: int = 2000, seed: int = 0,
) -> dict[str, Any]:
    """Paired bootstrap of every metric between two k-fold runs over the items both tested."""
    a, b = _read_pooled(Path(run_a)), _read_pooled(Path(run_b))
    both = a.merge(b, on="id", suffixes=("_a", "_b"))
    if len(both) == 0:
        raise TrainError(f"{run_a} and {run_b} have no test item in common")
    if not (both["grade_true_a"] == both["grade_true_b"]).all():
        raise TrainError(f"{run_a} and {run_b} disagree on gold grades: were they trained on the same table?")
    t = both["grade_true_a"].to_numpy()
    rows = {}
    for m in metrics:
        rows[m] = {"a": BOOTSTRAP_METRICS[m](t, both["grade_a"].to_numpy()),
                   "b": BOOTSTRAP_METRICS[m](t, both["grade_b"].to_numpy())}
        rows[m] |= paired_bootstrap(t, both["grade_a"], both["grade_b"], m, n_boot, seed)
    return {"a": str(run_a), "b": str(run_b), "n_items": len(both), "n_boot": n_boot, "metrics": rows}


def spearman_with_ci(x: ArrayLike, y: ArrayLike, n_boot: int = 2000, seed: int = 0) -> dict[str, float] | None:
    """Spearman ρ(x, y) across concepts with a 95 % percentile bootstrap interval over concepts (resamples
    in which either side is constant are skipped). None with fewer than 3 usable pairs."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    if len(a) < 3 or np.unique(a).size < 2 or np.unique(b).size < 2:
        return None
    rho = float(spearmanr(a, b).statistic)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(a), len(a))
        if np.unique(a[idx]).size > 1 and np.unique(b[idx]).size > 1:
            boots.append(float(spearmanr(a[idx], b[idx]).statistic))
    lo, hi = (np.percentile(boots, [2.5, 97.5]) if boots else (float("nan"), float("nan")))
    return {"rho": rho, "lo": float(lo), "hi": float(hi), "n": len(a)}
