"""Minimal pairs: a right and a wrong answer to one question that differ by one word, read from a JSONL file and
matched to the questions of a run's table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rubrictool.errors import DataError
from rubrictool.io import jsonl_objects

__all__ = ["PAIR_FIELDS", "pair_questions", "read_pairs"]

# ---------------------------------------------------------------------------- minimal pairs

PAIR_FIELDS = ("question_id", "right", "wrong", "changed", "note", "provenance")


def read_pairs(path: str | Path) -> pd.DataFrame:
    """Minimal pairs from a JSONL file, one object a line with ``question_id``, ``right``, ``wrong``, ``changed``,
    ``note`` and ``provenance``; a bad line is one error naming the file, the line and the field."""
    rows = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the minimal pairs ({exc.__class__.__name__})") from None
    for n, obj in jsonl_objects(text.splitlines(), path):
        for f in PAIR_FIELDS:
            if not isinstance(obj.get(f), str) or (f in ("question_id", "right", "wrong") and not obj[f].strip()):
                raise DataError(f"{path}: line {n}: field {f!r} is missing or not text; every pair needs "
                                f"{', '.join(PAIR_FIELDS)}")
        rows.append({f: obj[f] for f in PAIR_FIELDS} | {"line": n})
    if not rows:
        raise DataError(f"{path}: no minimal pairs in it")
    return pd.DataFrame(rows)


def pair_questions(pairs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The pairs whose question the table holds, with its question text and reference. A pair's ``question_id`` is
    found as the table's ``question_id`` text, else as the prefix of its answers' ids (``11.10`` of ``11.10.3``: a
    table read back may hold ``11.10`` as the number 11.1), else as the question text itself."""
    t = table.assign(id=table["id"].astype(str), question=table["question"].fillna("").astype(str),
                     reference=table["reference"].fillna("").astype(str) if "reference" in table else "")
    text_ids = "question_id" in t.columns and not pd.api.types.is_numeric_dtype(t["question_id"])
    found: dict[str, tuple[str, str]] = {}
    for q in dict.fromkeys(pairs["question_id"].astype(str)):
        rows = t[t["question_id"].astype(str) == q] if text_ids else t.iloc[:0]
        for match in (t["id"].str.startswith(q + "."), t["question"] == q):
            rows = rows if len(rows) else t[match]
        if len(rows):
            found[q] = (str(rows["question"].iloc[0]), str(rows["reference"].iloc[0]))
    known = pairs[pairs["question_id"].astype(str).isin(found)].copy()
    known["question"] = [found[str(q)][0] for q in known["question_id"]]
    known["reference"] = [found[str(q)][1] for q in known["question_id"]]
    return known.reset_index(drop=True)
