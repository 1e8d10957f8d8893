"""Summaries of an item table (``rubrictool data show``): counts, grade histogram, response length."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BREAKDOWN_COLUMNS", "describe_items"]

BREAKDOWN_COLUMNS = ("dataset", "split", "prompt_name")
"""Columns whose value counts the summary lists when a table has them (MOCHA's constituent datasets and
original splits, ASAP 2.0's prompts)."""


def describe_items(items: pd.DataFrame) -> dict[str, Any]:
    """Counts, grade histogram, mean response length and (when present) the two graders' agreement.

    Grader agreement uses ``grade_me`` and ``grade_other`` (both on the benchmark's 0..5 scale):
    the share of answers where both gave exactly the same score, Pearson's r and the mean absolute
    difference.
    """
    qcol = "question_id" if "question_id" in items.columns else "question"
    words = items["response"].astype(str).map(lambda t: len(t.split()))
    out: dict[str, Any] = {
        "n_items": len(items),
        "n_questions": int(items[qcol].nunique()) if qcol in items.columns else None,
        "mean_response_words": round(float(words.mean()), 2) if len(items) else 0.0,
        "median_response_words": float(words.median()) if len(items) else 0.0,
        "max_response_words": int(words.max()) if len(items) else 0,
        "grade_histogram": {},
        "graders": None,
    }
    if "grade" in items.columns and items["grade"].notna().any():
        counts = items["grade"].dropna().astype(int).value_counts().sort_index()
        out["grade_histogram"] = {int(k): int(v) for k, v in zip(counts.index.to_list(), counts.to_list())}
        out["mean_grade"] = round(float(items["grade"].mean()), 3)
    if {"grade_me", "grade_other"} <= set(items.columns):
        pair = items[["grade_me", "grade_other"]].dropna().astype(float)
        a, b = pair["grade_me"].to_numpy(), pair["grade_other"].to_numpy()
        r = float(np.corrcoef(a, b)[0, 1]) if len(a) > 1 and a.std() > 0 and b.std() > 0 else None
        out["graders"] = {
            "n": len(a),
            "exact_agreement": round(float(np.mean(a == b)), 4),
            "within_one_point": round(float(np.mean(np.abs(a - b) <= 1.0)), 4),
            "pearson_r": round(r, 4) if r is not None else None,  # undefined when a grader is constant
            "mean_abs_diff": round(float(np.mean(np.abs(a - b))), 4),
        }
    by = {c: items[c].astype(str).value_counts().sort_index().to_dict()
          for c in BREAKDOWN_COLUMNS if c in items.columns}
    if by:
        out["by"] = {c: {str(k): int(v) for k, v in counts.items()} for c, counts in by.items()}
    return out
