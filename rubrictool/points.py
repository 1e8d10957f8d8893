"""A grade from the rubric's own points, with no training: the cold start of a new course.

An analytic rubric awards points per level of each concept (``points:`` on every level) and says how
the total becomes a grade (``grading: {points: sum, map: direct|linear|thresholds}``; see
:class:`rubrictool.rubric.Grading`). :func:`points_grades` applies that to concept levels — LLM labels
of new answers, an adjudicated table, or a run's predicted levels — and :func:`points_baseline` is the
same as a baseline beside the majority class.

A rubric without points can be given a *suggested* table: :func:`fit_points` fits the grade to the
levels (by default an ordinal fit of points and cut-points together, so the table can give every grade from the
lowest to the highest; each concept's level steps constrained so a higher level never earns fewer points) and
:func:`cross_validate_points` measures it on answers it was not fitted to; :func:`points_from_head` reads a trained
grade head the same way (the head's expected grade over concept profiles, made additive), and :func:`points_suggestion`
writes either into the rubric's own YAML, validated, with its diff, for a teacher to accept or edit.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from rubrictool.errors import DataError, RubricError
from rubrictool.rubric import Rubric, parse_rubric, resolve_rubric_path
from rubrictool.rubric.patch import set_grading, set_level_points, unified_diff
from rubrictool.tables import levels_from_labels, read_levels

if TYPE_CHECKING:
    import reccbm

__all__ = [
    "FIT_METHODS",
    "POINTS_MARGIN",
    "FittedPoints",
    "PointsSuggestion",
    "answers_key",
    "cross_validate_points",
    "fit_points",
    "fitted_answers",
    "fold_of",
    "grade_file",
    "grade_from_totals",
    "grade_table",
    "levels_from_labels",
    "points_ahead",
    "points_baseline",
    "points_column",
    "points_from_head",
    "points_grades",
    "points_suggestion",
    "points_table",
    "reachable_grades",
    "read_levels",
    "suggest_points",
    "write_suggestion",
]


# QWK by which the points grader on the adjudicated levels must beat a model before a run recommends it (the report's
# verdict, train's note), on top of the paired bootstrap CI of the difference excluding 0: a few test answers can
# show a large difference by chance.
POINTS_MARGIN = 0.05


def points_ahead(points: dict[str, Any] | None, qwk: float | None, margin: float = POINTS_MARGIN) -> str | None:
    """A sentence recommending the points route when the points grader on the adjudicated levels (metrics.json
    ``points``) beats the model's test ``qwk`` by ``margin`` or more *and* the paired bootstrap 95 % CI of the
    difference (``gold_levels.vs_model``: points − model, :func:`rubrictool.evaluate.paired_bootstrap`) excludes 0;
    None otherwise, and None for a run that recorded no such interval (no advice without one)."""
    gold = (points or {}).get("gold_levels")
    vs = (gold or {}).get("vs_model")
    if not gold or qwk is None or not vs or not gold["qwk"] >= qwk + margin or not vs["lo"] > 0:
        return None
    return (f"A points table on the adjudicated concept levels grades these test answers better than the model "
            f"(QWK {gold['qwk']:.3f} against {qwk:.3f}; difference {vs['diff']:+.3f}, paired 95 % CI "
            f"[{vs['lo']:+.3f}, {vs['hi']:+.3f}]): if every new answer gets its levels from the LLM panel "
            "(annotate, adjudicate), grade with `rubrictool rubric fit-points` and `rubric points` instead "
            "(docs/learning-curve.md).")


def points_table(rubric: Rubric) -> NDArray[np.float64]:
    """(K, M+1) points of each concept's levels, lowest level first; an error when the rubric has none."""
    if not rubric.has_points:
        raise RubricError(
            f"rubric {rubric.name} declares no points per level",
            hint=f"add `points:` to every level (docs/rubrics.md), or let "
                 f"`rubrictool rubric fit-points -r {rubric.name}` suggest them from graded answers",
        )
    return np.array([[float(lv.points or 0.0) for lv in c.levels] for c in rubric.concepts])  # (K, M+1)


def _round_half_up(x: NDArray[np.float64]) -> NDArray[np.int64]:
    return np.floor(x + 0.5 + 1e-9).astype(np.int64)


def grade_from_totals(
    totals: NDArray[np.float64], rubric: Rubric, points: NDArray[np.float64] | None = None,
    grading: dict[str, Any] | None = None,
) -> NDArray[np.int64]:
    """Grades (on the rubric's grade scale) from points totals, by the rubric's ``grading`` map
    (or ``grading``, e.g. ``{"map": "direct"}`` for a fitted table)."""
    pts = points_table(rubric) if points is None else points
    g = grading if grading is not None else (rubric.grading.model_dump() if rubric.grading else {})
    how = g.get("map", "linear")
    lo_total, hi_total = float(pts.min(axis=1).sum()), float(pts.max(axis=1).sum())
    gmin, gmax = rubric.grade.min, rubric.grade.max
    if how == "direct":
        raw = totals
    elif how == "linear":
        if hi_total <= lo_total:
            raise RubricError("a linear grading map needs a range of totals, but every response earns the same points")
        raw = gmin + (totals - lo_total) / (hi_total - lo_total) * (gmax - gmin)
    elif how == "thresholds":
        th = np.asarray(g.get("thresholds") or [], dtype=float)
        if len(th) != gmax - gmin:
            raise RubricError(f"grading thresholds: {len(th)} given, grades {gmin}..{gmax} need {gmax - gmin}")
        above: NDArray[np.int64] = (totals[:, None] >= th[None, :] - 1e-9).sum(axis=1).astype(np.int64)  # (N,)
        return gmin + above
    else:
        raise RubricError(f"unknown grading map {how!r}; use direct, linear or thresholds")
    return np.clip(_round_half_up(np.asarray(raw, dtype=float)), gmin, gmax)


def _check_levels(levels: NDArray[Any], rubric: Rubric) -> NDArray[np.int64]:
    lv = np.asarray(levels)
    if lv.ndim != 2 or lv.shape[1] != rubric.K:
        raise DataError(f"concept levels must be an (N, {rubric.K}) array, one column per concept of {rubric.name}; "
                        f"got shape {lv.shape}")
    if len(lv) and (np.isnan(lv.astype(float)).any() or lv.min() < 0 or lv.max() > rubric.M):
        raise DataError(f"0-based concept levels must lie in 0..{rubric.M} with none missing")
    return lv.astype(np.int64)


def points_grades(
    rubric: Rubric, levels: NDArray[Any], points: NDArray[np.float64] | None = None,
    grading: dict[str, Any] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """(totals, grades) of answers from their 0-based concept levels (N, K): each concept's level earns its
    points (``points`` (K, M+1), default the rubric's), summed, then mapped to the grade scale."""
    lv = _check_levels(levels, rubric)
    pts = points_table(rubric) if points is None else np.asarray(points, dtype=float)
    totals = pts[np.arange(rubric.K)[None, :], lv].sum(axis=1) if len(lv) else np.zeros(0)  # (N,)
    return totals, grade_from_totals(totals, rubric, pts, grading)


def points_baseline(
    rubric: Rubric, levels_0_based: NDArray[Any], grade_min: int | None = None,
    points: NDArray[np.float64] | None = None, grading: dict[str, Any] | None = None,
) -> NDArray[np.int64]:
    """The zero-training points grader as a baseline: grades for (N, K) 0-based concept levels (gold or
    predicted). Returned on the rubric's grade scale, or shifted so that ``grade_min`` is 0-based's origin:
    pass ``grade_min=rubric.grade.min`` to get 0-based grades (as train.py's ``_y``).

    A rubric without points needs a ``points`` table (e.g. :func:`fit_points` on the training part) and its
    ``grading`` (``{"map": "direct"}`` for a fitted one)."""
    _, grades = points_grades(rubric, levels_0_based, points, grading)
    return grades - (grade_min or 0)


# ---------------------------------------------------------------------------- fitted points
@dataclass
class FittedPoints:
    """A suggested points table: ``points`` (K, M+1), to be summed and read directly as the grade."""

    points: NDArray[np.float64]  # (K, M+1), rising with the level
    source: str  # what it was fitted to ("gold levels and grades of N answers", "the grade head of RUN")
    n: int  # answers (or concept profiles) fitted
    r2: float  # share of the target's variance the additive table explains (ordinal: a linear map of its totals)
    t_acc: float | None = None  # in-sample accuracy of its grades on the fitted answers (gold fits only)
    qwk: float | None = None
    grading: dict[str, Any] = field(default_factory=lambda: {"points": "sum", "map": "direct"})
    method: str = "least-squares"  # FIT_METHODS
    reachable: list[int] | None = None  # the grades some concept profile earns (gold fits only)
    cv: dict[str, Any] | None = None  # cross_validate_points on the fitted answers, when measured
    answers_key: str | None = None  # answers_key of the fitted answers' ids (fits to a table of graded answers)


def _fit_additive(levels: NDArray[np.int64], target: NDArray[np.float64], M: int,
                  weights: NDArray[np.float64] | None = None) -> tuple[NDArray[np.float64], float]:
    """Least squares of ``target`` on each concept's level steps [level ≥ 1], …, [level ≥ M] with the steps
    ≥ 0 (a higher level never earns less) and a free intercept spread evenly over the concepts' lowest
    levels: (points (K, M+1), R²)."""
    from scipy.optimize import nnls

    N, K = levels.shape
    steps = (levels[:, :, None] >= np.arange(1, M + 1)[None, None, :]).astype(float).reshape(N, K * M)  # (N, K·M)
    X = np.hstack([steps, np.ones((N, 1)), -np.ones((N, 1))])  # free intercept as the difference of two ≥ 0
    w = np.sqrt(weights) if weights is not None else np.ones(N)
    coef, _ = nnls(X * w[:, None], target * w, maxiter=50 * X.shape[1])
    inc = coef[: K * M].reshape(K, M)  # (K, M) points gained per level step
    intercept = float(coef[-2] - coef[-1])
    pts = np.concatenate([np.zeros((K, 1)), np.cumsum(inc, axis=1)], axis=1) + intercept / K  # (K, M+1)
    fit = X[:, :-2] @ coef[:-2] + intercept
    wt = weights if weights is not None else np.ones(N)
    mean = float(np.average(target, weights=wt))
    ss_tot = float(np.average((target - mean) ** 2, weights=wt))
    r2 = 1.0 - float(np.average((target - fit) ** 2, weights=wt)) / ss_tot if ss_tot > 0 else float("nan")
    return pts, r2


FIT_METHODS = ("ordinal", "least-squares")
"""How :func:`fit_points` fits: ``ordinal`` (the default) a proportional-odds model on the level steps, read as points
and cut-points (``map: thresholds``) so the lowest profile earns the lowest grade and the highest the highest;
``least-squares`` the grade regressed on the level steps, totals read as the grade (``map: direct``), whose totals
shrink towards the mean grade and may never reach the scale's ends on a small or skewed course."""

ORDINAL_L2 = 0.01  # ridge on the step weights (per answer's mean log-likelihood): finite weights on separable data


def _fit_ordinal(levels: NDArray[np.int64], y0: NDArray[np.int64], M: int, S: int, l2: float = ORDINAL_L2
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Proportional odds P(grade ≥ j) = σ(s − θ_j), j = 1..S, with the score s a sum of each concept's level steps
    [level ≥ 1] … [level ≥ M], every step weight ≥ 0 (a higher level never lowers the grade) and θ rising. Grades
    ``y0`` are 0-based (0..S). Returns (step weights (K, M), cut-points (S,)) in logit units: the scores at which the
    expected grade crosses each half grade (:func:`_mean_cuts`)."""
    from scipy.optimize import minimize

    N, K = levels.shape
    X = (levels[:, :, None] >= np.arange(1, M + 1)[None, None, :]).astype(float).reshape(N, K * M)  # (N, K·M)
    P = K * M

    def unpack(x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return x[:P], x[P] + np.concatenate([[0.0], np.cumsum(x[P + 1:])])  # w (K·M,), θ (S,)

    rows = np.arange(N)

    def loss(x: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        w, th = unpack(x)
        s = X @ w  # (N,)
        c = 1.0 / (1.0 + np.exp(-(s[:, None] - th[None, :])))  # (N, S) P(grade ≥ j), j = 1..S
        cum = np.hstack([np.ones((N, 1)), c, np.zeros((N, 1))])  # (N, S+2): P(grade ≥ 0) = 1, P(grade ≥ S+1) = 0
        d = cum * (1.0 - cum)  # (N, S+2) dσ; 0 at the two ends
        p = np.clip(cum[rows, y0] - cum[rows, y0 + 1], 1e-12, None)  # (N,) P(grade = y)
        dp_ds = d[rows, y0] - d[rows, y0 + 1]  # (N,)
        g_th = np.zeros((N, S + 2))
        g_th[rows, y0] -= d[rows, y0]  # ∂p/∂θ_y = −dσ_y
        g_th[rows, y0 + 1] += d[rows, y0 + 1]  # ∂p/∂θ_{y+1} = +dσ_{y+1}
        dth = -(g_th[:, 1:S + 1] / p[:, None]).mean(axis=0) + 2e-6 * th  # (S,) with a weak pull keeping θ finite
        f = float(-np.log(p).mean() + l2 * w @ w + 1e-6 * th @ th)
        gw = -(X * (dp_ds / p)[:, None]).mean(axis=0) + 2 * l2 * w  # (K·M,)
        g_gaps = np.cumsum(dth[::-1])[::-1][1:]  # gap k moves θ_{k+1..S}
        return f, np.concatenate([gw, [dth.sum()], g_gaps])

    mean = float(y0.mean())
    x0 = np.concatenate([np.full(P, 0.5), [mean - S / 2 + 0.5], np.ones(S - 1)])
    bounds = [(0.0, None)] * P + [(None, None)] + [(1e-3, None)] * (S - 1)
    res = minimize(loss, x0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 1000})
    w, th = unpack(np.asarray(res.x, dtype=float))
    return w.reshape(K, M), _mean_cuts(th)


def _mean_cuts(th: NDArray[np.float64]) -> NDArray[np.float64]:
    """The scores at which the model's expected grade Σ_j σ(s − θ_j) crosses j − ½, j = 1..S: cut-points that
    round the expected grade (what QWK rewards) rather than take the most likely side of each θ_j."""
    from scipy.optimize import brentq

    def expected(s: float) -> float:
        return float((1.0 / (1.0 + np.exp(-(s - th)))).sum())

    lo, hi = float(th.min()) - 60.0, float(th.max()) + 60.0
    return np.array([brentq(lambda s, j=j: expected(s) - (j - 0.5), lo, hi) for j in range(1, len(th) + 1)])


def _ordinal_table(w: NDArray[np.float64], th: NDArray[np.float64], S: int, decimals: int
                   ) -> tuple[NDArray[np.float64], list[float]] | None:
    """Step weights and cut-points in logit units as a points table whose totals run 0..S (points (K, M+1), the
    lowest level 0) and S thresholds inside (0, S] that rise, so the lowest profile earns the lowest grade and the
    highest profile the highest. None when the levels earn no points at all."""
    hi = float(w.sum())
    if hi <= 1e-6:
        return None
    scale = S / hi
    pts = np.round(np.concatenate([np.zeros((len(w), 1)), np.cumsum(w * scale, axis=1)], axis=1), decimals)  # (K, M+1)
    top = sum(float(p) for p in pts[:, -1])  # summed as the rubric loader sums it
    step = 10.0 ** -decimals
    if top < S * step * 2:
        return None
    t = np.round(th * scale, decimals)
    out: list[float] = []
    for j in range(S):  # room below for the lower cut-points, above for the higher ones: every one inside (0, top]
        lo = step * (j + 1)
        up = math.floor((top - step * (S - 1 - j)) / step - 1e-6) * step  # on the grid, never above the top total
        v = min(max(float(t[j]), lo, (out[-1] + step) if out else lo), up)
        out.append(round(v, decimals))
    return pts, out


def fit_points(rubric: Rubric, levels_0_based: NDArray[Any], grades: NDArray[Any], decimals: int = 2,
               method: str = "ordinal") -> FittedPoints:
    """A points table fitted to graded answers, rising with the level, rounded to ``decimals``.

    ``method`` (:data:`FIT_METHODS`): ``ordinal`` fits the points and the cut-points between grades together (a
    proportional-odds model; ``map: thresholds``): the lowest concept profile earns the lowest grade and the highest
    the highest. ``least-squares`` regresses the grade on the levels and reads the total as the grade
    (``map: direct``). ``t_acc`` and ``qwk`` are in-sample (on the fitted answers); :func:`cross_validate_points`
    measures the fit on answers it did not see."""
    from reccbm.metrics import quadratic_weighted_kappa

    if method not in FIT_METHODS:
        raise DataError(f"unknown points fit {method!r}; use one of {', '.join(FIT_METHODS)}")
    lv = _check_levels(levels_0_based, rubric)
    y = np.asarray(grades, dtype=float)
    if len(y) != len(lv) or len(y) < 2 or np.isnan(y).any():
        raise DataError("fitting points needs at least two answers, each with its concept levels and a grade")
    truth = np.clip(_round_half_up(y), rubric.grade.min, rubric.grade.max)
    source = f"the gold concept levels and grades of {len(y)} answers"
    fp: FittedPoints | None = None
    if method == "ordinal" and rubric.S >= 1 and np.unique(truth).size >= 2:
        w, th = _fit_ordinal(lv, truth - rubric.grade.min, rubric.M, rubric.S)
        table = _ordinal_table(w, th, rubric.S, decimals)
        if table is not None:
            pts, cuts = table
            totals = pts[np.arange(rubric.K)[None, :], lv].sum(axis=1)
            r2 = float(np.corrcoef(totals, y)[0, 1] ** 2) if totals.std() > 0 and y.std() > 0 else float("nan")
            fp = FittedPoints(pts, source, len(y), r2, method="ordinal",
                              grading={"points": "sum", "map": "thresholds", "thresholds": cuts})
    if fp is None:  # least squares, or an ordinal fit with nothing to fit (one grade, or levels that earn nothing)
        pts, r2 = _fit_additive(lv, y, rubric.M)
        fp = FittedPoints(np.round(pts, decimals), source, len(y), r2, method="least-squares")
    _, pred = points_grades(rubric, lv, fp.points, fp.grading)
    fp.t_acc = float((pred == truth).mean())
    fp.qwk = quadratic_weighted_kappa(truth - rubric.grade.min, pred - rubric.grade.min)
    fp.reachable = sorted({int(g) for g in reachable_grades(rubric, fp.points, fp.grading)})
    return fp


def reachable_grades(rubric: Rubric, points: NDArray[np.float64], grading: dict[str, Any]) -> NDArray[np.int64]:
    """Every grade some concept profile earns with ``points`` and ``grading`` (on the rubric's grade scale)."""
    totals = np.zeros(1)
    for k in range(len(points)):  # every total a profile can reach, one concept at a time (rounded: ties merge)
        totals = np.unique(np.round(totals[:, None] + points[k][None, :], 9).reshape(-1))
    return np.unique(grade_from_totals(totals, rubric, points, grading))


def fold_of(grades: NDArray[Any], folds: int, seed: int = 0) -> NDArray[np.int64]:
    """A fold 0..folds−1 per answer, stratified by grade: each grade's answers, shuffled, dealt in turn."""
    g = np.asarray(grades)
    rng = np.random.default_rng(seed)
    out = np.zeros(len(g), dtype=np.int64)
    start = 0
    for v in np.unique(g):
        idx = rng.permutation(np.flatnonzero(g == v))
        out[idx] = (start + np.arange(len(idx))) % folds
        start += len(idx)
    return out


def cross_validate_points(rubric: Rubric, levels_0_based: NDArray[Any], grades: NDArray[Any], folds: int = 5,
                          seed: int = 0, method: str = "ordinal", n_boot: int = 1000) -> dict[str, Any]:
    """How a fitted points table grades answers it was not fitted to: ``folds``-fold cross-validation (stratified
    by grade), each fold graded by a table fitted to the others, pooled. Returns :func:`rubrictool.evaluate.
    honest_metrics` of the pooled grades (T-Acc and QWK with bootstrap 95 % CIs, the majority class of each fold's
    other answers and the paired CI of T-Acc over it) plus ``folds``, ``method`` and ``reachable`` (the grades
    the pooled predictions give)."""
    from rubrictool.evaluate import honest_metrics, majority_baseline

    lv = _check_levels(levels_0_based, rubric)
    y = np.clip(_round_half_up(np.asarray(grades, dtype=float)), rubric.grade.min, rubric.grade.max)
    k = min(folds, len(y))
    if k < 2:
        raise DataError("cross-validating points needs at least two graded answers")
    fold = fold_of(y, k, seed)
    pred = np.zeros(len(y), dtype=np.int64)
    maj = np.zeros(len(y), dtype=np.int64)
    for f in range(k):
        te, tr = fold == f, fold != f
        if not te.any():
            continue
        fp = fit_points(rubric, lv[tr], y[tr], method=method)
        pred[te] = points_grades(rubric, lv[te], fp.points, fp.grading)[1]
        maj[te] = majority_baseline(y[tr], int(te.sum()))
    g0 = rubric.grade.min
    out = honest_metrics(y - g0, pred - g0, None, n_boot=n_boot, seed=seed, grade_min=g0, y_majority=maj - g0)
    out["warnings"] = [w for w in out["warnings"] if w["code"] != "small_test"]  # every answer is tested once here
    out |= {"folds": k, "method": method, "predicted_grades": sorted({int(v) for v in pred})}
    return out


def points_from_head(model: reccbm.Model, rubric: Rubric, source: str = "a trained grade head",
                     max_profiles: int = 20000, seed: int = 0, decimals: int = 2) -> FittedPoints:
    """A trained grade head (scalar or level head: W, U, and LCEC if any) read as points: the head's expected
    grade for each concept profile (one-hot levels, every profile, or ``max_profiles`` drawn with ``seed`` when
    there are more), fitted by an additive table rising with the level. R² says how additive the head is."""
    import torch

    import reccbm

    if not isinstance(model, reccbm.RecCBM):
        raise RubricError("a PLM run has no concept bottleneck: its grade head cannot be read as points per level")
    K, L = rubric.K, rubric.M + 1
    if model.config.num_concepts != K or model.config.num_levels != L:
        raise RubricError(f"the run's head has {model.config.num_concepts} concepts × {model.config.num_levels} "
                          f"levels; rubric {rubric.name} has {K} × {L}")
    if L**K <= max_profiles:
        grids = np.meshgrid(*[np.arange(L)] * K, indexing="ij")
        profiles = np.stack([g.reshape(-1) for g in grids], axis=1)  # (L^K, K)
    else:
        profiles = np.random.default_rng(seed).integers(0, L, size=(max_profiles, K))  # (P, K)
    p_hat = torch.nn.functional.one_hot(torch.as_tensor(profiles), L).float()  # (P, K, L)
    with torch.no_grad():
        probs = model.grade_from_concepts(p_hat).grade_logits.float().softmax(-1).numpy()  # (P, S+1)
    expected = probs @ np.arange(probs.shape[1], dtype=float) + rubric.grade.min  # (P,) on the grade scale
    pts, r2 = _fit_additive(profiles.astype(np.int64), expected, rubric.M)
    return FittedPoints(np.round(pts, decimals), source, len(profiles), r2)


@dataclass
class PointsSuggestion:
    """The rubric file with the fitted points written in (validated), and its unified diff."""

    text: str
    diff: str
    rubric: Rubric
    fitted: FittedPoints


FITTED_MARK = "# points fitted by `rubrictool rubric fit-points`"
_FITTED_RE = re.compile(r"^# points fitted by `rubrictool rubric fit-points`.*\(answers ([0-9a-f]{12})\).*$",
                        re.MULTILINE)


def answers_key(ids: Any) -> str:
    """A short fingerprint of a set of answer ids (order ignored): what a fitted rubric records of the answers it was
    fitted to, so that grading those answers again is marked in-sample."""
    text = "\n".join(sorted({str(i) for i in ids}))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def fitted_answers(rubric: Rubric) -> str | None:
    """The :func:`answers_key` a rubric written by ``rubric fit-points`` records (None for any other rubric)."""
    m = _FITTED_RE.search(rubric.source_text or "")
    return m.group(1) if m else None


def points_suggestion(rubric_path: str | Path, fitted: FittedPoints) -> PointsSuggestion:
    """Write ``fitted`` into the rubric's own YAML (``points:`` on every level, a ``grading:`` block, and, for a fit
    to graded answers, a first comment line naming them by :func:`answers_key`), load it with the rubric loader (an
    invalid result raises), and diff it against the file."""
    path = resolve_rubric_path(rubric_path)
    old = path.read_text(encoding="utf-8")
    new = set_grading(set_level_points(old, [[float(p) for p in row] for row in fitted.points]), fitted.grading)
    new = _FITTED_RE.sub("", new).lstrip("\n") if _FITTED_RE.search(new) else new
    if fitted.answers_key:
        new = (f"{FITTED_MARK} ({fitted.method}) to the grades of {fitted.n} answers (answers {fitted.answers_key}):"
               " its figures on those answers are in-sample\n" + new)
    rb = parse_rubric(new, f"{path.name} (with suggested points)")
    return PointsSuggestion(new, unified_diff(old, new, path.name), rb, fitted)


def grade_table(levels: pd.DataFrame, rubric: Rubric) -> tuple[pd.DataFrame, dict[str, float] | None]:
    """Points grades of a :func:`read_levels` table: id, points_total, points_grade (and grade when known), and
    grade metrics (T-Acc, T-F1, QWK, ...) against the gold grades when every graded answer has one.
    Answers missing a concept's level get no points grade."""
    from reccbm.metrics import grade_metrics

    keys = rubric.keys
    ok = levels[keys].notna().all(axis=1)
    lv = levels.loc[ok, keys].to_numpy(float).astype(np.int64) - rubric.scale.min
    totals, grades = points_grades(rubric, lv)
    out = levels[["id"]].copy()
    out["points_total"] = np.nan
    out["points_grade"] = pd.array([None] * len(out), dtype="Int64")
    out.loc[ok, "points_total"] = np.round(totals, 6)
    out.loc[ok, "points_grade"] = grades
    for col in ("grade", "model_grade"):
        if col in levels.columns:
            out[col] = levels[col]
    metrics = None
    if "grade" in levels.columns:
        both = ok & levels["grade"].notna()
        if both.any():
            truth = np.clip(_round_half_up(levels.loc[both, "grade"].to_numpy(float)), rubric.grade.min,
                            rubric.grade.max)
            pred = out.loc[both, "points_grade"].to_numpy(np.int64)
            metrics = {k: float(v) for k, v in grade_metrics(truth - rubric.grade.min, pred - rubric.grade.min).items()
                       if isinstance(v, (int, float)) and not math.isnan(float(v))}
            metrics["n"] = float(both.sum())
            if rubric.grade.max - rubric.grade.min < 2:  # ±1 covers every pair of a two-grade scale
                metrics.pop("adjacent", None)
    return out, metrics


def grade_file(rubric: Rubric | str | Path, labels: str | Path, out: str | Path | None = None
               ) -> tuple[pd.DataFrame, dict[str, float] | None, str]:
    """``rubrictool rubric points``: read concept levels (:func:`read_levels`), grade them with the rubric's
    points (:func:`grade_table`), write ``out`` (CSV/JSONL/Parquet, atomically) when given.
    Returns (graded table, metrics against gold grades or None, what the labels file was). With a rubric written by
    ``rubric fit-points``, ``metrics["in_sample"]`` is 1.0 when the graded answers are the ones it was fitted to."""
    from rubrictool.io import write_table
    from rubrictool.rubric import load_rubric

    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    points_table(rb)  # no points: say so before reading anything
    levels, kind = read_levels(labels, rb)
    table, metrics = grade_table(levels, rb)
    key = fitted_answers(rb)
    if metrics is not None and key is not None:  # the points were fitted to these very answers' grades
        scored = levels.loc[levels[rb.keys].notna().all(axis=1) & levels["grade"].notna(), "id"]
        metrics["in_sample"] = float(answers_key(scored) == key)
    if out is not None:
        write_table(table, out, for_people=True)
    return table, metrics, kind


def suggest_points(rubric: str | Path, data: str | Path | None = None, run: str | Path | None = None,
                   method: str = "ordinal", folds: int = 5) -> PointsSuggestion:
    """``rubrictool rubric fit-points``: a points table fitted to the gold levels and grades of ``data`` (an
    adjudicated table; by ``method``, :data:`FIT_METHODS`), with its ``folds``-fold cross-validated figures
    (:func:`cross_validate_points`; 0 skips them), or read from the grade head of ``run``; written into the rubric's
    YAML and validated."""
    from rubrictool.io import read_table
    from rubrictool.rubric import load_rubric

    if (data is None) == (run is None):
        raise DataError("give exactly one of --table (graded answers with concept levels) or --run (a trained run)")
    rb = load_rubric(rubric)
    if data is not None:
        df = read_table(data)
        missing = [k for k in [*rb.keys, "grade"] if k not in df.columns]
        if missing:
            raise DataError(f"{data}: no column(s) {', '.join(missing)}; pass an adjudicated table (one column per "
                            "concept and the grade)")
        X = df[rb.keys].apply(pd.to_numeric, errors="coerce")
        y = pd.to_numeric(df["grade"], errors="coerce")
        ok = X.notna().all(axis=1) & y.notna()
        lv, yy = X[ok].to_numpy(float).astype(np.int64) - rb.scale.min, y[ok].to_numpy(float)
        fitted = fit_points(rb, lv, yy, method=method)
        if folds and folds >= 2 and len(yy) >= 2 * folds:
            fitted.cv = cross_validate_points(rb, lv, yy, folds, method=method)
        if "id" in df.columns:
            fitted.answers_key = answers_key(df.loc[ok, "id"])
    else:
        import reccbm

        assert run is not None
        model, _, _ = reccbm.load_checkpoint(run)
        fitted = points_from_head(model, rb, source=f"the grade head of {run}")
    return points_suggestion(rubric, fitted)


def write_suggestion(sugg: PointsSuggestion, out: str | Path) -> tuple[Path, Path]:
    """The rubric with the suggested points (``out``) and its diff (``out`` with ``.diff``), atomically."""
    from rubrictool.io import write_text

    p = Path(out)
    return write_text(p, sugg.text), write_text(p.with_suffix(p.suffix + ".diff"), sugg.diff)


def points_column(pooled: pd.DataFrame, rubric: Rubric) -> pd.Series | None:
    """The points grader's grade of every pooled answer (rubric grades), graded from its adjudicated levels
    (``<key>_true``): the rubric's own points, or a table fitted (:func:`fit_points`) on the other
    folds' answers, which are its fold's training part (train + dev). None without every concept's levels."""
    cols = [f"{k}_true" for k in rubric.keys]
    if not all(c in pooled for c in cols) or pooled[cols].isna().any().any():
        return None
    levels = pooled[cols].to_numpy(np.int64) - rubric.scale.min  # (N, K) 0-based
    out = np.zeros(len(pooled), dtype=np.int64)
    for fold in pooled["fold"].unique():
        test = (pooled["fold"] == fold).to_numpy()
        kw: dict[str, Any] = {}
        if not rubric.has_points:
            fp = fit_points(rubric, levels[~test], pooled.loc[~test, "grade_true"].to_numpy())
            kw = {"points": fp.points, "grading": fp.grading}
        out[test] = points_baseline(rubric, levels[test], **kw)
    return pd.Series(np.clip(out, rubric.grade.min, rubric.grade.max), index=pooled.index, name="points")
