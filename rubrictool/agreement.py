"""Inter-rater agreement: Krippendorff's α with bootstrap CIs, pairwise and leave-one-out reviewer
agreement, LLM predictions against the consensus, grade agreement and rubric coverage.

Everything starts from a :class:`LabelCube`: the tidy ReviewTable ``item, reviewer, concept, level``
pivoted to an array ``levels[item, concept, reviewer]`` with NaN where a review is missing. Missing
reviews stay missing values, as Krippendorff's α intends (an item with one review contributes no
pairable values; no item is dropped because one reviewer skipped it).

α itself comes from the ``krippendorff`` package (Castro 2017) on per-item value counts. The
bootstrap resamples items; because an item enters α only through its coincidence matrix, and items
with the same value counts have the same matrix, each replicate is a multinomial draw of *how many*
items of each distinct count pattern it holds, and its α is a weighted sum over those patterns —
exactly the same statistic as resampling the rows, at the cost of a matrix product
(:func:`alpha_from_patterns`, checked against the package in the tests).

Reference: K. Krippendorff, "Computing Krippendorff's Alpha-Reliability", 2011,
https://repository.upenn.edu/asc_papers/43/ .
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import krippendorff
import numpy as np
import numpy.typing as npt
import pandas as pd
from threadpoolctl import threadpool_limits

from rubrictool.errors import AdjudicateError

__all__ = [
    "LEVELS_OF_MEASUREMENT",
    "LabelCube",
    "LevelOfMeasurement",
    "alpha_counts",
    "alpha_from_patterns",
    "bootstrap_alpha",
    "concept_agreement",
    "cv_scores",
    "exact_agreement",
    "grade_agreement",
    "krippendorff_alpha",
    "ordinal_vote",
    "pairwise_agreement",
    "predictions_vs_consensus",
    "reviewer_vs_others",
    "rubric_coverage",
    "value_counts",
]

LevelOfMeasurement = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS_OF_MEASUREMENT: tuple[str, ...] = ("nominal", "ordinal", "interval", "ratio")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# -- the label cube ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelCube:
    """Reviews as an array ``levels[item, concept, reviewer]`` (float, NaN = no review)."""

    items: pd.Index
    concepts: list[str]
    reviewers: list[str]
    domain: IntArray  # the ordered level values, e.g. [1, 2, 3]
    levels: FloatArray  # (N, K, R)

    @classmethod
    def from_reviews(
        cls,
        reviews: pd.DataFrame,
        concepts: Sequence[str],
        domain: Sequence[int],
        items: Sequence[str] | npt.NDArray[np.object_] | None = None,
    ) -> LabelCube:
        """Pivot a validated tidy ReviewTable (``item, reviewer, concept, level``) into a cube."""
        data = reviews[["item", "reviewer", "concept", "level"]]
        # one hash pass over each long column (none if it is categorical), then map the few distinct values
        i_codes, i_uniq = _codes(data["item"])
        r_codes, r_uniq = _codes(data["reviewer"])
        k_codes, k_uniq = _codes(data["concept"])
        item_index = pd.Index(np.asarray(items, dtype=object) if items is not None else i_uniq, dtype=object)
        reviewer_index = pd.Index(sorted(r_uniq[np.unique(r_codes)]), dtype=object)
        concept_index = pd.Index(list(concepts), dtype=object)
        i = item_index.get_indexer(i_uniq)[i_codes]
        r = reviewer_index.get_indexer(r_uniq)[r_codes]
        k = concept_index.get_indexer(k_uniq)[k_codes]
        if (i < 0).any() or (k < 0).any():
            raise AdjudicateError(
                "reviews mention items or concepts outside the given lists; validate them first"
            )
        levels = np.full((len(item_index), len(concept_index), len(reviewer_index)), np.nan)
        levels[i, k, r] = data["level"].to_numpy(dtype=float)
        return cls(
            item_index,
            list(concepts),
            [str(x) for x in reviewer_index],
            np.asarray(domain, dtype=np.int64),
            levels,
        )

    def counts(self) -> IntArray:
        """Value counts per item and concept, ``(N, K, V)``: how many reviewers gave each level (cached)."""
        cached = self.__dict__.get("_counts")
        if cached is None:
            cached = value_counts(self.levels, self.domain)
            object.__setattr__(self, "_counts", cached)
        return np.asarray(cached)

    def n_reviews(self) -> IntArray:
        """Reviews per item and concept, ``(N, K)``."""
        return np.asarray((~np.isnan(self.levels)).sum(axis=2), dtype=np.int64)


def _codes(column: pd.Series) -> tuple[IntArray, pd.Index]:
    """Integer codes and the distinct values (as strings) of a column; free for a categorical one."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        cats = pd.Index(column.cat.categories.astype(str), dtype=object)
        return np.asarray(column.cat.codes.to_numpy(), dtype=np.int64), cats
    codes, uniques = pd.factorize(column)
    return codes.astype(np.int64), pd.Index(pd.Index(uniques).astype(str), dtype=object)


def value_counts(levels: FloatArray, domain: IntArray) -> IntArray:
    """``levels[..., R]`` with NaN → counts ``[..., V]`` of each domain value over the last axis."""
    onehot = levels[..., None] == np.asarray(domain, dtype=float)  # (..., R, V)
    return np.asarray(onehot.sum(axis=-2), dtype=np.int64)


# -- Krippendorff's alpha ------------------------------------------------------------------------------------


def krippendorff_alpha(counts: IntArray, domain: Sequence[float], measurement: str = "ordinal") -> float:
    """α from per-item value counts ``(N, V)`` with the ``krippendorff`` package; NaN when undefined.

    Undefined means fewer than one item with two values, or every value identical (no expected
    disagreement: α = 0/0).
    """
    counts = np.asarray(counts)
    if counts.ndim != 2 or len(domain) < 2 or (counts.sum(axis=1) >= 2).sum() == 0:
        return float("nan")
    pairable = counts[counts.sum(axis=1) >= 2]
    if (pairable.sum(axis=0) > 0).sum() < 2:
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(
            krippendorff.alpha(
                value_counts=pairable,
                value_domain=np.asarray(domain, dtype=float),
                level_of_measurement=measurement,  # type: ignore[arg-type]  # checked against LEVELS_OF_MEASUREMENT
            )
        )


def _pattern_coincidences(patterns: IntArray) -> FloatArray:
    """Per-pattern coincidence matrices ``(P, V, V)``: (c cᵀ − diag c) / (m − 1), zero when m < 2."""
    c = patterns.astype(float)
    m = c.sum(axis=1)
    outer = c[:, :, None] * c[:, None, :]  # (P, V, V)
    idx = np.arange(c.shape[1])
    outer[:, idx, idx] -= c
    scale = np.where(m >= 2, 1.0 / np.maximum(m - 1.0, 1.0), 0.0)
    return np.asarray(outer * scale[:, None, None], dtype=np.float64)


def _distance(measurement: str, domain: FloatArray, n_v: FloatArray) -> FloatArray:
    """Squared distances δ²(c, k) per replicate ``(B, V, V)`` given marginal value totals ``n_v`` (B, V)."""
    v1, v2 = domain[:, None], domain[None, :]
    B, V = n_v.shape
    if measurement == "nominal":
        d = (v1 != v2).astype(float)
        return np.broadcast_to(d, (B, V, V))
    if measurement == "interval":
        return np.broadcast_to((v1 - v2) ** 2, (B, V, V))
    if measurement == "ratio":
        s = v1 + v2
        d = np.divide(v1 - v2, s, out=np.zeros((V, V)), where=s != 0) ** 2
        return np.broadcast_to(d, (B, V, V))
    if measurement == "ordinal":
        cum = np.cumsum(n_v, axis=1)  # (B, V)
        lo = np.minimum(np.arange(V)[:, None], np.arange(V)[None, :])  # (V, V)
        hi = np.maximum(np.arange(V)[:, None], np.arange(V)[None, :])
        between = cum[:, hi] - cum[:, lo] + n_v[:, lo]  # Σ_{g=lo..hi} n_g, (B, V, V)
        return np.asarray((between - (n_v[:, :, None] + n_v[:, None, :]) / 2.0) ** 2, dtype=np.float64)
    raise AdjudicateError(
        f"unknown level of measurement {measurement!r}; use one of {', '.join(LEVELS_OF_MEASUREMENT)}"
    )


def alpha_from_patterns(
    patterns: IntArray, weights: FloatArray, domain: Sequence[float], measurement: str
) -> FloatArray:
    """α for each row of ``weights`` (B, P): the data set holding ``weights[b, p]`` items of count pattern p.

    ``1 − Σ o·δ² / Σ e·δ²`` with o = Σ_p w_p o_p (the coincidence matrix), n_v its margins and
    e = (n_v n_vᵀ − diag n_v) / (n − 1), as in Krippendorff (2011); NaN where undefined.
    """
    dom = np.asarray(domain, dtype=float)
    P, V = patterns.shape
    w = np.atleast_2d(np.asarray(weights, dtype=float))  # (B, P)
    o = (w @ _pattern_coincidences(patterns).reshape(P, V * V)).reshape(-1, V, V)  # (B, V, V)
    n_v = o.sum(axis=1)  # (B, V)
    n = n_v.sum(axis=1)  # (B,)
    e = n_v[:, :, None] * n_v[:, None, :]
    idx = np.arange(V)
    e[:, idx, idx] -= n_v
    with np.errstate(divide="ignore", invalid="ignore"):
        e = e / (n - 1.0)[:, None, None]
        d = _distance(measurement, dom, n_v)
        d_o = (o * d).sum(axis=(1, 2))
        d_e = (e * d).sum(axis=(1, 2))
        out = np.where(d_e > 0, 1.0 - d_o / d_e, np.nan)
    return np.asarray(out, dtype=np.float64)


def _patterns(counts: IntArray) -> tuple[IntArray, IntArray]:
    """Distinct rows of pairable value counts and how often each occurs (rows with < 2 values dropped)."""
    counts = np.asarray(counts)
    pairable = counts[counts.sum(axis=1) >= 2]
    if len(pairable) == 0:
        return np.zeros((0, counts.shape[1]), dtype=np.int64), np.zeros(0, dtype=np.int64)
    base = int(pairable.max()) + 1
    codes = pairable @ (base ** np.arange(pairable.shape[1], dtype=np.int64))  # one integer per pattern
    _, first, freq = np.unique(codes, return_index=True, return_counts=True)
    return np.asarray(pairable[first], dtype=np.int64), np.asarray(freq, dtype=np.int64)


def alpha_counts(counts: IntArray, domain: Sequence[float], measurement: str = "ordinal") -> float:
    """α from value counts ``(N, V)`` via :func:`alpha_from_patterns` — the same number as
    :func:`krippendorff_alpha` (tested), computed on distinct count patterns: used where many α's
    are needed (pairs, leave-one-out, models)."""
    patterns, freq = _patterns(counts)
    if len(freq) == 0:
        return float("nan")
    return float(alpha_from_patterns(patterns, freq[None, :].astype(float), domain, measurement)[0])


def bootstrap_alpha(
    counts: IntArray, domain: Sequence[float], measurement: str = "ordinal", n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile 95 % CI of α over ``n_boot`` item resamples (pairable items, with replacement; seeded).

    Items are drawn uniformly with replacement, so the number of draws that land on each distinct
    count pattern is multinomial with the patterns' shares — one draw per replicate is enough.
    """
    patterns, freq = _patterns(counts)
    if n_boot <= 0 or freq.sum() < 2:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(freq.sum(), freq / freq.sum(), size=n_boot)  # (B, P)
    reps = alpha_from_patterns(patterns, weights.astype(np.float64), domain, measurement)
    reps = reps[~np.isnan(reps)]
    if len(reps) == 0:
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return (float(lo), float(hi))


def exact_agreement(counts: IntArray) -> float:
    """Share of agreeing reviewer pairs among all pairs of reviews of the same item (pooled over items)."""
    c = np.asarray(counts, dtype=float)
    m = c.sum(axis=-1)
    pairs = (m * (m - 1) / 2).sum()
    agree = (c * (c - 1) / 2).sum()
    return float(agree / pairs) if pairs > 0 else float("nan")


# -- the ordinal vote ----------------------------------------------------------------------------------------


def ordinal_vote(counts: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Consensus level index per row of value counts ``(..., V)`` and whether the vote was tied.

    The rule: the most frequent level; when several levels tie for most frequent, the median of
    the tied levels, taking the lower of the two middle ones when their number is even. So three
    reviewers who all differ get the median, two who disagree get the lower level (the rubric's
    "choose the lower-supported level"), and a 2–2 split gets the lower of the two. Rows without
    any review get index -1.
    """
    c = np.asarray(counts)
    top = c.max(axis=-1, keepdims=True)
    modes = (c == top) & (top > 0)  # (..., V)
    n_modes = modes.sum(axis=-1)
    rank = (n_modes - 1) // 2 + 1  # 1-based rank among the tied modes (lower median)
    hit = modes & (np.cumsum(modes, axis=-1) == rank[..., None])
    choice = np.where(n_modes > 0, hit.argmax(axis=-1), -1)
    return np.asarray(choice, dtype=np.int64), np.asarray(n_modes > 1)


# -- per concept, per reviewer -------------------------------------------------------------------------------


def _two_column_counts(a: FloatArray, b: FloatArray, domain: IntArray) -> IntArray:
    return value_counts(np.stack([a, b], axis=-1), domain)


def concept_agreement(
    cube: LabelCube, measurement: str = "ordinal", n_boot: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Per concept: α, its bootstrap CI, exact agreement, items, reviewers and the unanimous share.

    ``n_items`` counts items with at least one review of the concept, ``n_pairable`` those with two
    or more (the only ones α can use); ``unanimous`` is the share of pairable items where every
    reviewer gave the same level.
    """
    counts = cube.counts()  # (N, K, V)
    n = counts.sum(axis=-1)  # (N, K)
    rows = []
    for k, key in enumerate(cube.concepts):
        ck = counts[:, k, :]
        pairable = n[:, k] >= 2
        lo, hi = bootstrap_alpha(ck, cube.domain.tolist(), measurement, n_boot, seed + k)
        rows.append(
            {
                "concept": key,
                "alpha": krippendorff_alpha(ck, cube.domain.tolist(), measurement),
                "alpha_lo": lo,
                "alpha_hi": hi,
                "exact": exact_agreement(ck),
                "n_items": int((n[:, k] >= 1).sum()),
                "n_pairable": int(pairable.sum()),
                "n_reviewers": int((~np.isnan(cube.levels[:, k, :])).any(axis=0).sum()),
                "n_labels": int(n[:, k].sum()),
                "unanimous": float((ck.max(axis=-1)[pairable] == n[pairable, k]).mean())
                if pairable.any()
                else float("nan"),
            }
        )
    return pd.DataFrame(rows).set_index("concept")


def pairwise_agreement(cube: LabelCube, measurement: str = "ordinal") -> pd.DataFrame:
    """α and exact agreement for every pair of reviewers and every concept (items both reviewed)."""
    rows = []
    dom = cube.domain.tolist()
    for (ia, a), (ib, b) in combinations(enumerate(cube.reviewers), 2):
        for k, key in enumerate(cube.concepts):
            x, y = cube.levels[:, k, ia], cube.levels[:, k, ib]
            both = ~np.isnan(x) & ~np.isnan(y)
            rows.append(
                {
                    "concept": key,
                    "a": a,
                    "b": b,
                    "alpha": alpha_counts(_two_column_counts(x, y, cube.domain), dom, measurement),
                    "exact": float((x[both] == y[both]).mean()) if both.any() else float("nan"),
                    "n_items": int(both.sum()),
                }
            )
    return pd.DataFrame(rows, columns=["concept", "a", "b", "alpha", "exact", "n_items"])


def reviewer_vs_others(cube: LabelCube, measurement: str = "ordinal") -> pd.DataFrame:
    """Each reviewer against the consensus (:func:`ordinal_vote`) of the OTHER reviewers, per concept.

    A reviewer whose α here is far below the others' is drifting from the group.
    """
    counts = cube.counts()  # (N, K, V)
    dom = cube.domain.tolist()
    rows = []
    for r, name in enumerate(cube.reviewers):
        own = value_counts(cube.levels[:, :, r : r + 1], cube.domain)  # (N, K, V)
        choice, _ = ordinal_vote(counts - own)  # (N, K)
        others = np.where(choice >= 0, cube.domain[np.maximum(choice, 0)], np.nan)
        for k, key in enumerate(cube.concepts):
            x, y = cube.levels[:, k, r], others[:, k]
            both = ~np.isnan(x) & ~np.isnan(y)
            rows.append(
                {
                    "concept": key,
                    "reviewer": name,
                    "alpha": alpha_counts(_two_column_counts(x, y, cube.domain), dom, measurement),
                    "exact": float((x[both] == y[both]).mean()) if both.any() else float("nan"),
                    "n_items": int(both.sum()),
                }
            )
    return pd.DataFrame(rows, columns=["concept", "reviewer", "alpha", "exact", "n_items"])


def predictions_vs_consensus(
    predictions: pd.DataFrame, consensus: pd.DataFrame, domain: Sequence[int], measurement: str = "ordinal"
) -> pd.DataFrame:
    """LLM predictions (``item, model, concept, level``) against consensus (``item, concept, level``).

    One row per model and concept: α (the model and the consensus as two coders), exact agreement,
    items compared, and the confusion matrix (rows: consensus level, columns: predicted level, in
    ``domain`` order) as a nested list.
    """
    dom = np.asarray(domain, dtype=np.int64)
    merged = predictions[["item", "model", "concept", "level"]].merge(
        consensus[["item", "concept", "level"]], on=["item", "concept"], suffixes=("_pred", "_true")
    )
    merged = merged.dropna(subset=["level_pred", "level_true"])
    rows = []
    V = len(dom)
    for (model, key), g in merged.groupby(["model", "concept"], sort=True):
        p = g["level_pred"].to_numpy(dtype=float)
        t = g["level_true"].to_numpy(dtype=float)
        pi = np.searchsorted(dom, p)
        ti = np.searchsorted(dom, t)
        conf = np.bincount(ti * V + pi, minlength=V * V).reshape(V, V)
        rows.append(
            {
                "model": str(model),
                "concept": str(key),
                "alpha": alpha_counts(_two_column_counts(p, t, dom), dom.tolist(), measurement),
                "exact": float((p == t).mean()),
                "n_items": len(g),
                "confusion": conf.tolist(),
            }
        )
    return pd.DataFrame(rows, columns=["model", "concept", "alpha", "exact", "n_items", "confusion"])


# -- grades --------------------------------------------------------------------------------------------------


def grade_agreement(
    items: pd.DataFrame, columns: Sequence[str], measurement: str = "interval", n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Agreement between two or more graders' grade columns of an item table (e.g. grade_me, grade_other).

    α at ``measurement`` (interval by default: grades are scores) with its bootstrap CI, the ordinal α,
    exact agreement and the mean absolute difference between graders; a missing grade is a missing
    value.
    """
    if len(columns) < 2:
        raise AdjudicateError(f"grade agreement needs two or more grader columns, got {list(columns)}")
    data = items[list(columns)].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)  # (N, G)
    values = np.unique(data[~np.isnan(data)])
    counts = np.asarray((data[..., None] == values).sum(axis=-2), dtype=np.int64)  # (N, V)
    both = (~np.isnan(data)).sum(axis=1) >= 2
    diffs = [np.abs(data[:, a] - data[:, b]) for a, b in combinations(range(data.shape[1]), 2)]
    mad = float(np.nanmean(np.concatenate(diffs))) if diffs else float("nan")
    lo, hi = bootstrap_alpha(counts, values.tolist(), measurement, n_boot, seed)
    return {
        "graders": list(columns),
        "level_of_measurement": measurement,
        "alpha": krippendorff_alpha(counts, values.tolist(), measurement),
        "alpha_ci": [lo, hi],
        "alpha_ordinal": krippendorff_alpha(counts, values.tolist(), "ordinal"),
        "exact": exact_agreement(counts),
        "mean_abs_diff": mad,
        "n_items": int(both.sum()),
    }


# -- rubric coverage -----------------------------------------------------------------------------------------


def cv_scores(X: FloatArray, y: IntArray, folds: int, seed: int, model: str) -> tuple[float, float]:
    """Cross-validated accuracy and macro-F1; duplicate (x, y) rows of a training fold are fitted once
    with their count as sample weight (the same loss, far fewer rows)."""
    # scikit-learn takes over a second to import and only this figure needs it: imported here, so that
    # the CLI (which imports the adjudicate stage) starts without it
    from sklearn.dummy import DummyClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.model_selection import KFold, StratifiedKFold

    smallest = int(np.bincount(np.unique(y, return_inverse=True)[1]).min())
    splitter = (
        StratifiedKFold(folds, shuffle=True, random_state=seed)
        if smallest >= folds
        else KFold(folds, shuffle=True, random_state=seed)
    )
    pred = np.empty_like(y)
    warm: Any = None  # the folds share most of their rows: start each fit from the previous solution
    for train, test in splitter.split(X, y):
        xy = np.column_stack([X[train], y[train]])
        row_hash = pd.util.hash_pandas_object(pd.DataFrame(xy), index=False).to_numpy()  # one uint64 per row
        _, first, w = np.unique(row_hash, return_index=True, return_counts=True)
        Xu, yu = xy[first, :-1], xy[first, -1].astype(np.int64)
        clf: Any
        if model == "majority" or len(np.unique(yu)) < 2:
            clf = DummyClassifier(strategy="most_frequent")
        elif warm is not None and len(np.unique(yu)) == len(warm.classes_):
            clf = warm
        else:  # same model either way; the faster solver for each coding (Newton: few dense columns)
            clf = LogisticRegression(
                solver="newton-cholesky" if model == "numeric" else "lbfgs",
                max_iter=500,
                C=1.0,
                warm_start=True,
            )
        clf.fit(Xu, yu, sample_weight=w)
        if isinstance(clf, LogisticRegression):
            warm = clf
        pred[test] = clf.predict(X[test])
    return (
        float(accuracy_score(y, pred)),
        float(f1_score(y, pred, average="macro", zero_division=0)),
    )


def rubric_coverage(
    table: pd.DataFrame,
    concepts: Sequence[str],
    domain: Sequence[int],
    grade: str = "grade",
    folds: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Does the rubric explain the grade? Predict the grade from the adjudicated concept levels.

    A multinomial logistic regression (L2, C=1) on the levels as numbers and on their one-hot
    coding, scored by ``folds``-fold cross-validated accuracy and macro-F1 (stratified by grade when
    every grade has ``folds`` items, shuffled with ``seed``), next to the majority-class baseline
    (the training fold's most frequent grade) and each concept's Spearman ρ with the grade. Rows
    without a grade or with a missing concept are left out (and counted).
    """
    keys = list(concepts)
    if grade not in table.columns or table[grade].isna().all():
        return {"available": False, "reason": f"no {grade!r} column with values"}
    g = pd.to_numeric(table[grade], errors="coerce")
    levels = table[keys].apply(pd.to_numeric, errors="coerce")
    ok = g.notna() & levels.notna().all(axis=1)
    n = int(ok.sum())
    if n < 2 * folds:
        return {
            "available": False,
            "reason": f"only {n} items with a grade and every concept; need {2 * folds}",
        }
    y_raw = g[ok].to_numpy(dtype=float)
    y = np.unique(y_raw, return_inverse=True)[1].astype(np.int64)
    X = levels[ok].to_numpy(dtype=float)  # (n, K)
    dom = np.asarray(domain, dtype=float)
    onehot = (X[:, :, None] == dom[None, None, :]).reshape(n, -1).astype(float)  # (n, K·V)

    # one BLAS thread: these fits are small, and on a shared machine extra threads only oversubscribe
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        base = cv_scores(X, y, folds, seed, "majority")
        numeric = cv_scores(X, y, folds, seed, "numeric")
        hot = cv_scores(onehot, y, folds, seed, "onehot")
        rho = {}
        for j, key in enumerate(keys):
            r = (
                pd.Series(X[:, j]).corr(pd.Series(y_raw), method="spearman")
                if np.ptp(X[:, j]) > 0
                else float("nan")
            )
            rho[key] = float(r)
    return {
        "available": True,
        "grade_column": grade,
        "n_items": n,
        "n_left_out": int(len(table) - n),
        "grade_levels": sorted(float(v) for v in np.unique(y_raw)),
        "folds": folds,
        "seed": seed,
        "model": "multinomial logistic regression (L2, C=1); grade = class",
        "majority_class": {"accuracy": base[0], "macro_f1": base[1]},
        "levels_as_numbers": {"accuracy": numeric[0], "macro_f1": numeric[1]},
        "levels_one_hot": {"accuracy": hot[0], "macro_f1": hot[1]},
        "spearman": rho,
    }
