"""What the rubric cannot see (:func:`grade_ceiling`, :func:`contrast_pairs`): a head on the adjudicated
(oracle) concept levels, cross-validated, gives the ceiling per grade (F1, and how often each grade is
taken for its neighbours); each boundary between adjacent grades is tested on its own (a cross-validated
binary head on the answers of those two grades: balanced accuracy, 0.5 is chance), and a boundary below
:data:`SEPARABLE` is *named*: the concepts cannot tell those grades apart. Contrasting pairs show why —
answers with the same concept profile and different grades, side by side, from the same question when
there is one — so an author sees the criterion the rubric is missing. :mod:`rubrictool.report.suggest`
asks an LLM to propose it. ``rubric diagnose`` (:mod:`rubrictool.report.diagnose`) reports both.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from rubrictool.errors import DataError
from rubrictool.rubric import Rubric

__all__ = ["PAIRS_PER_BOUNDARY", "SEPARABLE", "ContrastPair", "GradeCeiling", "ceiling_markdown", "contrast_pairs",
           "grade_ceiling", "pairs_frame"]

SEPARABLE = 0.75  # a grade boundary the concept levels tell apart with less balanced accuracy than this is named
PAIRS_PER_BOUNDARY = 3  # contrasting pairs shown per named boundary


@dataclass
class GradeCeiling:
    """What a head on the adjudicated concept levels can do, cross-validated: the rubric's own ceiling."""

    per_grade: pd.DataFrame  # grade, n, precision, recall, f1 (out-of-fold predictions of the multi-class head)
    confusion: NDArray[Any]  # (G, G) counts, rows the true grade, columns the head's
    grades: list[int]  # the grades present, in order (rows/columns of confusion)
    boundaries: pd.DataFrame  # lower, upper, n_lower, n_upper, lower_as_upper, upper_as_lower, balanced_acc,
    # shared_profiles (share of the two grades' answers whose profile also occurs at the other grade), named
    t_acc: float
    t_f1: float
    qwk: float
    folds: int
    honest: dict[str, Any] | None = None  # evaluate.honest_metrics of the out-of-fold grades: CIs, the majority class

    @property
    def named(self) -> list[tuple[int, int]]:
        """The boundaries the concept levels cannot separate (balanced accuracy below SEPARABLE)."""
        return [(int(r["lower"]), int(r["upper"])) for r in _records(self.boundaries) if r["named"]]


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in r.items()} for r in df.to_dict("records")]


@dataclass
class ContrastPair:
    """Two answers with the same concept profile and different grades (``a`` has the lower grade)."""

    lower: int
    upper: int
    profile: dict[str, int]  # concept -> adjudicated level (the rubric's scale)
    same_question: bool
    n_lower: int  # answers with this profile at the lower grade (all questions)
    n_upper: int
    a: dict[str, Any]  # id, question, response, reference, grade
    b: dict[str, Any]


def _graded_levels(table: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, NDArray[np.int64], NDArray[np.int64]]:
    """(the rows with a grade and every level, their levels (n, K), their grades (n,) rounded half up)."""
    g = pd.to_numeric(table["grade"], errors="coerce")
    X = table[keys].apply(pd.to_numeric, errors="coerce")
    ok = g.notna() & X.notna().all(axis=1)
    return table[ok], X[ok].to_numpy(float).astype(np.int64), np.floor(g[ok].to_numpy(float) + 0.5).astype(np.int64)


def _oof(X: NDArray[Any], y: NDArray[np.int64], folds: int, seed: int) -> NDArray[np.int64]:
    """Out-of-fold predictions of a logistic regression (stratified folds when every class allows)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, StratifiedKFold

    smallest = int(np.bincount(np.unique(y, return_inverse=True)[1]).min())
    splitter = (StratifiedKFold(folds, shuffle=True, random_state=seed) if smallest >= folds
                else KFold(folds, shuffle=True, random_state=seed))
    pred = np.empty_like(y)
    for train, test in splitter.split(X, y):
        if len(np.unique(y[train])) < 2:
            pred[test] = y[train][0]
            continue
        clf = LogisticRegression(C=1.0, max_iter=2000).fit(X[train], y[train])
        pred[test] = clf.predict(X[test])
    return pred


def grade_ceiling(rubric: Rubric, table: pd.DataFrame, folds: int = 5, seed: int = 0) -> GradeCeiling:
    """The oracle-concept head per grade, cross-validated over ``folds``: a multinomial logistic regression from
    the one-hot adjudicated levels to the grade (per-grade precision, recall, F1 and the confusion matrix), and
    for each pair of adjacent grades a binary head on their answers alone (balanced accuracy; 0.5 is chance)."""
    import warnings

    from threadpoolctl import threadpool_limits

    from reccbm.metrics import macro_f1, quadratic_weighted_kappa

    keys = rubric.keys
    _, L, y = _graded_levels(table, keys)
    if len(y) < 2 * folds or len(np.unique(y)) < 2:
        raise DataError(f"the grade ceiling needs graded answers of at least two grades ({len(y)} graded)")
    dom = np.asarray(rubric.scale.values)
    X = (L[:, :, None] == dom[None, None, :]).astype(float).reshape(len(L), -1)  # (n, K·V) one-hot levels
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        pred = _oof(X, y, folds, seed)
        grades = sorted(int(v) for v in np.unique(y))
        idx = {g: i for i, g in enumerate(grades)}
        conf = np.zeros((len(grades), len(grades)), dtype=np.int64)
        for t, p in zip(y, pred):
            if int(p) in idx:
                conf[idx[int(t)], idx[int(p)]] += 1
        rows = []
        for g in grades:
            tp = int(((y == g) & (pred == g)).sum())
            prec = tp / max(int((pred == g).sum()), 1)
            rec = tp / max(int((y == g).sum()), 1)
            rows.append({"grade": g, "n": int((y == g).sum()), "precision": prec, "recall": rec,
                         "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0})
        profiles = pd.Series([" ".join(map(str, r)) for r in L])  # one string per concept profile
        bounds = []
        for lo, hi in itertools.pairwise(grades):
            m = (y == lo) | (y == hi)
            n_lo, n_hi = int((y == lo).sum()), int((y == hi).sum())
            yb = (y[m] == hi).astype(np.int64)
            k = min(folds, n_lo, n_hi)
            if k >= 2:
                pb = _oof(X[m], yb, k, seed)
                bal = 0.5 * (float((pb[yb == 0] == 0).mean()) + float((pb[yb == 1] == 1).mean()))
            else:
                bal = float("nan")
            at_lo, at_hi = set(profiles[y == lo]), set(profiles[y == hi])
            shared = float(profiles[m].isin(at_lo & at_hi).mean())
            bounds.append({"lower": lo, "upper": hi, "n_lower": n_lo, "n_upper": n_hi,
                           "lower_as_upper": int(conf[idx[lo], idx[hi]]), "upper_as_lower": int(conf[idx[hi], idx[lo]]),
                           "balanced_acc": bal, "shared_profiles": shared,
                           "named": bool(not np.isnan(bal) and bal < SEPARABLE)})
    from rubrictool.evaluate import honest_metrics

    g0 = int(min(grades))
    honest = honest_metrics(y - g0, np.asarray(pred, dtype=np.int64) - g0, y - g0, n_boot=1000, seed=seed, grade_min=g0)
    return GradeCeiling(pd.DataFrame(rows), conf, grades, pd.DataFrame(bounds), float((pred == y).mean()),
                        macro_f1(y, pred), quadratic_weighted_kappa(y, pred), folds, honest)


def contrast_pairs(rubric: Rubric, table: pd.DataFrame, boundaries: list[tuple[int, int]],
                   per_boundary: int = PAIRS_PER_BOUNDARY) -> list[ContrastPair]:
    """For each boundary (lower, upper): up to ``per_boundary`` pairs of answers with the same adjudicated concept
    profile, one graded ``lower`` and one ``upper`` — the most common shared profiles first, one pair per profile,
    two answers to the same question when the profile has such a pair (then the question cannot be the reason)."""
    keys = rubric.keys
    rows, L, y = _graded_levels(table, keys)
    df = rows.assign(_g=y, _p=[" ".join(str(int(v)) for v in r) for r in L]).reset_index(drop=True)  # profile key
    has_q = "question" in df.columns
    out: list[ContrastPair] = []

    def item(r: pd.Series) -> dict[str, Any]:
        return {"id": str(r["id"]), "question": str(r["question"]) if has_q else "", "response": str(r["response"])
                if "response" in r else "", "reference": str(r["reference"]) if "reference" in r and
                pd.notna(r["reference"]) else "", "grade": int(r["_g"])}

    for lo, hi in boundaries:
        part = df[df["_g"].isin([lo, hi])]
        counts = part.groupby(["_p", "_g"]).size().unstack(fill_value=0)
        if lo not in counts.columns or hi not in counts.columns:
            continue
        counts = counts[(counts[lo] > 0) & (counts[hi] > 0)]
        n_both = np.minimum(counts[lo].to_numpy(), counts[hi].to_numpy())
        order = [str(p) for _, p in sorted(zip(-n_both, counts.index.astype(str)))]  # most common shared profile first
        for prof in order[:per_boundary]:
            same = part[part["_p"] == prof]
            a_rows, b_rows = same[same["_g"] == lo].sort_values("id"), same[same["_g"] == hi].sort_values("id")
            pick: tuple[pd.Series, pd.Series] | None = None
            if has_q:
                common = sorted(set(a_rows["question"]) & set(b_rows["question"]), key=str)
                if common:
                    q = common[0]
                    pick = (a_rows[a_rows["question"] == q].iloc[0], b_rows[b_rows["question"] == q].iloc[0])
            same_q = pick is not None
            if pick is None:
                pick = (a_rows.iloc[0], b_rows.iloc[0])
            out.append(ContrastPair(lo, hi, {k: int(v) for k, v in zip(keys, prof.split())}, same_q, len(a_rows),
                                    len(b_rows),
                                    item(pick[0]), item(pick[1])))
    return out


def pairs_frame(pairs: list[ContrastPair]) -> pd.DataFrame:
    """One row per contrasting pair: the boundary, the shared profile, both answers."""
    rows = [{"lower": p.lower, "upper": p.upper, "profile": " ".join(f"{k}={v}" for k, v in p.profile.items()),
             "same_question": p.same_question, "n_lower": p.n_lower, "n_upper": p.n_upper,
             **{f"{side}_{f}": getattr(p, side)[f] for side in ("a", "b")
                for f in ("id", "question", "response", "grade")}}
            for p in pairs]
    return pd.DataFrame(rows)


def ceiling_markdown(ceiling: GradeCeiling, pairs: list[ContrastPair]) -> list[str]:
    """The ceiling per grade, the boundaries and the contrasting pairs as Markdown lines."""
    from rubrictool.textsafe import md_inline

    def cell(text: object) -> str:  # answers are untrusted: controls stripped, HTML and Markdown escaped, one line
        return md_inline(text)

    out = [(f"## What the concept levels can tell apart ({ceiling.folds}-fold cross-validated head on the adjudicated "
           f"levels: T-Acc {ceiling.t_acc:.3f}, T-F1 {ceiling.t_f1:.3f}, QWK {ceiling.qwk:.3f})"), "",
           "| grade | answers | precision | recall | F1 |", "|---|---|---|---|---|"]
    out += [f"| {r['grade']} | {r['n']} | {r['precision']:.2f} | {r['recall']:.2f} | {r['f1']:.2f} |"
            for r in _records(ceiling.per_grade)]
    out += ["", ("| boundary | answers | lower taken for upper | upper taken for lower | balanced acc. (binary) | "
            "share in a shared profile | named |"), "|---|---|---|---|---|---|---|"]
    out += [f"| {b['lower']}/{b['upper']} | {b['n_lower']} + {b['n_upper']} | {b['lower_as_upper']} | "
            f"{b['upper_as_lower']} | {b['balanced_acc']:.2f} | {100 * b['shared_profiles']:.0f} % | "
            f"{'**cannot separate**' if b['named'] else 'separated'} |" for b in _records(ceiling.boundaries)]
    if pairs:
        out += ["", "## Contrasting pairs: the same concept profile, different grades", ""]
        for p in pairs:
            prof = " ".join(f"{k}={v}" for k, v in p.profile.items())
            q = "same question" if p.same_question else "different questions"
            out += [(f"### grade {p.lower} vs {p.upper} — {cell(prof)} ({q}; this profile: {p.n_lower} × grade "
                    f"{p.lower}, {p.n_upper} × grade {p.upper})"), "",
                    f"| | grade {p.lower}: {cell(p.a['id'])} | grade {p.upper}: {cell(p.b['id'])} |",
                    "|---|---|---|", f"| question | {cell(p.a['question'])} | {cell(p.b['question'])} |",
                    f"| response | {cell(p.a['response'])} | {cell(p.b['response'])} |", ""]
    return out + [""]
