"""Ids for a course's answers that stay the same across imports: question tags, ids as text, made ids."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["made_ids", "question_tags", "text_ids"]


def question_tags(q: pd.Series) -> pd.Series:
    """A short id per question for made ids, the same in every file that holds the question: the question itself
    when it is a short token (``Q3``, ``1.2``; a number gets a ``q``: ``q1``), else ``q`` and six hex digits of its
    text (``q3fa2c1``: spaces and case ignored)."""
    def tag(u: str) -> str:
        if re.fullmatch(r"[A-Za-z0-9._-]{1,24}", u):
            return f"q{u}" if re.fullmatch(r"[0-9][0-9._-]*", u) else u
        return "q" + hashlib.sha1(" ".join(u.lower().split()).encode("utf-8")).hexdigest()[:6]

    return q.map({u: tag(u) for u in dict.fromkeys(q.tolist())})


def text_ids(col: pd.Series) -> pd.Series:
    """A column of ids as text (a whole float from a spreadsheet read as ``101``, not ``101.0``); None when empty."""
    def one(v: Any) -> str | None:
        if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
            return None
        t = str(int(v)) if isinstance(v, float) and v.is_integer() else str(v).strip()
        return t or None

    return col.map(one)


def made_ids(items: pd.DataFrame, student: pd.Series | None) -> tuple[pd.Series, str]:
    """Ids that a later import of the same course gives the same answers and no other: ``<question>/<student>``
    (e.g. ``q1/s101``), or, for an answer without a student, ``<question>/a<8 hex digits of its text>``; a second
    answer with the same id gets ``.2``, a third ``.3``, in file order. Without a question column the question part is
    left out. Returns (ids, the rule in words)."""
    tags = question_tags(items["question"]) if "question" in items.columns else None
    resp = items["response"].fillna("")
    tails = []
    for i in range(len(items)):
        who = student.iloc[i] if student is not None else None
        if isinstance(who, str) and who:
            tails.append(re.sub(r"[\s/]+", "_", str(who)))
        else:
            words = " ".join(str(resp.iloc[i]).lower().split())
            tails.append("a" + hashlib.sha1(words.encode("utf-8")).hexdigest()[:8])
    base = pd.Series([f"{t}/{x}" if tags is not None else x
                      for t, x in zip(tags if tags is not None else tails, tails)],
                     index=items.index)
    n = base.groupby(base, sort=False).cumcount() + 1
    ids = base.where(n == 1, base + "." + n.astype(str))
    q = "<question>/" if tags is not None else ""
    has_student = student is not None and bool(student.notna().any())
    rule = f"{q}<student>" if has_student and bool(student.notna().all()) else (  # type: ignore[union-attr]
        f"{q}<student> (answers without a student: {q}a<hash of the answer>)" if has_student
        else f"{q}a<hash of the answer>")
    return ids, rule
