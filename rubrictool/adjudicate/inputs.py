"""The adjudication inputs: review files (long or wide), LLM labels and expert resolutions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

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

__all__ = ["llm_labels", "read_resolutions", "read_reviews"]


def _split_spec(spec: str | Path) -> tuple[str | None, Path]:
    """``NAME=PATH`` → (NAME, PATH); a plain path → (None, path)."""
    text = str(spec)
    if "=" in text and not Path(text).exists():
        name, _, path = text.partition("=")
        if name.strip() and path.strip():
            return name.strip(), Path(path.strip())
    return None, Path(text)


def read_reviews(specs: Sequence[str | Path], source: str = "human") -> pd.DataFrame:
    """Read review files into one tidy ReviewTable (not yet validated against a rubric).

    A file with the columns ``item, reviewer, concept, level`` is long; a file with ``id`` (or
    ``item``) and one column per concept is one reviewer's wide export, the reviewer named by the
    file stem or by ``NAME=PATH``. ``source`` fills a missing ``source`` column.
    """
    if not specs:
        raise AdjudicateError("no reviews given", hint="pass --reviews FILE (long or wide), or --benchmark mohler")
    frames = []
    for spec in specs:
        name, path = _split_spec(spec)
        if not path.is_file():
            raise AdjudicateError(
                f"reviews file {path}: no such file; check the path (wide files: NAME=PATH)"
            )
        df = read_table(path)
        if len(df) == 0:
            raise AdjudicateError(f"{path}: the reviews file is empty")
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
                f"{path}: neither a long review table (item, reviewer, concept, level) nor a wide one "
                f"(id, <concept>...); found columns {', '.join(map(str, df.columns))}"
            )
        if "source" not in df.columns:
            df["source"] = source
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def llm_labels(path: str | Path, rubric: Rubric) -> pd.DataFrame:
    """The usable rows of a PredictionTable (``raw_ok`` with a level) as ``item, model, concept, level``,
    checked like reviews (one label per item, model and concept), to compare with the consensus."""
    df = read_predictions(path, rubric, valid_only=True)
    if len(df) == 0:
        raise AdjudicateError(f"{path}: no usable predictions (every row failed or has no level)")
    out = validate_reviews(df.assign(reviewer=df["model"], source="llm"), rubric, str(path))
    return out.assign(model=out["reviewer"])[PREDICTION_COLUMNS[:4]]


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
