"""``rubrictool rubric diagnose``: which concepts of a rubric work, from adjudicated labels alone.

Per concept: Krippendorff's α with its CI (agreement.json); which levels reviewers confuse (over every
pair of reviewers who labelled the same answer differently); how much cross-validated grade accuracy the
rubric loses without it (drop-one coverage: a logistic regression from the one-hot adjudicated levels
to the grade, with and without the concept); how redundant it is (the share of answers where it has the
same level as its closest concept, the label correlation and, with a trained run, the learned partial
correlation). Then a short list of concrete suggestions.

What the rubric cannot see (the grade ceiling, contrasting pairs): :mod:`rubrictool.report.ceiling`.
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
from rubrictool.report.ceiling import (
    PAIRS_PER_BOUNDARY,
    ContrastPair,
    GradeCeiling,
    ceiling_markdown,
    contrast_pairs,
    grade_ceiling,
    pairs_frame,
)
from rubrictool.rubric import Rubric
from rubrictool.textsafe import restore_frame

__all__ = ["Diagnosis", "diagnose", "diagnose_dir", "diagnose_run", "level_confusions", "queue_reviews",
           "reviewer_confusion", "write_diagnosis"]

# thresholds of the suggestions
LOW_ALPHA = 0.667  # Krippendorff: below 0.667, conclusions from the labels are tentative
SAME_LEVEL = 0.85  # two concepts at the same level on this share of answers: redundant
CONFUSED_SHARE = 0.30  # an adjacent level pair making up this share of a concept's disagreements
DROP_LOSS = 0.0  # no accuracy lost without a concept: it adds nothing the others do not
HIGH_CORR = 0.8  # label correlation at or above which two concepts look redundant
MAX_CONFUSIONS = 2  # level-confusion (and drop-one) suggestions kept, most frequent first
MAX_SUGGESTIONS = 6
MAX_BOUNDARY_SUGGESTIONS = 2  # suggestions about named boundaries, before (not instead of) the others



def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in r.items()} for r in df.to_dict("records")]


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
    ceiling: GradeCeiling | None = None  # the oracle-concept head per grade, and the boundaries it cannot see
    pairs: list[ContrastPair] = field(default_factory=list)  # same profile, different grades, per named boundary
    rubric: str | None = None  # the rubric's name or file, as diagnose_dir was given it (for --suggest)
    warnings: list[str] = field(default_factory=list)  # e.g. a run's training table changed since it was trained


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


def _drop_one(table: pd.DataFrame, keys: list[str], domain: list[int], folds: int,
              seed: int) -> tuple[float, list[float]]:
    from threadpoolctl import threadpool_limits

    from rubrictool.agreement import cv_scores

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
        full = cv_scores(hot.reshape(n, K * V), y, folds, seed, "onehot")[0]
        losses = [full - cv_scores(np.delete(hot, k, axis=1).reshape(n, (K - 1) * V), y, folds, seed, "onehot")[0]
                  for k in range(K)]
    return full, losses


def diagnose(
    rubric: Rubric, table: pd.DataFrame, agreement: dict[str, Any] | None = None,
    reviews: pd.DataFrame | None = None, partial_corr: NDArray[Any] | None = None, folds: int = 5, seed: int = 0,
    pairs_per_boundary: int = PAIRS_PER_BOUNDARY,
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
    df["resolved_share"] = _resolved_shares(table, keys)
    who = _reviewers_word(agreement, table)
    from rubrictool.adjudicate.provenance import describe_level_sources, level_source_counts

    sources = describe_level_sources(level_source_counts(table, keys))
    if sources:
        notes.append(f"who set the levels of this table: {sources}")
    ceiling, pairs = None, []
    if not np.isnan(cov_acc):
        ceiling = grade_ceiling(rubric, table, folds, seed)
        pairs = contrast_pairs(rubric, table, ceiling.named, pairs_per_boundary)
    gaps: list[str] = []
    if ceiling is not None:  # the boundaries the concepts cannot see come first, the worst first
        named = ceiling.boundaries[ceiling.boundaries["named"]].sort_values("balanced_acc")
        for b in _records(named)[:MAX_BOUNDARY_SUGGESTIONS]:
            gaps.append(
                f"the concept levels tell grade {b['lower']} from grade {b['upper']} apart with balanced accuracy "
                f"{b['balanced_acc']:.2f} (0.5 is chance; {100 * b['shared_profiles']:.0f} % of those answers share a "
                "concept profile with an answer of the other grade): the rubric is missing what separates them — read "
                "the contrasting pairs and add a concept or sharpen an anchor.")
    return Diagnosis(df, corr, confusions, cov_acc, gaps + _suggest(df, len(table), who), notes, ceiling, pairs)


def _resolved_shares(table: pd.DataFrame, keys: list[str]) -> list[float]:
    """Per concept, the share of its labelled levels that a teacher's resolution set (NaN without provenance)."""
    from rubrictool.adjudicate.provenance import level_sources

    lv = level_sources(table, keys)
    if not len(lv):
        return [float("nan")] * len(keys)
    share = (lv["source"] == "resolution").groupby(lv["concept"]).mean()
    return [float(share.get(k, float("nan"))) for k in keys]


def _reviewers_word(agreement: dict[str, Any] | None, table: pd.DataFrame) -> str:
    """Who the α is of, in words: the reviewers' source (agreement.json, else the table's label_source column)."""
    src = str((agreement or {}).get("label_source") or "")
    if not src and "label_source" in table.columns:
        vals = set(table["label_source"].dropna().astype(str)) - {"none"}
        src = vals.pop() if len(vals) == 1 else "mixed" if vals else ""
    return {"llm": "the LLM panel", "human": "the reviewers", "model": "the trained graders that reviewed",
            "mixed": "the reviewers (people and models)"}.get(src, "the reviewers")


def _suggest(df: pd.DataFrame, n_items: int, who: str = "the reviewers") -> list[str]:
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
            resolved = r.get("resolved_share")
            if resolved is not None and not np.isnan(resolved) and resolved >= 1.0:
                out.append(f"{r['concept']} has α = {r['alpha']:.2f} among {who} (below {LOW_ALPHA}), whose votes a "
                           "teacher's resolution replaced on every level of it in this table: the levels are the "
                           f"teacher's, but {who} cannot label it alone — rewrite its definition before they label "
                           "new answers.")
            else:
                out.append(f"{r['concept']} has α = {r['alpha']:.2f} (below {LOW_ALPHA}): {who} do not apply it "
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
        if round(100 * r["drop_one_loss"], 1) == 0:  # no measurable change either way: it adds nothing
            out.append(f"the grade is predicted as well without {r['concept']} (cross-validated, within 0.05 points of "
                       "accuracy): the other concepts already carry what it adds to the grade — check what it is for.")
        elif r["drop_one_loss"] < 0:  # the grade is predicted better without it: keeping it costs accuracy
            out.append(f"the grade is {100 * -r['drop_one_loss']:.1f} points of accuracy better predicted without "
                       f"{r['concept']} (cross-validated): the other concepts already carry what it adds to the grade, "
                       "and it adds noise — check what it is for.")
        else:
            out.append(f"the grade loses {100 * r['drop_one_loss']:.1f} points of accuracy without {r['concept']}: the "
                       "other concepts already carry what it adds to the grade — check what it is for.")
    return out[:MAX_SUGGESTIONS]


def _read_adjudicated(d: Path) -> pd.DataFrame:
    from rubrictool.io import read_table

    for ext in ("csv", "jsonl", "parquet"):
        if (d / f"adjudicated.{ext}").is_file():
            return read_table(d / f"adjudicated.{ext}")
    raise DataError(f"{d} has no adjudicated.csv/.jsonl/.parquet: pass the --out folder of `rubrictool adjudicate`")


def diagnose_dir(
    adjudicated: str | Path, rubric: str | Rubric | None = None, reviews: list[str] | None = None,
    run: str | Path | None = None, folds: int = 5, seed: int = 0, pairs_per_boundary: int = PAIRS_PER_BOUNDARY,
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
    if rubric is None and (d / "rubric.yaml").is_file():  # the copy adjudicate keeps beside the labels
        from rubrictool.rubric import parse_rubric

        name = parse_rubric((d / "rubric.yaml").read_text(encoding="utf-8"), str(d / "rubric.yaml"))
    if name is None:
        raise DataError("no rubric: pass --rubric NAME|FILE (agreement.json names none)")
    rb = name if isinstance(name, Rubric) else load_rubric(str(name))
    rev: pd.DataFrame | None = None
    if reviews:
        from rubrictool.adjudicate import read_reviews

        rev = read_reviews(reviews)
    elif (d / "disagreements.csv").is_file() or (d / "discussion_queue.csv").is_file():
        # every non-unanimous case; the discussion queue holds only what --queue selects (older folders: the queue)
        name = "disagreements.csv" if (d / "disagreements.csv").is_file() else "discussion_queue.csv"
        # cells written for spreadsheets, as they were
        queue = restore_frame(pd.read_csv(d / name, dtype={"item": str}))
        rev = queue_reviews(queue, [str(r) for r in agreement.get("reviewers", [])])
    pc = None
    if run is not None:
        pc = partial_from_run(run)
    diag = diagnose(rb, table, agreement, rev, pc, folds, seed, pairs_per_boundary)
    diag.rubric = str(name) if not isinstance(name, Rubric) else None
    return diag


def diagnose_run(
    run_dir: str | Path, reviews: list[str] | None = None, data: str | Path | None = None,
    data_dir: str | Path | None = None, folds: int = 5, seed: int = 0, pairs_per_boundary: int = PAIRS_PER_BOUNDARY,
) -> Diagnosis:
    """:func:`diagnose` from a trained run alone: the run's copy of its rubric and of its training table (``data``
    instead, when given), α from its reliability table and the learned Ω. ``reviews`` files give the level confusions
    (a Mohler run on the bundled labels: its three passes). ``warnings`` says when the recorded table changed."""
    from rubrictool.io import read_table
    from rubrictool.train import runs

    run = runs.open_run(run_dir, data_dir=data_dir)
    table = run.load_table(data)
    rb = run.rubric
    agreement: dict[str, Any] = {}
    rel_file = run.path / "reliability.csv"
    if rel_file.is_file():
        rel = read_table(rel_file)
        if {"concept", "alpha"} <= set(rel.columns):
            def num(x: Any) -> float | None:
                v = pd.to_numeric(x, errors="coerce")
                return None if pd.isna(v) else float(v)

            agreement["concepts"] = {str(r["concept"]): {"alpha": num(r["alpha"]),
                                                         "alpha_ci": [num(r.get("alpha_lo")), num(r.get("alpha_hi"))]}
                                     for r in rel.to_dict("records")}
    rev: pd.DataFrame | None = None
    if reviews:
        from rubrictool.adjudicate import read_reviews

        rev = read_reviews(reviews)
    elif run.bundled_labels and str(run.meta.get("rubric")) == "mohler":
        from rubrictool.data import load_concept_passes

        rev = load_concept_passes(data_dir)
    pc = None if run.plm else partial_from_run(run.path)
    diag = diagnose(rb, table, agreement, rev, pc, folds, seed, pairs_per_boundary)
    if rev is None:
        diag.notes = [n for n in diag.notes if not n.startswith("no reviews were given")]
        diag.notes.append("the run keeps the adjudicated levels, not each reviewer's: the level confusions are left "
                          "out (pass --reviews FILE, or --adjudicated DIR, the folder `rubrictool adjudicate` wrote)")
    # for --suggest: the author's file when it is still the one the run trained on, else the run's copy
    rec = run.record.get("rubric") or {}
    src = rec.get("path")
    if src and Path(src).is_file() and runs.sha256_file(src) == rec.get("sha256"):
        diag.rubric = str(src)
    else:
        diag.rubric = str(run.path / "rubric.yaml") if (run.path / "rubric.yaml").is_file() else str(run.meta["rubric"])
    diag.warnings = list(run.warnings)
    return diag


def partial_from_run(run: str | Path) -> NDArray[Any] | None:
    """The learned partial correlations of a run with LCEC; None without LCEC and when its LCEC is inert
    (:func:`rubrictool.evaluate.lcec_activity`: a link "the model makes" at ±0.00 says nothing)."""
    import reccbm
    from rubrictool.evaluate import lcec_activity

    model, _, _ = reccbm.load_checkpoint(run)
    if not isinstance(model, reccbm.RecCBM) or model.lcec is None:
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
    from rubrictool.atomic import atomic_write_text
    from rubrictool.io import writable_dir, write_table

    d = writable_dir(out)
    paths = {n: d / n for n in ("rubric_diagnosis.csv", "level_confusions.csv", "rubric_diagnosis.md")}
    write_table(diag.concepts, paths["rubric_diagnosis.csv"], for_people=True)
    write_table(diag.confusions, paths["level_confusions.csv"], for_people=True)
    from rubrictool.textsafe import md_inline, md_quote

    lines = ["# Rubric diagnosis", "", *(f"**Warning:** {md_inline(w)}\n" for w in diag.warnings),
             *(f"- {md_inline(s)}" for s in diag.suggestions or ["no suggestion"]), ""]
    if diag.ceiling is not None:
        paths["grade_ceiling.csv"] = d / "grade_ceiling.csv"
        paths["grade_boundaries.csv"] = d / "grade_boundaries.csv"
        paths["contrast_pairs.csv"] = d / "contrast_pairs.csv"
        write_table(diag.ceiling.per_grade, paths["grade_ceiling.csv"], for_people=True)
        write_table(diag.ceiling.boundaries, paths["grade_boundaries.csv"], for_people=True)
        write_table(pairs_frame(diag.pairs), paths["contrast_pairs.csv"], for_people=True)
        lines += ceiling_markdown(diag.ceiling, diag.pairs)
    lines += [md_quote(n) for n in diag.notes]
    atomic_write_text(paths["rubric_diagnosis.md"], "\n".join(lines) + "\n")
    return paths
