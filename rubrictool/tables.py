"""The tables that cross stage boundaries, each stated once: columns, dtypes and one validating reader.

| table | columns | made by → read by |
|---|---|---|
| ItemTable | id, response, question?, reference?, context?, grade? | loaders → every stage |
| PredictionTable | item, model, concept, level, evidence, raw_ok | annotate → review push, adjudicate |
| ReviewTable | item, reviewer, concept, level, source (human/llm/model) | review pull / files / prediction tables →
  adjudicate |
| AdjudicatedTable | ItemTable columns, one column per concept key, provenance | adjudicate → train |

Each is checked against the rubric where it enters a stage: an unknown concept, a level out of
range or a missing id is an error naming the file and row (:class:`~rubrictool.errors.DataError`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.errors import DataError
from rubrictool.io import read_table
from rubrictool.rubric import Rubric

__all__ = [
    "ADJUDICATED_PROVENANCE",
    "ITEM_COLUMNS",
    "LLM_PASSES_NOTE",
    "PREDICTION_COLUMNS",
    "REQUIRED_ITEM_COLUMNS",
    "REVIEW_COLUMNS",
    "REVIEW_SOURCES",
    "adjudicated_columns",
    "check_ids",
    "levels_from_labels",
    "read_items",
    "read_levels",
    "read_predictions",
    "read_wide_labels",
    "validate_adjudicated",
    "validate_items",
    "validate_reviews",
]

IntArray = npt.NDArray[np.int64]

# -- ItemTable: one row per student response ------------------------------------------------------------
ITEM_COLUMNS = ["id", "question", "response", "reference", "context", "grade"]
REQUIRED_ITEM_COLUMNS = ["id", "response"]

# -- PredictionTable: one row per (item, LLM model, concept); raw_ok false marks a failed reply ------------
PREDICTION_COLUMNS = ["item", "model", "concept", "level", "evidence", "raw_ok"]
_PREDICTION_REQUIRED = ["item", "model", "concept", "level"]
_TRUE = {"true", "1", "1.0", "yes"}

# -- ReviewTable: one row per (item, reviewer, concept), plus source ---------------------------------------
REVIEW_COLUMNS = ["item", "reviewer", "concept", "level"]
REVIEW_SOURCES = ("human", "llm", "model")
"""Who gave a label: a person (``human``), an LLM annotator (``llm``) or a trained grader (``model``)."""

# -- AdjudicatedTable: ItemTable columns, one integer column per concept key, then these -----------------
ADJUDICATED_PROVENANCE = [
    "n_reviewers", "unanimous", "n_flagged", "flagged_concepts", "n_resolved", "resolved_concepts", "method",
    "label_source", "unreviewed_concepts",
]
"""``label_source``: who gave the item's labels (human, llm, model or mixed); ``unreviewed_concepts``: the
concepts no reviewer labelled, taken from the consensus of the pre-annotations (``adjudicate --pre-annotations``)."""

LLM_PASSES_NOTE = (
    "The Mohler concept labels (<data dir>/mohler-concepts) come from three independent LLM annotation passes "
    "(A, B, C) standing in for three reviewers; they are real and independently made but NOT expert-validated."
)
"""Said wherever results built on the Mohler concept-label passes are reported."""


def adjudicated_columns(rubric: Rubric) -> list[str]:
    """The leading columns of an AdjudicatedTable for ``rubric`` (extra item columns may follow)."""
    return ITEM_COLUMNS + list(rubric.keys) + ADJUDICATED_PROVENANCE


# == ItemTable ===============================================================================================


def _row(df: pd.DataFrame, pos: int) -> str:
    return f"row {pos + 1} (id {df['id'].iloc[pos]})"


def _show(v: Any) -> str:
    """A cell as a user typed it: 'missing' for NaN/None, 3 for 3.0, repr otherwise."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "missing"
    if isinstance(v, (int, float, np.integer, np.floating)):
        return str(int(v)) if float(v).is_integer() else str(float(v))
    return repr(v)


def check_ids(df: pd.DataFrame, source: str, fix: str = "give every answer its own id",
              empty_fix: str | None = None) -> None:
    """Refuse a table with an empty ``id`` or an ``id`` used twice, naming the rows as a spreadsheet numbers
    them (the header being line 1; a JSONL or Parquet file, which has none, from line 1) or the ids (a grade,
    a label must belong to one answer). Every table read with ids (grade's items, train's adjudicated table)
    passes here."""
    if "id" not in df.columns:
        return
    first = 1 if Path(source).suffix.lower() in (".jsonl", ".json", ".parquet", ".pq") else 2
    header = "" if first == 1 else " (the header is line 1)"
    blank = (df["id"].isna() | df["id"].astype(str).str.strip().eq("")).to_numpy()
    if blank.any():
        rows = [int(i) + first for i in np.flatnonzero(blank)]
        shown = ", ".join(map(str, rows[:5])) + (f" (+{len(rows) - 5} more)" if len(rows) > 5 else "")
        raise DataError(f"{source}: {len(rows)} answer(s) without an id: line {shown}{header}",
                        hint=empty_fix or fix)
    ids = df["id"].astype(str).reset_index(drop=True)
    dup = ids[ids.duplicated(keep=False)]
    if len(dup):
        names = list(dict.fromkeys(dup))
        more = f" (+{len(names) - 5} more)" if len(names) > 5 else ""
        shown = ", ".join(repr(i) for i in names[:5]) + more
        lines = [int(i) + first for i in np.flatnonzero((ids == names[0]).to_numpy())]
        on = f"{', '.join(map(str, lines[:-1]))} and {lines[-1]}{header.replace(' (', '; ')[:-1]}"
        raise DataError(f"{source}: {len(names)} id(s) used more than once: {shown} ({names[0]!r} on lines {on})",
                        hint=fix)


def validate_adjudicated(table: pd.DataFrame, rubric: Rubric, need_concepts: bool = True) -> pd.DataFrame:
    """The AdjudicatedTable's one validating reader: check a table against the rubric; return a copy with 0-based
    ``_c_<key>`` concept columns (level − scale.min) and ``_y`` (grade − grade.min). Errors name the row/column."""
    for col in ("id", "response", "grade"):
        if col not in table.columns:
            raise DataError(f"the item table has no {col!r} column (columns: {', '.join(map(str, table.columns))})")
    df = table.reset_index(drop=True).copy()
    df["id"] = df["id"].astype(str)
    dup = df["id"].duplicated()
    if dup.any():
        raise DataError(f"{_row(df, int(np.flatnonzero(dup)[0]))}: duplicate id")
    for col in ("question", "reference", "context", "response"):
        df[col] = df[col].fillna("").astype(str) if col in df.columns else ""
    if need_concepts:
        missing = [k for k in rubric.keys if k not in df.columns]
        if missing:
            known = set(rubric.keys) | {"id", "question", "response", "reference", "context", "grade"}
            extra = [str(c) for c in df.columns if c not in known]
            raise DataError(
                f"no column for concept(s) {', '.join(missing)} of rubric {rubric.name!r}; unknown column(s): "
                f"{', '.join(extra) or 'none'} — is this the right rubric (concept keys {', '.join(rubric.keys)})?"
            )
        lo, hi = rubric.scale.min, rubric.scale.max
        for k in rubric.keys:
            v = pd.to_numeric(df[k], errors="coerce")
            bad = v.isna() | (v != v.round()) | (v < lo) | (v > hi)
            if bad.any():
                pos = int(np.flatnonzero(bad.to_numpy())[0])
                raise DataError(
                    f"{_row(df, pos)}: concept {k} = {_show(df[k].iloc[pos])} is not a level of the rubric ({lo}..{hi})"
                )
            df[f"_c_{k}"] = v.astype(np.int64) - lo
    g = pd.to_numeric(df["grade"], errors="coerce")
    gmin, gmax = rubric.grade.min, rubric.grade.max
    bad = g.isna() | (g != g.round()) | (g < gmin) | (g > gmax)
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{_row(df, pos)}: grade {_show(df['grade'].iloc[pos])} is outside the rubric's grade scale "
            f"{gmin}..{gmax} (integers)"
        )
    df["_y"] = g.astype(np.int64) - gmin
    return df


def validate_items(df: pd.DataFrame, source: str = "items") -> pd.DataFrame:
    """Check an ItemTable and return it with every optional column present.

    Errors name the file and the first offending row (1-based data row, header excluded).
    """
    missing = [c for c in REQUIRED_ITEM_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(
            f"{source}: missing column(s) {', '.join(missing)}; an item table needs id and response "
            f"(optional: question, reference, context, grade); found {', '.join(map(str, df.columns)) or 'none'}"
        )
    df = df.copy()
    ids = df["id"]
    if ids.isna().any():
        row = int(np.flatnonzero(ids.isna().to_numpy())[0]) + 1
        raise DataError(f"{source}: row {row}: empty id; every item needs a unique id")
    df["id"] = ids.astype(str)
    dup = df["id"].duplicated(keep=False)
    if dup.any():
        first = df.loc[dup, "id"].iloc[0]
        rows = [int(i) + 1 for i in np.flatnonzero((df["id"] == first).to_numpy())]
        raise DataError(
            f"{source}: duplicate id {first!r} at rows {rows} ({int(df['id'].duplicated().sum())} duplicates "
            "in all); ids must be unique"
        )
    resp = df["response"]
    empty = resp.isna() | resp.astype(str).str.strip().eq("")
    if empty.any():
        bad = df.loc[empty, "id"].tolist()
        row = int(np.flatnonzero(empty.to_numpy())[0]) + 1
        shown = ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise DataError(
            f"{source}: row {row}: {len(bad)} item(s) with an empty response ({shown}); "
            "fill them in or remove them explicitly — nothing is dropped silently"
        )
    for col in ITEM_COLUMNS:
        if col not in df.columns:
            df[col] = None
    if df["grade"].notna().any():
        g = pd.to_numeric(df["grade"], errors="coerce")
        bad_g = g.isna() & df["grade"].notna()
        if bad_g.any():
            row = int(np.flatnonzero(bad_g.to_numpy())[0]) + 1
            raise DataError(f"{source}: row {row}: grade {df['grade'][bad_g].iloc[0]!r} is not a number")
        df["grade"] = g
    return df


def read_items(path: str | Path) -> pd.DataFrame:
    """Read and validate an ItemTable from CSV, JSONL or Parquet."""
    return validate_items(read_table(path), str(path))


# == ReviewTable =============================================================================================


def read_wide_labels(path: str | Path, reviewer: str | None = None, source: str = "human") -> pd.DataFrame:
    """One reviewer's wide export (``{"id": ..., "FC": 3, ...}`` per row) → tidy ``item, reviewer, concept, level``."""
    p = Path(path)
    df = read_table(p)
    if "id" not in df.columns and "item" not in df.columns:
        raise DataError(f"{p}: no 'id' column; a wide label file has one row per item: id, <concept>...")
    key = "id" if "id" in df.columns else "item"
    concept_cols = [c for c in df.columns if c not in {key, "reviewer", "source", "model"}]
    long = df.melt(id_vars=[key], value_vars=concept_cols, var_name="concept", value_name="level")
    long = long.rename(columns={key: "item"}).dropna(subset=["level"])
    long["item"] = long["item"].astype(str)
    long["reviewer"] = reviewer or p.stem
    long["source"] = source
    return long[["item", "reviewer", "concept", "level", "source"]].reset_index(drop=True)


def _first_bad(df: pd.DataFrame, mask: pd.Series, what: str | Callable[[pd.Series], str]) -> str:
    """``<file:row>: <what> (<n> such row(s))`` for the first row where ``mask`` holds."""
    row = df.loc[mask].iloc[0]
    where = row["_where"] if "_where" in df.columns else f"row {int(np.flatnonzero(mask.to_numpy())[0]) + 1}"
    return f"{where}: {what(row) if callable(what) else what} ({int(mask.sum())} such row(s))"


def _shown(v: Any) -> str:
    """A cell value as a user wrote it: 7, 2.5, 'high' (no numpy reprs)."""
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return repr(v) if isinstance(v, str) else str(v)


def validate_reviews(reviews: pd.DataFrame, rubric: Rubric, source: str = "reviews") -> pd.DataFrame:
    """Check a ReviewTable against the rubric; return ``item, reviewer, concept, level, source[, model]``.

    Errors name the file and row (or item) of the first offence: missing columns, empty input,
    empty item/reviewer, unknown concept, non-integer or out-of-range level, a reviewer reviewing
    the same item and concept twice, a source other than human/llm/model.
    """
    missing = [c for c in REVIEW_COLUMNS if c not in reviews.columns]
    if missing:
        raise DataError(
            f"{source}: missing column(s) {', '.join(missing)}; a review table needs item, reviewer, concept, level "
            f"(found {', '.join(map(str, reviews.columns)) or 'none'})"
        )
    if len(reviews) == 0:
        raise DataError(f"{source}: no reviews (empty input)")
    df = reviews.copy()
    codes: dict[str, IntArray] = {}
    for col in ("item", "reviewer", "concept"):
        # check the distinct values once, not every row: factorize, then test the uniques; the
        # column comes back categorical (strings, categories sorted), so later stages reuse the codes
        code, uniques = pd.factorize(df[col], sort=True, use_na_sentinel=True)
        text = pd.Index(uniques).astype(str)
        blank = text.str.strip().isin([""])
        empty = pd.Series((code < 0) | blank[np.maximum(code, 0)], index=df.index)
        if empty.any():
            raise DataError(
                _first_bad(df, empty, f"empty {col}; every review needs item, reviewer and concept")
            )
        if text.has_duplicates:  # e.g. 1 and "1" both become "1"
            code, text = pd.factorize(text.to_numpy(dtype=object)[code], sort=True)
        df[col] = pd.Categorical.from_codes(code, categories=pd.Index(text, dtype=object))
        codes[col] = code.astype(np.int64)
    known = pd.Series(pd.unique(df["concept"]), dtype=object)
    unknown_values = set(known[~known.isin(rubric.keys)])
    unknown = df["concept"].isin(unknown_values) if unknown_values else pd.Series(False, index=df.index)
    if unknown.any():
        raise DataError(
            _first_bad(df, unknown, lambda r: f"unknown concept {r['concept']!r}")
            + f"; rubric {rubric.name} has {', '.join(rubric.keys)}"
        )
    lv = pd.to_numeric(df["level"], errors="coerce")
    lo, hi = rubric.scale.min, rubric.scale.max
    bad = lv.isna() | (lv != lv.round()) | (lv < lo) | (lv > hi)
    if bad.any():
        raise DataError(
            _first_bad(
                df,
                bad,
                lambda r: f"level {_shown(r['level'])} for concept {r['concept']} of item {r['item']}",
            )
            + f"; levels must be integers {lo}..{hi} (rubric {rubric.name})"
        )
    df["level"] = lv.astype(np.int64)
    if "source" not in df.columns:
        df["source"] = "human"
    src_code, src_uniques = pd.factorize(df["source"].fillna("human"))
    lowered = pd.Index(src_uniques).astype(str).str.lower()
    src_code, lowered = (
        pd.factorize(lowered.to_numpy(dtype=object)[src_code])
        if lowered.has_duplicates
        else (src_code, lowered)
    )
    df["source"] = pd.Categorical.from_codes(src_code, categories=pd.Index(lowered, dtype=object))
    bad_src = ~df["source"].isin(list(REVIEW_SOURCES))
    if bad_src.any():
        raise DataError(_first_bad(df, bad_src, lambda r: f"source {r['source']!r}; use {', '.join(REVIEW_SOURCES)}"))
    ci, cr, ck = codes["item"], codes["reviewer"], codes["concept"]
    flat = (ci * (cr.max() + 1) + cr) * (ck.max() + 1) + ck
    dup = pd.Series(pd.Series(flat).duplicated(keep="first").to_numpy(), index=df.index)
    if dup.any():
        raise DataError(
            _first_bad(
                df,
                dup,
                lambda r: f"reviewer {r['reviewer']!r} reviewed item {r['item']} / {r['concept']} twice",
            )
            + "; keep one review per reviewer, item and concept (two files with the same reviewer name?)"
        )
    cols = ["item", "reviewer", "concept", "level", "source"] + (["model"] if "model" in df.columns else [])
    return df[cols].reset_index(drop=True)


# == PredictionTable =========================================================================================


def _flag(v: Any) -> bool:
    return v is True or str(v).strip().lower() in _TRUE


def read_predictions(path: str | Path, rubric: Rubric | None = None, valid_only: bool = False) -> pd.DataFrame:
    """Read a PredictionTable (as ``rubrictool annotate`` writes it, usage columns kept).

    ``evidence`` and ``raw_ok`` may be missing (then empty and true); ``raw_ok`` counts as true when it
    reads true, 1 or yes. With a rubric, every concept must be one of its keys, and every usable row
    (``raw_ok`` with a level) must have a level on its scale and be the only one for its item, model
    and concept; errors name the file and the data row. ``valid_only`` keeps only the usable rows.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"predictions file {p}: no such file; check the path")
    df = read_table(p)
    missing = [c for c in _PREDICTION_REQUIRED if c not in df.columns]
    if missing:
        raise DataError(
            f"{p}: not a prediction table: missing column(s) {', '.join(missing)}; a PredictionTable has "
            f"item, model, concept, level (+ evidence, raw_ok), as rubrictool annotate writes it; found "
            f"{', '.join(map(str, df.columns)) or 'none'}"
        )
    df["item"] = df["item"].astype(str)
    df["model"] = df["model"].astype(str)
    df["level"] = pd.to_numeric(df["level"], errors="coerce").astype("Int64")
    if "evidence" not in df.columns:
        df["evidence"] = ""
    df["raw_ok"] = df["raw_ok"].map(_flag).astype(bool) if "raw_ok" in df.columns else True
    usable = df["raw_ok"] & df["level"].notna()
    if rubric is not None:
        concepts: list[Any] = df["concept"].tolist()
        lvls: list[Any] = df["level"].tolist()
        for i, (concept, lv, ok) in enumerate(zip(concepts, lvls, usable.tolist()), 1):
            if concept not in rubric.keys:
                raise DataError(f"{p}: row {i}: concept {concept!r} is not in rubric {rubric.name} "
                                f"({', '.join(rubric.keys)})")
            if ok and int(lv) not in rubric.scale.values:
                raise DataError(f"{p}: row {i}: level {lv} is outside {rubric.scale.min}..{rubric.scale.max}")
        dup = df[usable].duplicated(["item", "model", "concept"], keep=False)
        if dup.any():
            row = df[usable][dup].iloc[0]
            raise DataError(
                f"{p}: item {row['item']} has several {row['concept']} labels from model {row['model']}; "
                "keep one row per item, model and concept"
            )
    if valid_only:
        df = df[usable].reset_index(drop=True)
    rest = [c for c in df.columns if c not in PREDICTION_COLUMNS]
    return df[PREDICTION_COLUMNS + rest]


def levels_from_labels(labels: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """A PredictionTable (item, model, concept, level[, raw_ok]) as one row per item and one column per concept:
    the median level over the models (the lower of two middle levels), usable rows only."""
    df = labels
    if "raw_ok" in df.columns:
        df = df[df["raw_ok"].astype(str).str.lower().isin(["true", "1", "yes"])]
    df = df.assign(level=pd.to_numeric(df["level"], errors="coerce")).dropna(subset=["level"])
    unknown = sorted(set(df["concept"].astype(str)) - set(rubric.keys))
    if unknown:
        raise DataError(f"the labels name concept(s) {', '.join(unknown)} that rubric {rubric.name} does not have")
    med = df.groupby(["item", "concept"])["level"].agg(lambda s: float(np.sort(s.to_numpy())[(len(s) - 1) // 2]))
    wide = med.unstack("concept").reindex(columns=rubric.keys)
    wide.index = wide.index.astype(str)
    return wide.rename_axis("id").reset_index().rename_axis(None, axis=1)


def read_levels(path: str | Path, rubric: Rubric) -> tuple[pd.DataFrame, str]:
    """Concept levels of answers from a file, as (table with ``id``, one column per concept on the rubric's
    scale, ``grade`` when the file has gold grades; what the file was). Reads a PredictionTable (LLM labels),
    an adjudicated or item table with one column per concept, or a run's ``test_predictions.csv`` /
    ``pooled_predictions.csv`` (``<KEY>_level`` columns; their ``grade`` is the model's, ``grade_true`` the gold)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such file; pass LLM labels (annotate's predictions), an adjudicated table or a run's "
                        "test_predictions.csv")
    df = read_table(p)
    if {"item", "concept", "level"} <= set(df.columns):
        out, kind = levels_from_labels(df, rubric), "LLM labels (median over models)"
    elif all(f"{k}_level" in df.columns for k in rubric.keys):
        out = df[["id"]].assign(**{k: df[f"{k}_level"] for k in rubric.keys})
        if "grade_true" in df.columns:
            out["grade"] = df["grade_true"]
        if "grade" in df.columns:
            out["model_grade"] = df["grade"]
        kind = "a run's predicted levels"
    elif all(k in df.columns for k in rubric.keys):
        cols = ["id", *rubric.keys] + (["grade"] if "grade" in df.columns else [])
        out, kind = df[cols].copy(), "concept levels (one column per concept)"
    else:
        missing = [k for k in rubric.keys if k not in df.columns]
        raise DataError(f"{p}: found neither a PredictionTable (item, concept, level), nor a column per concept "
                        f"(missing {', '.join(missing)}), nor <KEY>_level columns of a run")
    if "id" not in out.columns:
        raise DataError(f"{p}: no id column")
    out["id"] = out["id"].astype(str)
    for k in rubric.keys:
        out[k] = pd.to_numeric(out[k], errors="coerce")
        bad = out[k].notna() & ~out[k].isin(rubric.scale.values)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(f"{p}: answer {out['id'].iloc[row]}: {k} = {out[k].iloc[row]:g} is not a level of "
                            f"{rubric.scale.min}..{rubric.scale.max}")
    if "grade" in out.columns:
        out["grade"] = pd.to_numeric(out["grade"], errors="coerce")
    return out, kind
