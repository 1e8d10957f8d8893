"""The adjudication inputs: review files (long, wide or prediction tables), LLM labels, pre-annotations and
expert resolutions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.errors import AdjudicateError
from rubrictool.io import read_table
from rubrictool.rubric import Rubric
from rubrictool.tables import (
    PREDICTION_COLUMNS,
    REVIEW_COLUMNS,
    read_predictions,
    read_wide_labels,
    validate_reviews,
)

__all__ = ["ReviewInputs", "llm_labels", "pre_annotation_labels", "read_resolutions", "read_review_files",
           "read_reviews"]


def _split_spec(spec: str | Path) -> tuple[str | None, Path]:
    """``NAME=PATH`` → (NAME, PATH); a plain path → (None, path)."""
    text = str(spec)
    if "=" in text and not Path(text).exists():
        name, _, path = text.partition("=")
        if name.strip() and path.strip():
            return name.strip(), Path(path.strip())
    return None, Path(text)


@dataclass
class ReviewInputs:
    """The review files read into one ReviewTable, and what was left out of the prediction tables among them."""

    table: pd.DataFrame
    """``item, reviewer, concept, level, source`` (+ ``_where``; not yet validated against a rubric)."""
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per model of a prediction table read as reviewers: failed or unparsed labels left out
    (``labels``) and the items they belong to (``items``)."""
    panels: list[str] = field(default_factory=list)
    """The files that were prediction tables (each model a reviewer)."""


def _is_prediction_table(df: pd.DataFrame) -> bool:
    return {"item", "model", "concept", "level"} <= set(df.columns) and "reviewer" not in df.columns


def _panel(path: Path, skipped: dict[str, dict[str, int]]) -> pd.DataFrame:
    """A PredictionTable as reviews: each model is a reviewer (source ``llm``, or the table's own ``source``,
    e.g. ``model`` for the trained grader's rows); rows that failed (``raw_ok`` false) or have no level are
    left out and counted per model in ``skipped``."""
    df = read_predictions(path)
    bad = ~df["raw_ok"] | df["level"].isna()
    for model, g in df.loc[bad].groupby("model", sort=True):
        s = skipped.setdefault(str(model), {"labels": 0, "items": 0})
        s["labels"] += len(g)
        s["items"] += int(g["item"].nunique())
    ok = df.loc[~bad].copy()
    for model in pd.unique(df["model"]):
        skipped.setdefault(str(model), {"labels": 0, "items": 0})
    if len(ok) == 0:
        raise AdjudicateError(f"{path}: no usable predictions (every row failed or has no level)")
    if "source" not in ok.columns:
        ok["source"] = "llm"
    ok["reviewer"] = ok["model"]
    ok["_where"] = [f"{path}:row {i + 2 if path.suffix == '.csv' else i + 1}" for i in ok.index]
    return ok[["item", "reviewer", "concept", "level", "source", "model", "_where"]].reset_index(drop=True)


def read_review_files(specs: Sequence[str | Path], source: str = "human") -> ReviewInputs:
    """Read review files into one tidy ReviewTable (not yet validated against a rubric).

    A file with the columns ``item, reviewer, concept, level`` is long; a file with ``id`` (or
    ``item``) and one column per concept is one reviewer's wide export, the reviewer named by the
    file stem or by ``NAME=PATH``; a PredictionTable (``item, model, concept, level[, raw_ok]``, as
    ``rubrictool annotate`` writes it) is a panel: each model is a reviewer with source ``llm``, its
    failed replies skipped and counted. ``source`` fills a missing ``source`` column.
    """
    if not specs:
        raise AdjudicateError("no reviews given", hint="pass --reviews FILE (long or wide), or --benchmark mohler")
    frames = []
    skipped: dict[str, dict[str, int]] = {}
    panels: list[str] = []
    for spec in specs:
        name, path = _split_spec(spec)
        if not path.is_file():
            raise AdjudicateError(
                f"reviews file {path}: no such file; check the path (wide files: NAME=PATH)"
            )
        df = read_table(path)
        if len(df) == 0:
            raise AdjudicateError(f"{path}: the reviews file is empty")
        if _is_prediction_table(df):
            if name is not None:
                raise AdjudicateError(
                    f"{spec}: NAME=PATH names the reviewer of a WIDE file; {path} is a prediction table "
                    "(each model is a reviewer)"
                )
            frames.append(_panel(path, skipped))
            panels.append(str(path))
            continue
        if {"item", "reviewer", "concept", "level"} <= set(df.columns):
            if name is not None:
                raise AdjudicateError(
                    f"{spec}: NAME=PATH names the reviewer of a WIDE file; {path} is long (has a reviewer column)"
                )
            df = df.copy()
            df["_where"] = [f"{path}:row {i + 2 if path.suffix == '.csv' else i + 1}" for i in range(len(df))]
        elif "id" in df.columns or "item" in df.columns:
            if "concept" in df.columns or "level" in df.columns:
                missing = [c for c in REVIEW_COLUMNS if c not in df.columns]
                raise AdjudicateError(
                    f"{path}: missing column(s) {', '.join(missing)}; a long review table needs item, reviewer, "
                    f"concept, level (found {', '.join(map(str, df.columns))})"
                )
            df = read_wide_labels(path, reviewer=name or path.stem, source=source)
            df["_where"] = [f"{path}:item {i}" for i in df["item"]]
        else:
            raise AdjudicateError(
                f"{path}: neither a long review table (item, reviewer, concept, level), a wide one "
                f"(id, <concept>...) nor a prediction table (item, model, concept, level); found columns "
                f"{', '.join(map(str, df.columns))}"
            )
        if "source" not in df.columns:
            df["source"] = source
        frames.append(df)
    return ReviewInputs(pd.concat(frames, ignore_index=True), skipped, panels)


def read_reviews(specs: Sequence[str | Path], source: str = "human") -> pd.DataFrame:
    """:func:`read_review_files`, the table only."""
    return read_review_files(specs, source).table


def llm_labels(path: str | Path, rubric: Rubric) -> pd.DataFrame:
    """The usable rows of a PredictionTable (``raw_ok`` with a level) as ``item, model, concept, level``,
    checked like reviews (one label per item, model and concept), to compare with the consensus."""
    df = read_predictions(path, rubric, valid_only=True)
    if len(df) == 0:
        raise AdjudicateError(f"{path}: no usable predictions (every row failed or has no level)")
    out = validate_reviews(df.assign(reviewer=df["model"], source="llm"), rubric, str(path))
    return out.assign(model=out["reviewer"])[PREDICTION_COLUMNS[:4]]


def pre_annotation_labels(paths: Sequence[str | Path], rubric: Rubric) -> pd.DataFrame:
    """The usable labels of one or more PredictionTables (LLM annotations, the grader's predictions) as
    ``item, model, concept, level, source``: the pre-annotations whose consensus labels the items no
    reviewer saw. ``source`` is the table's own column when it has one (``model`` for the grader), else ``llm``."""
    frames = []
    for path in paths:
        df = read_predictions(path, rubric, valid_only=True)
        if len(df) == 0:
            raise AdjudicateError(f"{path}: no usable predictions (every row failed or has no level)")
        src: Any = df["source"] if "source" in df.columns else "llm"
        frames.append(df[PREDICTION_COLUMNS[:4]].assign(source=src))
    out = pd.concat(frames, ignore_index=True)
    dup = out.duplicated(["item", "model", "concept"])
    if dup.any():
        row = out.loc[dup].iloc[0]
        raise AdjudicateError(f"pre-annotations: model {row['model']} labels item {row['item']} / {row['concept']} "
                              "in two files; pass each model's predictions once")
    bad = ~out["source"].isin(["llm", "model"])
    if bad.any():
        raise AdjudicateError(f"pre-annotations: source {out.loc[bad, 'source'].iloc[0]!r}; a prediction table's "
                              "source is llm or model")
    return out


def read_resolutions(path: str | Path, rubric: Rubric) -> pd.DataFrame:
    """Expert decisions: ``item, concept, level[, note, decided_by]``.

    A filled-in discussion queue works too: its rows with a value in ``resolution`` are read, the
    ``resolution`` column taken as the level.
    """
    p = Path(path)
    if not p.is_file():
        raise AdjudicateError(f"resolutions file {p}: no such file; check the path")
    df = read_table(p)
    if "resolution" in df.columns:
        df = df.loc[df["resolution"].notna() & df["resolution"].astype(str).str.strip().ne("")].copy()
        df["level"] = df["resolution"]
    missing = [c for c in ("item", "concept", "level") if c not in df.columns]
    if missing:
        raise AdjudicateError(
            f"{p}: missing column(s) {', '.join(missing)}; a resolutions file needs item, concept, level "
            f"(+ note, decided_by); found {', '.join(map(str, df.columns))}"
        )
    df = df.copy()
    df["_where"] = [f"{p}:row {i + 2 if p.suffix == '.csv' else i + 1}" for i in df.index]
    checked = validate_reviews(df.assign(reviewer="resolution"), rubric, str(p))
    out = checked[["item", "concept", "level"]].copy()
    for col in ("note", "decided_by"):
        vals = df[col] if col in df.columns else pd.Series([None] * len(df))
        out[col] = [None if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v) for v in vals]
    return out
