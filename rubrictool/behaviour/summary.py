"""The behavioural suite's verdicts: one row per test (the share of marks moved, the mean shift with a bootstrap CI,
the expected direction) judged against :data:`TARGETS`, the failing tests in sentences and the Markdown tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rubrictool.behaviour.edits import TESTS, BehaviourTest

__all__ = ["TARGETS", "failing_sentences", "summarise", "summary_markdown"]

# The targets a test is judged by: invariance edits move at most 2 % of marks and none by 2 marks; an edit
# that must lower the mark lowers it by a mark or more on at least 70 % of the answers graded in the top two marks;
# a gaming edit gains at most 0.25 mark on average; a minimal pair's right answer is above the wrong one in 85 %.
TARGETS = {"invariance_changed": 0.02, "falls_top": 0.70, "gaming_gain": 0.25, "pairs_right_above": 0.85}

# ---------------------------------------------------------------------------- summaries


def _ci(values: np.ndarray[Any, Any], seed: int, reps: int = 2000) -> tuple[float, float]:
    """95 % percentile bootstrap CI of the mean (nan, nan for fewer than two values)."""
    if len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(reps, len(values)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _largest(part: pd.DataFrame, shift: np.ndarray[Any, Any], k: int = 3) -> list[dict[str, Any]]:
    order = np.argsort(-np.abs(shift), kind="stable")[:k]
    return [{"id": str(part["id"].iloc[i]), "before": str(part["before"].iloc[i]), "after": str(part["after"].iloc[i]),
             "grade_before": int(part["grade_before"].iloc[i]), "grade_after": int(part["grade_after"].iloc[i])}
            for i in order if shift[i] != 0]


def _test_row(t: BehaviourTest, part: pd.DataFrame, grades: tuple[int, int], seed: int) -> dict[str, Any]:
    shift = (part["grade_after"].to_numpy(float) - part["grade_before"].to_numpy(float))
    lo, hi = _ci(shift, seed)
    top = part["grade_before"].to_numpy() >= grades[1] - 1  # answers the model graded in the top two marks
    # as marks are given: an edited answer the product holds for a teacher (a gaming flag) gets no mark from the grader
    held = part["held_after"].to_numpy(bool) if "held_after" in part.columns else np.zeros(len(part), dtype=bool)
    given = np.where(held, 0.0, shift)
    glo, ghi = _ci(given, seed)
    row: dict[str, Any] = {
        "test": t.name, "kind": t.kind, "expect": t.expect, "words": t.words, "n": len(part),
        "share_changed": float((shift != 0).mean()) if len(part) else float("nan"),
        "share_levels_changed": float(part["levels_changed"].mean()) if len(part) else float("nan"),
        "mean_shift": float(shift.mean()) if len(part) else float("nan"), "ci_lo": lo, "ci_hi": hi,
        "share_moved_2": float((np.abs(shift) >= 2).mean()) if len(part) else float("nan"),
        "share_expected": float("nan"), "n_top": int(top.sum()), "share_top_fell": float("nan"),
        "top": f"{grades[1] - 1}–{grades[1]}",
        "share_held": float(held.mean()) if len(part) else float("nan"),
        "mean_shift_given": float(given.mean()) if len(part) else float("nan"), "given_lo": glo, "given_hi": ghi,
        "largest": _largest(part, shift),
    }
    if t.expect == "falls" and len(part):
        row["share_expected"] = float((shift < 0).mean())
        row["share_top_fell"] = float((shift[top] <= -1).mean()) if top.any() else float("nan")
    elif t.expect == "not_up" and len(part):
        row["share_expected"] = float((shift <= 0).mean())
    row["passes"], row["sentence"] = _judge(row)
    return row


def _judge(row: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether a test meets its target (None: not judged, too few answers) and, when it fails, a teacher's sentence."""
    words = row["words"]

    def pct(v: float) -> str:
        return f"{100 * v:.0f} %"

    if row["n"] == 0:
        return None, ""
    if row["expect"] == "same":
        ok = row["share_changed"] <= TARGETS["invariance_changed"] and row["share_moved_2"] == 0
        two = f", {100 * row['share_moved_2']:.1f} % by 2 marks or more" if row["share_moved_2"] else ""
        return ok, f"{words} moves {pct(row['share_changed'])} of marks{two} (target: at most 2 %, none by 2)"
    if row["expect"] == "falls":
        if row["n_top"] == 0:
            return None, ""
        ok = row["share_top_fell"] >= TARGETS["falls_top"]
        return ok, (f"{words} lowers only {pct(row['share_top_fell'])} of the {row['n_top']} "
                    f"answer{'s' * (row['n_top'] != 1)} graded {row['top']} by a "
                    "mark or more (target: at least 70 %)")
    if row["expect"] == "not_up":
        ok = row["mean_shift"] <= TARGETS["gaming_gain"]
        given = row.get("mean_shift_given", float("nan"))
        held = (f"; {pct(row['share_held'])} held for a teacher by the flags, {given:+.2f} as marks are given"
                if row.get("share_held") and not np.isnan(given) else "")
        return ok, f"{words} gains {row['mean_shift']:+.2f} marks on average{held} (target: at most +0.25)"
    return None, ""


def _pairs_row(pairs: pd.DataFrame, seed: int) -> dict[str, Any]:
    diff = pairs["grade_right"].to_numpy(float) - pairs["grade_wrong"].to_numpy(float)
    lo, hi = _ci(diff, seed)
    order = np.argsort(diff, kind="stable")[:3]
    row: dict[str, Any] = {
        "test": "minimal_pairs", "kind": "minimum functionality", "expect": "right_above",
        "words": "a right answer and a wrong one that differ by one word", "n": len(pairs),
        "share_expected": float((diff > 0).mean()), "share_tied": float((diff == 0).mean()),
        "mean_shift": float(diff.mean()), "ci_lo": lo, "ci_hi": hi,
        "largest": [{"id": str(pairs["question_id"].iloc[i]), "before": str(pairs["right"].iloc[i]),
                     "after": str(pairs["wrong"].iloc[i]), "grade_before": int(pairs["grade_right"].iloc[i]),
                     "grade_after": int(pairs["grade_wrong"].iloc[i])} for i in order if diff[i] <= 0],
    }
    row["passes"] = bool(row["share_expected"] >= TARGETS["pairs_right_above"])
    row["sentence"] = (f"the right answer of a minimal pair is graded above the wrong one in only "
                       f"{100 * row['share_expected']:.0f} % (target: at least 85 %)")
    return row


def summarise(items: pd.DataFrame, pairs: pd.DataFrame, grades: tuple[int, int], seed: int = 0) -> pd.DataFrame:
    """One row per test of the graded ``items`` (one run's, or several folds' pooled) and one for the minimal ``pairs``:
    n, share of marks changed, share with a concept level changed, mean shift [95 % bootstrap CI], share moved by 2
    or more, share in the expected direction, share of top-marked answers that fell (tests that must lower the mark),
    the largest moves, whether it meets its target and, when not, the sentence that says so."""
    rows = [_test_row(t, items[items["test"] == t.name], grades, seed) for t in TESTS
            if (items["test"] == t.name).any()]
    if len(pairs):
        rows.append(_pairs_row(pairs, seed))
    return pd.DataFrame(rows)


def failing_sentences(summary: pd.DataFrame) -> list[str]:
    """The failing tests in a teacher's words, invariance first."""
    if summary.empty:
        return []
    return [str(r["sentence"]) for r in summary.to_dict(orient="records")
            if isinstance(r.get("passes"), (bool, np.bool_)) and not r["passes"]]


def summary_markdown(summary: pd.DataFrame, largest: bool = True) -> str:
    """The summary as Markdown tables: invariance, directional, minimal pairs; then the largest moves."""
    from rubrictool.textsafe import md_inline

    def pct(v: Any) -> str:
        return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{100 * float(v):.1f} %"

    def ok(v: Any) -> str:
        return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else ("yes" if v else "**no**")

    recs = summary.to_dict(orient="records")
    out = [("| invariance test | answers | marks changed | levels changed | mean shift [95 % CI] | moved ≥ 2 | "
            "held by a flag | meets target |"),
           "|---|---:|---:|---:|---|---:|---:|---|"]
    out += [f"| {r['test']} | {r['n']} | {pct(r['share_changed'])} | {pct(r['share_levels_changed'])} | "
            f"{r['mean_shift']:+.3f} [{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {pct(r['share_moved_2'])} | "
            f"{pct(r.get('share_held'))} | {ok(r['passes'])} |"
            for r in recs if r["kind"] == "invariance"]
    out += ["", ("| directional test | expected | answers | marks changed | mean shift [95 % CI] | in the expected "
            "direction | answers graded in the top two marks falling ≥ 1 | held by a flag | mean shift as marks are "
            "given [95 % CI] | meets target |"),
            "|---|---|---:|---:|---|---:|---|---:|---|---|"]
    for r in recs:
        if r["kind"] == "directional":
            top = f"{pct(r['share_top_fell'])} of {int(r['n_top'])}" if r["expect"] == "falls" else "—"
            exp = "falls" if r["expect"] == "falls" else "does not rise"
            given = (f"{r['mean_shift_given']:+.3f} [{r['given_lo']:+.3f}, {r['given_hi']:+.3f}]"
                     if "mean_shift_given" in r and not np.isnan(r["mean_shift_given"]) else "—")
            out.append(f"| {r['test']} | {exp} | {int(r['n'])} | {pct(r['share_changed'])} | {r['mean_shift']:+.3f} "
                       f"[{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {pct(r['share_expected'])} | {top} | "
                       f"{pct(r.get('share_held'))} | {given} | {ok(r['passes'])} |")
    for r in recs:
        if r["kind"] == "minimum functionality":
            out += ["",
                    "| minimal pairs | pairs | right above wrong | tied | mean difference [95 % CI] | meets target |",
                    "|---|---:|---:|---:|---|---|",
                    (f"| right vs. wrong by one word | {r['n']} | {pct(r['share_expected'])} | {pct(r['share_tied'])} "
                    f"| {r['mean_shift']:+.3f} [{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {ok(r['passes'])} |")]
    if largest:
        out += ["", "Largest moves (answer before → after, marks):", ""]
        for r in recs:
            for m in (r.get("largest") or [])[:2]:
                out.append(f"- {r['test']}, {md_inline(m['id'])}: {m['grade_before']} → {m['grade_after']}: "
                           f"“{md_inline(m['before'][:160])}” → “{md_inline(m['after'][:160])}”")
    return "\n".join(out) + "\n"
