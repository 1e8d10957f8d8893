"""What ``rubrictool grade`` writes: the graded table with held answers, the review queue, the quality card and the
teacher's gradebook back (:func:`grade_file`).

- The run: one run, or a k-fold run (``train --folds k --final``), which grades with its final model (trained on every
  labelled answer, ``RUN/final``) and carries the pooled k-fold figures as its quality card (:func:`quality_card`).
- Held answers (:mod:`rubrictool.review_queue`): a flagged answer gets no mark, ``needs_review`` says why.
- The review queue: the answers most at risk first, for ``review_budget`` reviews (``<out>.review.csv``).
- The quality card: the figures that say how far to trust the marks (``<out>.card.json``, and the terminal).
- The gradebook (:mod:`rubrictool.gradebook`): the teacher's spreadsheet in its own layout, marks and comments added.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import reccbm
from rubrictool.atomic import atomic_write_text
from rubrictool.errors import DataError, TrainError
from rubrictool.flags import load_profile
from rubrictool.grade import (
    check_unique_ids,
    grade_loaded,
    grading_device,
    load_grader,
    read_review,
    review_summary,
    trained_questions,
)
from rubrictool.io import read_table, write_table
from rubrictool.outputs import check_output, has_columns, output_lock, writable_parent
from rubrictool.progress import ProgressFn, note
from rubrictool.review_queue import hold_marks, review_queue, uncertainty_score, weak_pass
from rubrictool.rubric import Rubric
from rubrictool.train.folds import FINAL_DIR
from rubrictool.train.kfold import is_kfold_run
from rubrictool.train.labels import describe_labels

__all__ = ["KEEP_COLUMNS", "GradeOptions", "Graded", "card_line", "grade_file", "grader_run", "keep_columns",
           "output_paths",
           "quality_card"]

KEEP_COLUMNS = ("question", "student", "source_id", "response")
"""The item table's columns ``grade`` copies beside each grade by default (those the table has), so grades join back
to the question, the student and the answer."""


@dataclass
class Graded:
    """What :func:`grade_file` wrote: the graded table (held answers without a mark), its path, the seconds spent
    grading, the review queue and its path, the quality card and its path, and the gradebook and its summary."""

    table: pd.DataFrame
    path: Path
    seconds: float
    queue: pd.DataFrame
    queue_path: Path
    card: dict[str, Any]
    card_path: Path
    gradebook_path: Path | None = None
    summary: pd.DataFrame | None = None
    summary_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def keep_columns(graded: pd.DataFrame, items: pd.DataFrame, keep: list[str] | None = None) -> pd.DataFrame:
    """``graded`` with the item columns ``keep`` (default :data:`KEEP_COLUMNS`, those present) copied in after ``id``,
    row for row; a name the grades already use gets ``input_`` before it. A ``keep`` column the items lack is an
    error naming the columns they have."""
    if keep is None:
        cols = [c for c in KEEP_COLUMNS if c in items.columns]
    else:
        cols = list(dict.fromkeys(c for c in keep if c and c != "id"))
        missing = [c for c in cols if c not in items.columns]
        if missing:
            raise DataError(f"--keep {', '.join(missing)}: no such column in the items to grade; they have "
                            f"{', '.join(map(str, items.columns))}")
    if not cols:
        return graded
    src = items.reset_index(drop=True)[cols]
    src = src.rename(columns={c: f"input_{c}" for c in cols if c in graded.columns})
    at = list(graded.columns).index("id") + 1 if "id" in graded.columns else 0
    return pd.concat([graded.iloc[:, :at], src, graded.iloc[:, at:]], axis=1)


def grader_run(run: str | Path) -> Path:
    """The run that grades: ``run`` itself, or a k-fold run's final model (``RUN/final``); a k-fold run without one
    is refused, naming the command that adds it."""
    if not is_kfold_run(run):
        return Path(run)
    final = Path(run) / FINAL_DIR
    if not (Path(run) / "folds.json").is_file():
        raise TrainError(f"{run} is a k-fold run that did not finish (no folds.json): its quality card is missing",
                         hint="run the same `rubrictool train ... --folds K --final` again: finished parts are read "
                              "back")
    if not (final / "model.json").is_file():
        raise TrainError(f"{run} is a k-fold run without a final model (one trained on every labelled answer)",
                         hint=f"add it with the same `rubrictool train ... --folds K` command plus --final --out {run} "
                              "(its folds are read back, only the final model trains), or pass one of its folds")
    return final


def quality_card(run: str | Path) -> dict[str, Any]:
    """How far to trust the marks of ``run``: for a k-fold run, the pooled figures of its folds (every labelled answer
    graded by a model that did not train on it), which its final model carries; for one run, its own test split.
    QWK and T-Acc with their 95 % bootstrap CIs, the majority class, the answers measured and who made the labels."""
    if is_kfold_run(run):
        doc = json.loads((Path(run) / "folds.json").read_text(encoding="utf-8"))
        final = json.loads((Path(run) / FINAL_DIR / "split.json").read_text(encoding="utf-8"))
        source = f"pooled over the {doc['folds']} folds of {Path(run).name}"
        card = {"source": source, "folds": doc["folds"], "by": doc.get("by"), "n_answers": doc["n_items"],
                "model": f"{Path(run).name}/{FINAL_DIR}", "trained_on": len(final.get("train", []))}
    else:
        doc = json.loads((Path(run) / "metrics.json").read_text(encoding="utf-8"))
        card = {"source": f"the test split of {Path(run).name}", "folds": None, "by": None,
                "n_answers": int(doc.get("n_test", 0)), "model": Path(run).name, "trained_on": None}
    ci, maj = doc.get("ci") or {}, doc.get("majority") or {}
    for metric in ("qwk", "t_acc"):
        card[metric] = {k: float(v) for k, v in (ci.get(metric) or {}).items() if k in ("value", "lo", "hi")}
    card["majority"] = {"grade": maj.get("grade"), "t_acc": maj.get("t_acc")}
    card["labels"] = describe_labels(doc.get("labels") or {})
    card["warnings"] = [str(w.get("message", w)) for w in doc.get("warnings") or [] if isinstance(w, dict)]
    return card


def card_line(card: dict[str, Any]) -> str:
    """The quality card in one line."""
    def iv(m: str) -> str:
        c = card.get(m) or {}
        return f"{c['value']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]" if {"value", "lo", "hi"} <= set(c) else "—"

    maj = card.get("majority") or {}
    trained = f", trained on all {card['trained_on']} labelled answers" if card.get("trained_on") else ""
    majority = (f"; majority class (grade {maj['grade']}) T-Acc {maj['t_acc']:.3f}"
                if maj.get("t_acc") is not None else "")
    return (f"quality card ({card['model']}{trained}): {card['source']}, n = {card['n_answers']}: QWK {iv('qwk')}, "
            f"T-Acc {iv('t_acc')}{majority}" + (f"; labels: {card['labels']}" if card.get("labels") else ""))


def output_paths(out: str | Path, queue: str | Path | None = None) -> tuple[Path, Path]:
    """The review queue (``queue``, default ``<out stem>.review.csv``) and the quality card (``<out stem>.card.json``)
    beside ``--out``."""
    o = Path(out)
    return (Path(queue) if queue is not None else o.with_name(f"{o.stem}.review.csv"),
            o.with_name(f"{o.stem}.card.json"))


def _is_card(path: Path) -> bool:
    try:
        return path.stat().st_size == 0 or "quality card" in json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def _uncertainty(model: reccbm.Model, meta: dict[str, Any], graded: pd.DataFrame) -> npt.NDArray[np.float64] | None:
    """Each answer's concept uncertainty (:func:`uncertainty_score`, σ²-weighted with LCEC); None without concepts."""
    keys, smin = list(meta.get("concept_keys") or []), int(meta["scale"][0])
    L = int(getattr(model.config, "num_levels", 0) or 0)
    cols = [[f"{k}_p{smin + j}" for j in range(L)] for k in keys]
    if not keys or not L or not all(c in graded.columns for cs in cols for c in cs):
        return None
    probs = np.stack([graded[cs].to_numpy(float) for cs in cols], axis=1)  # (N, K, L)
    sigma2 = reccbm.reliability(model)["sigma2"] if isinstance(model,
                                                               reccbm.RecCBM) and model.lcec is not None else None
    return uncertainty_score(np.nan_to_num(probs, nan=1.0 / L), sigma2)


def _write(df: pd.DataFrame, path: Path, what: str) -> Path:
    try:
        return write_table(df, path, for_people=True)
    except OSError as exc:  # a disk that filled while grading: the temporary file is removed, the path is as it was
        kept = f"{path} is as it was" if path.exists() else "nothing was written"
        raise DataError(f"cannot write {what} {path} ({exc.strerror or exc}); {kept}",
                        hint="free space, then grade again") from None


@dataclass(frozen=True)
class GradeOptions:
    """How ``grade`` grades and what it writes beside each grade: the command's grading options, built once."""

    batch_size: int = 64  # answers per forward pass
    int8: bool = False  # 8-bit weights (ONNX Runtime's dynamic quantisation)
    engine: str = "torch"  # torch or onnx
    overrides: str | dict[str, int] | None = None  # concept levels set by hand (KEY=LEVEL,...), the marks follow
    keep: list[str] | None = None  # item columns kept beside each grade (None: KEEP_COLUMNS)
    device: str = "auto"  # where the model grades (reccbm.device)
    review_budget: int | None = None  # answers in the review queue (None: every answer, ranked by risk)


def grade_file(
    run: str | Path, data: str | Path | None, out: str | Path, options: GradeOptions = GradeOptions(),
    progress: ProgressFn | None = None, reviewed: str | Path | None = None, *,
    queue: str | Path | None = None, gradebook: str | Path | None = None, sheet: str | None = None,
    columns: str | None = None, gradebook_out: str | Path | None = None,
) -> Graded:
    """``rubrictool grade``: read items (CSV/JSONL/Parquet; or the teacher's spreadsheet ``gradebook`` read as
    ``data import`` reads it, with ``sheet`` and ``columns``), grade them with ``run`` (:func:`grader_run`), hold every
    flagged answer (:func:`rubrictool.review_queue.hold_marks`), and write the graded table (the item columns ``keep``
    beside each grade, :func:`keep_columns`), the review queue of ``review_budget`` answers, the quality card and, with
    ``gradebook``, the gradebook back (:func:`rubrictool.gradebook.write_gradebook`). ``reviewed``: a table of reviewed
    answers (:func:`rubrictool.grade.read_review`) whose questions' other answers are shifted by them. ``options``: the
    engine, device and batch, the concept overrides, the kept columns and the review budget (:class:`GradeOptions`)."""
    from rubrictool.gradebook import gradebook_path, is_graded_book

    if data is None and gradebook is None:
        raise DataError("nothing to grade", hint="pass --items ITEMS (an item table) or --gradebook SPREADSHEET")
    if options.review_budget is not None and options.review_budget < 0:
        raise DataError(f"--review-budget {options.review_budget}: give the number of answers a teacher will read (0 "
                        "or more)")
    queue_path, card_path = output_paths(out, queue)
    book_out = gradebook_path(gradebook, gradebook_out) if gradebook is not None else None
    inputs = [data, run, reviewed, gradebook]
    check_output(out, inputs, "file", own=has_columns("grade_prob"), what="a graded table")
    check_output(queue_path, [*inputs, out], "file", own=has_columns("risk"), what="a review queue")
    check_output(card_path, [*inputs, out, queue_path], "file", own=_is_card, what="a quality card")
    # the teacher's own file is an input: never written, nor any file this command did not write
    if book_out is not None:
        check_output(book_out, [*inputs, out, queue_path, card_path], "file", own=is_graded_book, what="a gradebook")
    for path in (out, queue_path, card_path, *([book_out] if book_out else [])):
        writable_parent(path)
    with output_lock(out, "grade"):  # one writer per graded table
        return _grade_into(run, data, out, options, progress, reviewed, queue_path, card_path, gradebook, sheet,
                           columns,
                           book_out)


def _grade_into(
    run: str | Path, data: str | Path | None, out: str | Path, options: GradeOptions, progress: ProgressFn | None,
    reviewed: str | Path | None, queue_path: Path, card_path: Path,
    gradebook: str | Path | None, sheet: str | None, columns: str | None, book_out: Path | None,
) -> Graded:
    """:func:`grade_file`'s work, under the graded table's lock."""
    batch_size, int8, engine, device = options.batch_size, options.int8, options.engine, options.device
    from rubrictool.gradebook import read_gradebook, write_gradebook

    imported = read_gradebook(gradebook, sheet, columns) if gradebook is not None else None
    items = read_table(data) if data is not None else imported.items if imported is not None else None
    assert items is not None
    check_unique_ids(items, str(data if data is not None else gradebook))
    if imported is not None and data is not None:  # the gradebook's answers must be among those graded: said first
        graded_ids = set(items["id"].astype(str)) if "id" in items.columns else set()
        missing = [i for i in imported.items["id"].astype(str) if i not in graded_ids]
        if missing:
            raise DataError(f"--gradebook {gradebook}: {len(missing)} of its answers are not in --items {data}, e.g. "
                            f"{missing[0]!r}; nothing was graded", hint="pass the table `data import` made from it, "
                            "with the same --sheet and --columns, or leave --items out to grade the gradebook itself")
    model_run = grader_run(run)
    grader = load_grader(model_run, int8, engine)  # checks the run whole before anything of it is read
    card = quality_card(run)
    t0 = time.perf_counter()
    where = grading_device(device, int8, engine)
    review = None
    if reviewed is not None:
        trained = trained_questions(model_run)
        review = read_review(grader, reviewed, trained or set(), batch_size, where, items=items)
        note(progress, review_summary(review, items, trained is not None))
    graded = grade_loaded(grader, items, batch_size, progress, options.overrides, load_profile(model_run), device=where,
                          review=review)
    seconds = time.perf_counter() - t0
    meta = grader.rubric.as_meta()
    unc = _uncertainty(grader.model_, meta, graded)
    held = hold_marks(keep_columns(graded, items, options.keep))
    weak = weak_pass(held, list(meta.get("concept_keys") or []), (int(meta["scale"][0]), int(meta["scale"][1])),
                     load_grader_rubric(model_run).pass_mark)
    result = Graded(held, _write(held, Path(out), "the graded table"), seconds,
                    review_queue(held, unc, options.review_budget, weak=weak), queue_path, card, card_path)
    _write(result.queue, queue_path, "the review queue")
    atomic_write_text(card_path, json.dumps({"quality card": card, "graded": str(result.path)}, indent=1) + "\n")
    if imported is not None and book_out is not None:
        result.gradebook_path, result.summary, result.summary_path = write_gradebook(
            imported, held, load_grader_rubric(model_run), book_out)
    return result


def load_grader_rubric(run: str | Path) -> Rubric:
    """The rubric a run trained on (its copy in the run), for the gradebook's comments."""
    from rubrictool.train.runs import open_run

    return open_run(run).rubric
