"""``rubrictool rubric diagnose``: which concepts of a rubric work, from adjudicated labels alone.

Per concept: Krippendorff's α with its CI (agreement.json); which levels reviewers confuse (over every
pair of reviewers who labelled the same answer differently); how much cross-validated grade accuracy the
rubric loses without it (drop-one coverage: a logistic regression from the one-hot adjudicated levels
to the grade, with and without the concept); how redundant it is (the share of answers where it has the
same level as its closest concept, the label correlation and, with a trained run, the learned partial
correlation). Then a short list of concrete suggestions.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from rubrictool.errors import DataError
from rubrictool.rubric import Rubric

__all__ = ["Diagnosis", "diagnose", "diagnose_dir", "level_confusions", "queue_reviews", "reviewer_confusion",
           "write_diagnosis"]

# thresholds of the suggestions
LOW_ALPHA = 0.667  # Krippendorff: below 0.667, conclusions from the labels are tentative
SAME_LEVEL = 0.85  # two concepts at the same level on this share of answers: redundant
CONFUSED_SHARE = 0.30  # an adjacent level pair making up this share of a concept's disagreements
DROP_LOSS = 0.0  # no accuracy lost without a concept: it adds nothing the others do not
HIGH_CORR = 0.8  # label correlation at or above which two concepts look redundant
MAX_CONFUSIONS = 2  # level-confusion (and drop-one) suggestions kept, most frequent first
MAX_SUGGESTIONS = 6


@dataclass
class Diagnosis:
    """Per-concept figures (``concepts``), the label correlation, level confusions and suggestions."""

    concepts: pd.DataFrame  # concept, name, alpha, alpha_lo, alpha_hi, confused_levels, confused_share,
    # n_disagreements, drop_one_loss, closest, same_level, label_corr, partial_corr
    label_corr: NDArray[Any]  # (K, K) Pearson correlation of the adjudicated levels
    confusions: pd.DataFrame  # concept, reviewer_a, reviewer_b, level_a, level_b, n (disagreements only)
    coverage_acc: float  # cross-validated grade accuracy from all concepts
    suggestions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def level_confusions(reviews: pd.DataFrame) -> pd.DataFrame:
    """Every pair of reviewers who gave the same (item, concept) different levels: counts per
    (concept, reviewer_a, reviewer_b, level_a, level_b), reviewers in sorted order."""
    cols = ["concept", "reviewer_a", "reviewer_b", "level_a", "level_b", "n"]
    r = reviews[["item", "reviewer", "concept", "level"]].dropna()
    r = r.assign(reviewer=r["reviewer"].astype(str), level=pd.to_numeric(r["level"]).astype(np.int64))
    pairs = r.merge(r, on=["item", "concept"], suffixes=("_a", "_b"))
    pairs = pairs[(pairs["reviewer_a"] < pairs["reviewer_b"]) & (pairs["level_a"] != pairs["level_b"])]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    out = pairs.groupby(["concept", "reviewer_a", "reviewer_b", "level_a", "level_b"]).size().rename("n")
    return out.reset_index()[cols]


def reviewer_confusion(confusions: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Concepts × reviewer pairs: how often the two reviewers disagree on the concept and on which levels,
    e.g. "41: 2–3 ×30, 1–2 ×11" (the level pairs unordered, most frequent first)."""
    if confusions.empty:
        return pd.DataFrame(index=pd.Index(keys, name="concept"))
    c = confusions.assign(pair=confusions["reviewer_a"].astype(str) + "–" + confusions["reviewer_b"].astype(str),
                          lo=np.minimum(confusions["level_a"], confusions["level_b"]),
                          hi=np.maximum(confusions["level_a"], confusions["level_b"]))
    cells: dict[tuple[str, str], str] = {}
    for (key, pair), part in c.groupby(["concept", "pair"]):
        by = part.groupby(["lo", "hi"])["n"].sum().sort_values(ascending=False)
        levels: list[tuple[int, int]] = list(by.index)
        cells[(str(key), str(pair))] = f"{int(by.sum())}: " + ", ".join(
            f"{int(lh[0])}–{int(lh[1])} ×{int(n)}" for lh, n in zip(levels, by.to_numpy()))
    pairs = sorted({p for _, p in cells})
    return pd.DataFrame([[cells.get((k, p), "0") for p in pairs] for k in keys],
                        index=pd.Index(keys, name="concept"), columns=pairs)


def queue_reviews(queue: pd.DataFrame, reviewers: list[str]) -> pd.DataFrame:
    """The reviews of a discussion queue (its flagged cases) as a tidy item, reviewer, concept, level table."""
    present = [r for r in reviewers if r in queue.columns]
    long = queue[["item", "concept", *present]].melt(id_vars=["item", "concept"], var_name="reviewer",
                                                     value_name="level")
    return long.dropna(subset=["level"])


def _drop_one(table: pd.DataFrame, keys: list[str], domain: list[int], folds: int, seed: int) -> tuple[float, list[float]]:
    from threadpoolctl import threadpool_limits

    from rubrictool.agreement import _cv_scores

    g = pd.to_numeric(table["grade"], errors="coerce")
    X = table[keys].apply(pd.to_numeric, errors="coerce")
    ok = g.notna() & X.notna().all(axis=1)
    y = np.unique(g[ok].to_numpy(float), return_inverse=True)[1].astype(np.int64)
    L = X[ok].to_numpy(float)  # (n, K)
    dom = np.asarray(domain, dtype=float)
    hot = (L[:, :, None] == dom[None, None, :]).astype(float)  # (n, K, V)
    n, K, V = hot.shape
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        full = _cv_scores(hot.reshape(n, K * V), y, folds, seed, "onehot")[0]
        losses = [full - _cv_scores(np.delete(hot, k, axis=1).reshape(n, (K - 1) * V), y, folds, seed, "onehot")[0]
                  for k in range(K)]
    return full, losses


def diagnose(
    rubric: Rubric, table: pd.DataFrame, agreement: dict[str, Any] | None = None,
    reviews: pd.DataFrame | None = None, partial_corr: NDArray[Any] | None = None, folds: int = 5, seed: int = 0,
) -> Diagnosis:
    """Diagnose a rubric from an adjudicated table (one column per concept, ``grade``), agreement.json's
    figures, the reviews (tidy; all of them, or only the disagreements) and optionally a run's Ω."""
    keys = rubric.keys
    missing = [k for k in keys if k not in table.columns]
    if missing:
        raise DataError(f"the adjudicated table has no column for concept(s) {', '.join(missing)}")
    if len(keys) < 2:
        raise DataError("a rubric diagnosis compares concepts: this rubric has only one")
    L = table[keys].apply(pd.to_numeric, errors="coerce")
    full = L.dropna()
    notes: list[str] = []
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.nan_to_num(np.corrcoef(full.to_numpy(float).T), nan=0.0) if len(full) > 1 else np.eye(len(keys))
    np.fill_diagonal(corr, 1.0)
    same = np.array([[float((full[a] == full[b]).mean()) if len(full) else np.nan for b in keys] for a in keys])
    confusions = level_confusions(reviews) if reviews is not None else pd.DataFrame(
        columns=["concept", "reviewer_a", "reviewer_b", "level_a", "level_b", "n"])
    if reviews is None:
        notes.append("no reviews were given: the level confusions are left out")
    cov_acc, losses = float("nan"), [float("nan")] * len(keys)
    if "grade" in table.columns and pd.to_numeric(table["grade"], errors="coerce").notna().sum() >= 2 * folds:
        cov_acc, losses = _drop_one(table, keys, rubric.scale.values, folds, seed)
    else:
        notes.append("no grades (or too few): drop-one coverage is left out")
    rows = []
    for k, key in enumerate(keys):
        a = ((agreement or {}).get("concepts") or {}).get(key) or {}
        ci = a.get("alpha_ci") or [None, None]
        conf = confusions[confusions["concept"] == key]
        pair_share, pair, n_dis = float("nan"), "", int(conf["n"].sum()) if len(conf) else 0
        if n_dis:
            lo_hi = conf.assign(lo=np.minimum(conf["level_a"], conf["level_b"]),
                                hi=np.maximum(conf["level_a"], conf["level_b"])).groupby(["lo", "hi"])["n"].sum()
            top: tuple[int, int] = lo_hi.idxmax()  # type: ignore[assignment]
            pair, pair_share = f"{int(top[0])}–{int(top[1])}", float(lo_hi.max() / n_dis)
        others = [j for j in range(len(keys)) if j != k]
        j = max(others, key=lambda j: (same[k, j], abs(corr[k, j])))
        rows.append({
            "concept": key, "name": rubric.concept(key).name,
            "alpha": a.get("alpha"), "alpha_lo": ci[0], "alpha_hi": ci[1],
            "confused_levels": pair, "confused_share": pair_share, "n_disagreements": n_dis,
            "drop_one_loss": losses[k], "closest": keys[j], "same_level": same[k, j], "label_corr": corr[k, j],
            "partial_corr": float(partial_corr[k, j]) if partial_corr is not None else None,
        })
    df = pd.DataFrame(rows)
    return Diagnosis(df, corr, confusions, cov_acc, _suggest(df, len(table)), notes)


def _suggest(df: pd.DataFrame, n_items: int) -> list[str]:
    """At most MAX_SUGGESTIONS, strongest evidence first: redundant pairs, unreliable concepts, the most
    often confused level pairs, concepts the grade does not need."""
    recs = [{str(k): v for k, v in r.items()} for r in df.to_dict("records")]
    out: list[str] = []
    seen: set[frozenset[str]] = set()
    for r in sorted(recs, key=lambda r: -float(r["same_level"])):
        pair = frozenset((r["concept"], r["closest"]))
        if (r["same_level"] >= SAME_LEVEL or abs(r["label_corr"]) >= HIGH_CORR) and pair not in seen:
            seen.add(pair)
            pc = f"; given the other concepts the model links them at {r['partial_corr']:+.2f}" if r[
                "partial_corr"] is not None else ""
            out.append(f"{r['concept']} and {r['closest']} agree on {100 * r['same_level']:.0f} % of answers "
                       f"(label correlation {r['label_corr']:.2f}{pc}): merge them or sharpen their anchors.")
    for r in recs:
        if r["alpha"] is not None and not np.isnan(r["alpha"]) and r["alpha"] < LOW_ALPHA:
            out.append(f"{r['concept']} has α = {r['alpha']:.2f} (below {LOW_ALPHA}): reviewers do not apply it "
                       "consistently; rewrite its definition or train reviewers on it before relying on it.")
    confused = [r for r in recs if r["n_disagreements"] and r["confused_share"] >= CONFUSED_SHARE]
    for r in sorted(confused, key=lambda r: -r["n_disagreements"] * r["confused_share"])[:MAX_CONFUSIONS]:
        lo, hi = r["confused_levels"].split("–")
        rate = f", {r['n_disagreements'] * r['confused_share'] / max(n_items, 1):.2f} per answer" if n_items else ""
        out.append(f"{r['concept']} levels {lo} and {hi} are confused in {100 * r['confused_share']:.0f} % of its "
                   f"{r['n_disagreements']} reviewer disagreements{rate}: make the anchors of {lo} and {hi} easier "
                   "to tell apart (add a worked example of each).")
    useless = [r for r in recs if not np.isnan(r["drop_one_loss"]) and r["drop_one_loss"] <= DROP_LOSS]
    for r in sorted(useless, key=lambda r: r["drop_one_loss"])[:MAX_CONFUSIONS]:
        out.append(f"the grade loses {100 * max(r['drop_one_loss'], 0.0):.1f} points of accuracy without "
                   f"{r['concept']}: the other concepts already carry what it adds to the grade — check what it is for.")
    return out[:MAX_SUGGESTIONS]


def _read_adjudicated(d: Path) -> pd.DataFrame:
    from rubrictool.io import read_table

    for ext in ("csv", "jsonl", "parquet"):
        if (d / f"adjudicated.{ext}").is_file():
            return read_table(d / f"adjudicated.{ext}")
    raise DataError(f"{d} has no adjudicated.csv/.jsonl/.parquet: pass the --out folder of `rubrictool adjudicate`")


def diagnose_dir(
    adjudicated: str | Path, rubric: str | Rubric | None = None, reviews: list[str] | None = None,
    run: str | Path | None = None, folds: int = 5, seed: int = 0,
) -> Diagnosis:
    """:func:`diagnose` on the output folder of ``rubrictool adjudicate`` (adjudicated.*, agreement.json,
    discussion_queue.csv); ``reviews`` files replace the queue's reviews; ``run`` adds the learned Ω."""
    from rubrictool.rubric import load_rubric

    d = Path(adjudicated)
    if not d.is_dir():
        raise DataError(f"--adjudicated {d}: not a folder (pass the --out folder of `rubrictool adjudicate`)")
    table = _read_adjudicated(d)
    agreement: dict[str, Any] = {}
    if (d / "agreement.json").is_file():
        try:
            agreement = json.loads((d / "agreement.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DataError(f"{d / 'agreement.json'}: {exc}") from None
    name = rubric if rubric is not None else agreement.get("rubric")
    if name is None:
        raise DataError("no rubric: pass --rubric NAME|FILE (agreement.json names none)")
    rb = name if isinstance(name, Rubric) else load_rubric(str(name))
    rev: pd.DataFrame | None = None
    if reviews:
        from rubrictool.adjudicate import read_reviews

        rev = read_reviews(reviews)
    elif (d / "discussion_queue.csv").is_file():
        queue = pd.read_csv(d / "discussion_queue.csv", dtype={"item": str})
        rev = queue_reviews(queue, [str(r) for r in agreement.get("reviewers", [])])
    pc = None
    if run is not None:
        pc = partial_from_run(run)
    return diagnose(rb, table, agreement, rev, pc, folds, seed)


def partial_from_run(run: str | Path) -> NDArray[Any] | None:
    """The learned partial correlations of a run with LCEC; None without LCEC and when its LCEC is inert
    (:func:`rubrictool.evaluate.lcec_activity`: a link "the model makes" at ±0.00 says nothing)."""
    import reccbm
    from rubrictool.evaluate import lcec_activity

    model, _, _ = reccbm.load_checkpoint(run)
    if model.config.plm or model.lcec is None:
        return None
    rel = reccbm.reliability(model)
    partial = reccbm.partial_correlations(rel["Omega"])
    return None if lcec_activity(np.diag(rel["A"]), partial)["inert"] else partial


def confusion_matrix_text(conf: pd.DataFrame, key: str) -> list[tuple[str, int]]:
    """(\"a–b\", n) level pairs of one concept, most confused first (for tables)."""
    c = conf[conf["concept"] == key]
    if c.empty:
        return []
    lo = np.minimum(c["level_a"], c["level_b"])
    hi = np.maximum(c["level_a"], c["level_b"])
    s = c.assign(pair=[f"{a}–{b}" for a, b in zip(lo, hi)]).groupby("pair")["n"].sum().sort_values(ascending=False)
    return [(str(p), int(n)) for p, n in s.items()]



def write_diagnosis(diag: Diagnosis, out: str | Path) -> dict[str, Path]:
    """rubric_diagnosis.csv (per concept), level_confusions.csv (per reviewer pair and level pair) and
    rubric_diagnosis.md (the suggestions) into `out`."""
    from rubrictool.io import writable_dir

    d = writable_dir(out)
    paths = {n: d / n for n in ("rubric_diagnosis.csv", "level_confusions.csv", "rubric_diagnosis.md")}
    diag.concepts.to_csv(paths["rubric_diagnosis.csv"], index=False)
    diag.confusions.to_csv(paths["level_confusions.csv"], index=False)
    lines = ["# Rubric diagnosis", "", *(f"- {s}" for s in diag.suggestions or ["no suggestion"]), "",
             *(f"> {n}" for n in diag.notes)]
    paths["rubric_diagnosis.md"].write_text("\n".join(lines) + "\n")
    return paths
