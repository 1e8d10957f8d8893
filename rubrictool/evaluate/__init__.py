"""Evaluation across folds: pooled grade and concept metrics, the baselines, and paired bootstrap CIs.

A k-fold run directory (``rubrictool train --folds 5``) holds one ordinary run per fold
(``fold-0/`` …) and, once every fold is done, ``pooled_predictions.csv`` (each item's test
prediction from the one fold that tested it, next to its gold grade and concepts), ``folds.json``
(per-fold and pooled metrics, the majority-class and oracle-concept baselines) and ``folds.md``.

* majority class: always the most common grade of the fold's training split;
* oracle concepts: a multinomial logistic regression from the one-hot *gold* concept levels to the
  grade, fitted on the fold's training split, its L2 strength chosen on dev T-F1 — what a linear
  head could do if every concept were right.

:func:`bootstrap_ci` resamples items with replacement and recomputes a metric: its 95 % percentile interval;
:func:`paired_bootstrap` does the same for two sets of predictions of the same items: the interval of the difference
B − A. Both drop the resamples where the metric is undefined (NaN: QWK of a resample of one grade). They are the one
bootstrap of the package: k-fold runs (:mod:`rubrictool.train.kfold`) use them too.

A run's reliability table (α beside σ_k²) is in :mod:`rubrictool.evaluate.reliability`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from scipy.stats import rankdata, spearmanr
from sklearn.linear_model import LogisticRegression

from reccbm.metrics import concept_metrics, grade_metrics, macro_f1, quadratic_weighted_kappa
from rubrictool.errors import TrainError

__all__ = [
    "BOOTSTRAP_METRICS",
    "CONSTANT_SHARE",
    "SMALL_TEST",
    "bootstrap_ci",
    "calibration",
    "compare_runs",
    "expected_calibration_error",
    "honest_metrics",
    "inconclusive",
    "lcec_activity",
    "low_marks",
    "low_marks_lines",
    "majority_baseline",
    "oracle_concept_baseline",
    "paired_bootstrap",
    "pooled_metrics",
    "spearman_with_ci",
    "why_inconclusive",
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
SMALL_TEST = 50  # fewer test answers than this: a single split cannot tell models apart (suggest --folds 5)
CONSTANT_SHARE = 0.9  # one grade predicted for at least this share of the test answers: a (near-)constant model
LCEC_INERT_A = 0.98  # mean A_kk at or above this: LCEC barely shrinks the concept scores
LCEC_INERT_R = 0.05  # every learned partial correlation below this in |r|: LCEC links no concepts
ECE_BINS = 10  # equal-width bins of the top-class probability
INFLATED = 1.0  # failing answers graded this many marks too high on average: low marks are not given


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


def _resampled(n: int, n_boot: int, seed: int, stat: Callable[[NDArray[np.int64]], float]) -> NDArray[np.float64]:
    """``stat`` of ``n_boot`` resamples of ``n`` items drawn with replacement (seeded), with the resamples where it is
    undefined (NaN) dropped: a resample whose gold and predicted grades are one grade has no QWK."""
    rng = np.random.default_rng(seed)
    vals = np.array([stat(rng.integers(0, n, n)) for _ in range(n_boot)], dtype=float)
    kept: NDArray[np.float64] = vals[~np.isnan(vals)]
    return kept


def _interval(vals: NDArray[np.float64]) -> tuple[float, float]:
    """The 95 % percentile interval of the kept resamples; (NaN, NaN) when none is kept."""
    if not len(vals):
        return float("nan"), float("nan")
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def _bootstrap_inputs(metric: str, arrays: tuple[ArrayLike, ...],
                      what: str) -> tuple[Callable[[NDArray[Any], NDArray[Any]], float], list[NDArray[Any]]]:
    """The metric's function and the arrays, after checking the metric's name and that they are as long and not
    empty (``what`` starts the error)."""
    if metric not in BOOTSTRAP_METRICS:
        raise TrainError(f"unknown metric {metric!r}; use one of {', '.join(BOOTSTRAP_METRICS)}")
    out = [np.asarray(x) for x in arrays]
    if len({len(x) for x in out}) != 1 or len(out[0]) == 0:
        of = "truth and prediction" if len(out) == 2 else "both predictions"
        raise TrainError(f"{what} needs the same, non-empty set of items for {of}")
    return BOOTSTRAP_METRICS[metric], out


def paired_bootstrap(
    y_true: ArrayLike, pred_a: ArrayLike, pred_b: ArrayLike, metric: str = "t_acc", n_boot: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Difference metric(B) − metric(A) on the same items with its 95 % percentile bootstrap interval
    (items resampled with replacement, the same resample for A and B) and the share of resamples in
    which B is not better than A (a one-sided bootstrap p-value; for rmse, lower is better).

    NaN: a resample where either metric is undefined (QWK of one grade) is dropped from the interval and the
    p-value; when every resample is dropped, ``lo``, ``hi`` and ``p_not_better`` are NaN. ``diff`` is on all items."""
    f, (t, a, b) = _bootstrap_inputs(metric, (y_true, pred_a, pred_b), "paired bootstrap")
    diffs = _resampled(len(t), n_boot, seed, lambda idx: f(t[idx], b[idx]) - f(t[idx], a[idx]))
    sign = -1.0 if metric == "rmse" else 1.0
    lo, hi = _interval(diffs)
    return {"diff": f(t, b) - f(t, a), "lo": lo, "hi": hi,
            "p_not_better": float(np.mean(sign * diffs <= 0)) if len(diffs) else float("nan")}


def _read_pooled(run: Path) -> pd.DataFrame:
    path = run / "pooled_predictions.csv"
    if not path.is_file():
        raise TrainError(f"{run} has no pooled_predictions.csv: it is not a finished k-fold run (train --folds)")
    df = pd.read_csv(path, dtype={"id": str})
    if not {"id", "grade", "grade_true"} <= set(df.columns):
        raise TrainError(f"{path}: expected columns id, grade and grade_true")
    return df


def _grade_span(run: Path, pooled: pd.DataFrame) -> int:
    """Highest minus lowest grade of a k-fold run's scale: its first fold's model.json, else the grades it pooled."""
    import json

    for meta in sorted(run.glob("fold-*/model.json"))[:1]:
        try:
            lo, hi = json.loads(meta.read_text())["grade"][:2]
            return int(hi) - int(lo)
        except (OSError, ValueError, KeyError, TypeError):
            break
    grades = pd.concat([pooled["grade_true"], pooled["grade"]])
    return int(grades.max() - grades.min())


def compare_runs(
    run_a: str | Path, run_b: str | Path, metrics: tuple[str, ...] = ("t_acc", "t_f1", "qwk", "adjacent", "rmse"),
    n_boot: int = 2000, seed: int = 0,
) -> dict[str, Any]:
    """Paired bootstrap of every metric between two k-fold runs over the items both tested. Adjacent agreement is
    left out on a two-grade scale (±1 covers every pair there: it is 1 for any grader)."""
    a, b = _read_pooled(Path(run_a)), _read_pooled(Path(run_b))
    if "adjacent" in metrics and _grade_span(Path(run_a), a) < 2:
        metrics = tuple(m for m in metrics if m != "adjacent")
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
    idx = np.random.default_rng(seed).integers(0, len(a), (n_boot, len(a)))  # the same draws as one resample at a time
    ra, rb = rankdata(a[idx], axis=1), rankdata(b[idx], axis=1)  # (n_boot, n) average ranks, as spearmanr's
    ok = (np.ptp(ra, axis=1) > 0) & (np.ptp(rb, axis=1) > 0)
    ra, rb = ra[ok] - ra[ok].mean(1, keepdims=True), rb[ok] - rb[ok].mean(1, keepdims=True)
    boots = (ra * rb).sum(1) / np.sqrt((ra * ra).sum(1) * (rb * rb).sum(1))  # Pearson's r of the ranks
    lo, hi = (np.percentile(boots, [2.5, 97.5]) if len(boots) else (float("nan"), float("nan")))
    return {"rho": rho, "lo": float(lo), "hi": float(hi), "n": len(a)}


def bootstrap_ci(y_true: ArrayLike, y_pred: ArrayLike, metric: str = "t_acc", n_boot: int = 1000,
                 seed: int = 0) -> dict[str, float]:
    """metric(y_true, y_pred) with its 95 % percentile bootstrap interval (items resampled with replacement):
    {"value", "lo", "hi"}. The one-sample counterpart of :func:`paired_bootstrap`, with its NaN rule: a resample where
    the metric is undefined is dropped (a constant model's QWK is 0 with the interval [0, 0], not [NaN, NaN]); when
    every resample is dropped, ``lo`` and ``hi`` are NaN."""
    f, (t, p) = _bootstrap_inputs(metric, (y_true, y_pred), "a bootstrap CI")
    lo, hi = _interval(_resampled(len(t), n_boot, seed, lambda idx: f(t[idx], p[idx])))
    return {"value": f(t, p), "lo": lo, "hi": hi}


def calibration(probs: ArrayLike, y_true: ArrayLike, bins: int = ECE_BINS) -> dict[str, Any]:
    """How well the grade probabilities match how often the model is right.

    probs: (N, S+1) grade probabilities; y_true: (N,) grades 0..S. ``ece``: expected calibration error over
    ``bins`` equal-width bins of the top-class probability, Σ_b (n_b / N) |acc_b − conf_b|; ``nll``: the
    mean negative log-likelihood −log p(y_true) (probabilities clipped at 1e-12); ``bins``: per non-empty bin
    its lower edge, count, mean confidence and accuracy (the reliability diagram's points)."""
    p, y = np.asarray(probs, dtype=float), np.asarray(y_true, dtype=np.int64)
    if p.ndim != 2 or len(p) != len(y) or len(y) == 0:
        raise TrainError(f"calibration needs (N, grades) probabilities and N grades, got {p.shape} and {y.shape}")
    conf, pred = p.max(1), p.argmax(1)  # (N,)
    out = expected_calibration_error(conf, pred == y, bins)
    nll = float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-12, None))))
    return {"ece": out["ece"], "nll": nll, "ece_bins": out["ece_bins"], "bins": out["bins"]}


def expected_calibration_error(confidence: ArrayLike, correct: ArrayLike, bins: int = ECE_BINS) -> dict[str, Any]:
    """ECE from each answer's top-class probability and whether its top grade was right (what
    test_predictions.csv keeps: grade_prob, grade == gold), so pooled folds need no probability vectors."""
    conf, right = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=float)
    idx = np.minimum((conf * bins).astype(int), bins - 1)  # (N,) bin of each answer
    rows, ece = [], 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            acc, cb = float(right[m].mean()), float(conf[m].mean())
            ece += float(m.mean()) * abs(acc - cb)
            rows.append({"lo": b / bins, "n": int(m.sum()), "confidence": cb, "accuracy": acc})
    return {"ece": float(ece), "ece_bins": f"{bins} equal-width bins of the top-class probability", "bins": rows}


def honest_metrics(y_true: ArrayLike, y_pred: ArrayLike, y_train: ArrayLike | None, n_boot: int = 1000,
                   seed: int = 0, grade_min: int = 0, y_majority: ArrayLike | None = None) -> dict[str, Any]:
    """What a single split can say about itself (grades 0..S; ``grade_min`` shifts the grades it names back
    to the rubric's scale).

    ``n_test``; ``majority``: the training split's most common grade and its T-Acc/QWK on the test answers;
    ``ci``: bootstrap 95 % CIs of T-Acc and QWK; ``vs_majority``: paired bootstrap of T-Acc (model − majority);
    ``top_share``: the share of test answers given the most predicted grade; ``warnings``: [{code, message}]
    with codes ``constant_predictions`` (≥ CONSTANT_SHARE of the answers get one grade),
    ``not_above_majority`` (the paired CI of T-Acc over the majority class reaches 0) and ``small_test``
    (fewer than SMALL_TEST test answers). ``y_majority``: the majority-class prediction of each test answer
    instead of ``y_train`` (pooled folds, each with its own training split's majority)."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if y_majority is not None:
        maj = np.asarray(y_majority)
    elif y_train is not None:
        maj = majority_baseline(y_train, len(t))
    else:
        raise TrainError("honest_metrics needs the training grades or the majority-class predictions")
    mvals, mcounts = np.unique(maj, return_counts=True)
    values, counts = np.unique(p, return_counts=True)
    top = int(values[np.argmax(counts)])
    share = float(counts.max() / len(p))
    out: dict[str, Any] = {
        "n_test": len(t),
        "majority": {"grade": int(mvals[np.argmax(mcounts)]) + grade_min, "t_acc": BOOTSTRAP_METRICS["t_acc"](t, maj),
                     "qwk": BOOTSTRAP_METRICS["qwk"](t, maj)},
        "ci": {m: bootstrap_ci(t, p, m, n_boot, seed) for m in ("t_acc", "qwk")},
        "vs_majority": paired_bootstrap(t, maj, p, "t_acc", n_boot, seed),
        "top_grade": top + grade_min, "top_share": share, "warnings": [],
    }
    warns: list[dict[str, str]] = out["warnings"]
    if share >= CONSTANT_SHARE:
        warns.append({"code": "constant_predictions",
                      "message": f"the model gives grade {top + grade_min} to {100 * share:.0f} % of the {len(t)} test "
                                 "answers: it has learned (almost) nothing but the most common grade"})
    vs = out["vs_majority"]
    if vs["lo"] <= 0:
        warns.append({"code": "not_above_majority",
                      "message": "T-Acc is not above the majority class (always grade "
                                 f"{int(mvals[np.argmax(mcounts)]) + grade_min}): {vs['diff']:+.3f}, 95 % CI "
                                 f"[{vs['lo']:+.3f}, {vs['hi']:+.3f}]"})
    if len(t) < SMALL_TEST:
        warns.append({"code": "small_test",
                      "message": f"only {len(t)} test answers: too few to tell this model from chance or from "
                                 "another; train with --folds 5 to test every answer once"})
    return out


def lcec_activity(a_diag: ArrayLike, partial: ArrayLike) -> dict[str, Any]:
    """Whether a learned LCEC does anything: mean A_kk, the largest |partial correlation| off the diagonal and
    ``inert`` (mean A_kk ≥ LCEC_INERT_A or every |r| < LCEC_INERT_R), with ``reason`` in words."""
    a, r = np.asarray(a_diag, dtype=float), np.asarray(partial, dtype=float)  # (K,), (K, K)
    off = np.abs(r[~np.eye(len(r), dtype=bool)])
    mean_a = float(a.mean())
    max_r = float(off.max()) if off.size else 0.0
    reasons = []
    if mean_a >= LCEC_INERT_A:
        reasons.append(f"mean A_kk is {mean_a:.3f} (≥ {LCEC_INERT_A}): it barely shrinks the concept scores")
    if max_r < LCEC_INERT_R:
        reasons.append(f"every learned partial correlation is below {LCEC_INERT_R} in size (largest {max_r:.3f}): "
                       "it links no concepts")
    return {"mean_A_kk": mean_a, "max_abs_partial": max_r, "inert": bool(reasons), "reason": "; ".join(reasons)}


FEW_CONCEPTS = 3  # a rank correlation over this many concepts or fewer says nothing (ρ can only be ±1 or ±½)


def inconclusive(ci: dict[str, float] | None) -> bool:
    """A correlation whose 95 % CI spans 0 (or that has none, or a NaN bound), or one over :data:`FEW_CONCEPTS`
    concepts or fewer, says nothing either way."""
    return ci is None or ci.get("n", FEW_CONCEPTS + 1) <= FEW_CONCEPTS or not (ci["lo"] > 0 or ci["hi"] < 0)


def why_inconclusive(ci: dict[str, float] | None) -> str | None:
    """Why :func:`inconclusive` says so, in words (None when the correlation is conclusive)."""
    if not inconclusive(ci):
        return None
    if ci is not None and ci.get("n", FEW_CONCEPTS + 1) <= FEW_CONCEPTS:
        return (f"over {int(ci['n'])} concepts a rank correlation can only be ±1 or ±½, whatever the CI; it needs "
                f"more than {FEW_CONCEPTS}")
    return "the CI spans 0"



# ---------------------------------------------------------------------------- low marks in plain sight
def _mean_ci(x: NDArray[Any], rng: np.random.Generator, n_boot: int) -> tuple[float, float, float]:
    """Mean of x with its 95 % percentile bootstrap interval (NaNs when x is empty)."""
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    boots = x[rng.integers(0, len(x), (n_boot, len(x)))].mean(1)  # (n_boot,)
    return float(x.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def low_marks(y_true: ArrayLike, y_pred: ArrayLike, grades: list[int], pass_mark: int, n_boot: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """How a grader treats each true mark, and the failing answers above all (grades on the rubric's own scale).

    ``per_mark``: for every mark of ``grades`` the answers truly given it — ``n``, the mean predicted mark and the mean
    error (predicted − true) each with its 95 % bootstrap CI (the mark's answers resampled), ``recall`` (the share
    given exactly that mark) and ``over2`` (the share graded two or more marks too high). ``failing``: the answers
    below ``pass_mark`` — ``n``, ``passed`` (the share given ``pass_mark`` or more) and the mean error, each with its
    CI, and ``inflated`` (mean error ≥ :data:`INFLATED`: the low marks are not given). ``passing``: the other side of
    the same line — the answers at or above ``pass_mark``, ``n`` and ``failed`` (the share given a mark below it) with
    its CI; a decision rule that fails more weak answers fails some passing ones too. ``pass_mark`` is echoed."""
    t, p = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    if len(t) != len(p):
        raise TrainError(f"low_marks needs one prediction per answer, got {len(p)} for {len(t)}")
    rng = np.random.default_rng(seed)
    rows = []
    for g in grades:
        m = t == g
        err = p[m] - t[m]
        pred, plo, phi = _mean_ci(p[m], rng, n_boot)
        e, elo, ehi = _mean_ci(err, rng, n_boot)
        rows.append({"grade": int(g), "n": int(m.sum()), "mean_pred": pred, "mean_pred_lo": plo, "mean_pred_hi": phi,
                     "mean_error": e, "mean_error_lo": elo, "mean_error_hi": ehi,
                     "recall": float((err == 0).mean()) if m.any() else float("nan"),
                     "over2": float((err >= 2).mean()) if m.any() else float("nan")})
    fail = t < pass_mark
    passed, lo, hi = _mean_ci((p[fail] >= pass_mark).astype(float), rng, n_boot)
    e, elo, ehi = _mean_ci(p[fail] - t[fail], rng, n_boot)
    failing = {"n": int(fail.sum()), "passed": passed, "passed_lo": lo, "passed_hi": hi,
               "mean_error": e, "mean_error_lo": elo, "mean_error_hi": ehi,
               "inflated": bool(fail.any() and e >= INFLATED)}
    failed, flo, fhi = _mean_ci((p[~fail] < pass_mark).astype(float), rng, n_boot)
    passing = {"n": int((~fail).sum()), "failed": failed, "failed_lo": flo, "failed_hi": fhi}
    return {"pass_mark": int(pass_mark), "per_mark": rows, "failing": failing, "passing": passing}


def _num(x: float, spec: str) -> str:
    return "—" if x is None or math.isnan(x) else format(x, spec)


def low_marks_lines(lm: dict[str, Any]) -> tuple[list[str], list[list[str]], str]:
    """:func:`low_marks` as a table (head, rows) and its one-sentence failing-answers figure, the same words on the
    terminal, every page and Markdown."""
    head = ["true mark", "answers", "mean predicted [95 % CI]", "mean error [95 % CI]", "recall",
            "graded ≥ 2 too high"]
    rows = [[str(r["grade"]), str(r["n"]),
             f"{_num(r['mean_pred'], '.2f')} [{_num(r['mean_pred_lo'], '.2f')}, {_num(r['mean_pred_hi'], '.2f')}]",
             (f"{_num(r['mean_error'], '+.2f')} [{_num(r['mean_error_lo'], '+.2f')}, "
              f"{_num(r['mean_error_hi'], '+.2f')}]"),
             _num(100 * r["recall"], ".0f") + " %" if r["n"] else "—",
             _num(100 * r["over2"], ".0f") + " %" if r["n"] else "—"] for r in lm["per_mark"]]
    f, pm = lm["failing"], lm["pass_mark"]
    if not f["n"]:
        return head, rows, f"No answer is marked below the pass mark ({pm}): the failing answers are not measured."
    text = (f"Failing answers (marked below the pass mark, {pm}): {f['n']}; {100 * f['passed']:.0f} % of them were "
            f"given a pass mark [95 % CI {100 * f['passed_lo']:.0f}, {100 * f['passed_hi']:.0f} %], their mean error "
            f"{f['mean_error']:+.2f} [{f['mean_error_lo']:+.2f}, {f['mean_error_hi']:+.2f}] marks")
    text += (": low marks are inflated by a mark or more." if f["inflated"] else ".")
    ok = lm.get("passing")  # absent from metrics written before it was measured
    if ok and ok["n"]:
        text += (f" Of the {ok['n']} passing answers, {100 * ok['failed']:.0f} % were given a failing mark "
                 f"[95 % CI {100 * ok['failed_lo']:.0f}, {100 * ok['failed_hi']:.0f} %].")
    return head, rows, text
