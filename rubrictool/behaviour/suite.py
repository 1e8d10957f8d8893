"""Running the behavioural suite on a run: each test answer edited, every distinct text graded once with the run's
own grading path, the graded rows split back into the edited answers and the minimal pairs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.behaviour.edits import TESTS, check_tests, edit, filler_for, key_words
from rubrictool.behaviour.pairs import pair_questions, read_pairs
from rubrictool.behaviour.summary import TARGETS, failing_sentences, summarise
from rubrictool.errors import DataError
from rubrictool.flags import gaming_flags
from rubrictool.progress import Progress, ProgressFn

__all__ = ["BehaviourResult", "run_suite", "suite_on_run"]

# ---------------------------------------------------------------------------- running the suite


@dataclass
class BehaviourResult:
    """``items``: one row per test and edited answer (grades and levels before/after, the texts); ``pairs``: one row
    per minimal pair (the grades of the right and the wrong answer); ``summary``: :func:`summarise` of both."""

    run: str
    seed: int
    n: int  # test answers
    grade_range: tuple[int, int]
    items: pd.DataFrame
    pairs: pd.DataFrame
    summary: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "seed": self.seed, "n": self.n, "grade_range": list(self.grade_range),
                "targets": TARGETS, "notes": self.notes, "failing": failing_sentences(self.summary),
                "tests": json.loads(self.summary.to_json(orient="records"))}


def _grade_texts(grader: Any, frame: pd.DataFrame, batch_size: int, progress: ProgressFn | None) -> pd.DataFrame:
    """Grade every distinct (question, reference, context, response) of ``frame`` once, shortest first (fewer pad
    tokens per batch), through :func:`rubrictool.grade.grade_loaded`; the grade and the levels per row of ``frame``."""
    from rubrictool.grade import grade_loaded

    cols = ["question", "reference", "context", "response"]
    uniq = frame[cols].drop_duplicates().reset_index(drop=True)
    uniq = uniq.iloc[np.argsort(uniq["response"].str.len().to_numpy() + uniq["question"].str.len().to_numpy(),
                                kind="stable")].reset_index(drop=True)
    uniq["id"] = [f"b{i}" for i in range(len(uniq))]

    def report(p: Progress) -> None:
        if progress is not None and p.kind == "progress":
            progress(Progress("behaviour", p.done, p.total))

    graded = grade_loaded(grader, uniq, batch_size, report, flags=False)
    level_cols = [c for c in graded.columns if c.endswith("_level")]
    keep = pd.concat([uniq[cols], graded[["grade", *level_cols]]], axis=1)
    return frame[cols].merge(keep, on=cols, how="left")


def _suite_items(test: pd.DataFrame, names: list[str], seed: int) -> pd.DataFrame:
    """One row per (test, answer) the test's edit applies to: the original and the edited response."""
    rows = []
    records = test.to_dict(orient="records")
    for name in names:
        rng = np.random.default_rng([seed, [t.name for t in TESTS].index(name)])  # one stream per test
        for r in records:
            after = edit(name, {str(k): v for k, v in r.items()}, rng)
            if after is not None:
                rows.append({"test": name, "id": r["id"], "question": r["question"], "reference": r["reference"],
                             "context": r["context"], "before": r["response"], "after": after, "gold": r["gold"]})
    return pd.DataFrame(rows, columns=["test", "id", "question", "reference", "context", "before", "after", "gold"])


def _anchors(run: Any) -> str:
    """The rubric's level anchors in one text ("" for a run without its rubric copy)."""
    try:
        rb = run.rubric
    except (OSError, KeyError, DataError):
        return ""
    return " ".join(str(lv.anchor) for c in rb.concepts for lv in c.levels)


def run_suite(
    run_dir: str | Path,
    data: str | Path | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    batch_size: int = 64,
    tests: list[str] | None = None,
    pairs: str | Path | pd.DataFrame | None = None,
    filler: list[str] | None = None,
    progress: ProgressFn | None = None,
) -> BehaviourResult:
    """Run the behavioural tests (default all of :data:`TESTS`) on the run's test split, and the minimal ``pairs``
    (a JSONL file, :func:`read_pairs`) whose questions the run's table holds; ``filler``: the filler sentences to draw
    from (default: the course's own answers to other questions)."""
    from rubrictool.report.run import open_run

    check_tests(tests)
    pair_table = read_pairs(pairs) if isinstance(pairs, (str, Path)) else pairs
    return suite_on_run(open_run(run_dir, data, data_dir), seed, batch_size, tests, pair_table, filler, progress)


def suite_on_run(run: Any, seed: int = 0, batch_size: int = 64, tests: list[str] | None = None,
                 pairs: pd.DataFrame | None = None, filler: list[str] | None = None,
                 progress: ProgressFn | None = None) -> BehaviourResult:
    """:func:`run_suite` on a run opened with its table (:func:`rubrictool.report.run.open_run`)."""
    from rubrictool.grade import load_grader
    from rubrictool.report.run import split_rows

    names = check_tests(tests)
    test = split_rows(run, "test")
    gmin = run.grade_min
    gmax = gmin + run.model.config.num_grades - 1
    grader = load_grader(run.path)
    grader.model_, grader.tokenizer_ = run.model, run.tokenizer  # the run's model as the caller holds it (and set it)
    base = test[["id", "question", "reference", "context", "response"]].copy()
    base["gold"] = test["_y"].to_numpy() + gmin if "_y" in test.columns else np.nan
    mark = base["gold"]
    if mark.isna().any():  # no teacher's mark for some answers: the model's own grade says which are wrong
        mark = mark.where(mark.notna(), _grade_texts(grader, base, batch_size, None)["grade"].astype(float))
    base["wrong"] = (mark < (gmin + gmax) / 2).to_numpy()  # a wrong answer: below the middle of the grade scale
    anchors = _anchors(run)
    base["keys"] = pd.Series([key_words(q, r, anchors) for q, r in zip(base["question"], base["reference"])],
                             index=base.index, dtype=object)
    base["filler"] = filler_for(run.table, [str(i) for i in run.split.get("train", [])], list(base["question"]), seed,
                                filler)
    items = _suite_items(base, names, seed)
    pp = pair_questions(pairs, run.table) if pairs is not None and run.table is not None else None
    cols = ["question", "reference", "context", "response"]
    frame = pd.concat([
        base[cols], items.rename(columns={"after": "response"})[cols],
        *([pp.assign(context="", response=pp[c])[cols] for c in ("right", "wrong")] if pp is not None else []),
    ], ignore_index=True)
    graded = _grade_texts(grader, frame.fillna(""), batch_size, progress)
    result = _assemble(run, base, items, pp, graded, seed, (gmin, gmax))
    if pairs is not None and (pp is None or not len(pp)):
        result.notes.append("none of the minimal pairs' questions is in the run's table: no minimal-pair test")
    return result


def _assemble(run: Any, base: pd.DataFrame, items: pd.DataFrame, pp: pd.DataFrame | None, graded: pd.DataFrame,
              seed: int, grades: tuple[int, int]) -> BehaviourResult:
    """The graded rows of :func:`run_suite` split back into the answers' items and the pairs."""
    levels = [c for c in graded.columns if c.endswith("_level")]
    n0, n1 = len(base), len(base) + len(items)
    orig = graded.iloc[:n0].reset_index(drop=True)
    orig.index = base["id"].astype(str)
    after = graded.iloc[n0:n1].reset_index(drop=True)
    at = orig.reindex(items["id"].astype(str).tolist())  # each edited answer's original, row for row
    out = items.assign(grade_before=at["grade"].to_numpy(), grade_after=after["grade"].to_numpy())
    moved = np.zeros(len(items), dtype=bool)
    for c in levels:
        moved |= at[c].to_numpy() != after[c].to_numpy()
    out["levels_changed"] = moved
    # held for a teacher, no mark given: the flags an answer's own text raises (a pasted reference, a keyword list, ...)
    for col, text in (("held_before", "before"), ("held_after", "after")):
        out[col] = [bool(gaming_flags(str(t), str(r), str(q)))
                    for t, r, q in zip(out[text], out["reference"].fillna(""), out["question"].fillna(""))]
    out = out.drop(columns=["question", "reference", "context"])
    pairs = pd.DataFrame(columns=["question_id", "right", "wrong", "changed", "grade_right", "grade_wrong"])
    if pp is not None and len(pp):
        m = len(pp)
        pairs = pp[["question_id", "right", "wrong", "changed", "note", "provenance"]].assign(
            grade_right=graded["grade"].iloc[n1:n1 + m].to_numpy(),
                grade_wrong=graded["grade"].iloc[n1 + m:].to_numpy())
    return BehaviourResult(str(run.path), seed, len(base), grades, out, pairs, summarise(out, pairs, grades, seed))
