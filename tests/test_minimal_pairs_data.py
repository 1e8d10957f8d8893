"""benchmarks/data/mohler_minimal_pairs.jsonl: hand-written minimal pairs on Mohler questions (the behavioural suite's
pairs).

Each pair is a right and a wrong answer to one Mohler question that differ by one word or one short phrase,
stated in ``changed`` as ``from → to``: ``wrong`` is ``right`` with the one whole-word occurrence of ``from``
replaced by ``to``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

PAIRS = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "mohler_minimal_pairs.jsonl"
FIELDS = {"pair", "question_id", "right", "wrong", "changed", "kind", "note", "provenance", "reviewed"}
KINDS = {"negation", "antonym", "other_option", "wrong_term", "wrong_number"}
ARROW = " → "


def _pairs() -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(PAIRS.read_text(encoding="utf-8").splitlines(), 1):
        assert line.strip(), f"{PAIRS.name}:{lineno}: blank line"
        rows.append(json.loads(line))
    return rows


def apply_change(right: str, changed: str) -> str:
    """``right`` with the one whole-word occurrence of the ``from`` side of ``changed`` replaced by its ``to`` side."""
    old, sep, new = changed.partition(ARROW)
    assert sep and old and new and old != new, f"changed {changed!r} is not 'from → to'"
    pattern = re.compile(r"(?<!\w)" + re.escape(old) + r"(?!\w)")
    hits = len(pattern.findall(right))
    assert hits == 1, f"{old!r} occurs {hits} times in {right!r}; it must occur exactly once"
    return pattern.sub(lambda _: new, right, count=1)


def test_apply_change_rejects_what_is_not_a_minimal_pair() -> None:
    assert apply_change("a node that has no children", "children → parent") == "a node that has no parent"
    assert apply_change("this is a variable", "is → is not") == "this is not a variable"  # whole words only
    with pytest.raises(AssertionError):
        apply_change("the first in first out", "first → last")  # ambiguous: occurs twice
    with pytest.raises(AssertionError):
        apply_change("the height", "depth → width")  # not in the answer
    with pytest.raises(AssertionError):
        apply_change("the height", "height")  # no arrow


def test_schema_ids_and_size() -> None:
    rows = _pairs()
    assert len(rows) >= 150
    for r in rows:
        assert set(r) == FIELDS, f"{r.get('pair')}: fields {sorted(set(r) ^ FIELDS)} differ from the schema"
        assert all(isinstance(r[f], str) and r[f].strip() for f in FIELDS), f"{r['pair']}: an empty field"
        assert re.fullmatch(r"p\d{3}", r["pair"]), r["pair"]
        assert r["kind"] in KINDS, f"{r['pair']}: kind {r['kind']!r}"
        assert r["provenance"].startswith("written by hand"), r["pair"]
        assert r["reviewed"].startswith("2026-"), f"{r['pair']}: not reviewed"
    ids = [r["pair"] for r in rows]
    assert len(set(ids)) == len(ids), [i for i, n in Counter(ids).items() if n > 1]


def test_each_wrong_answer_is_its_right_answer_changed_as_stated() -> None:
    for r in _pairs():
        assert r["right"] != r["wrong"], r["pair"]
        assert apply_change(r["right"], r["changed"]) == r["wrong"], f"{r['pair']}: wrong is not right + changed"


def test_no_answer_is_both_right_and_wrong_for_one_question() -> None:
    rows = _pairs()
    for q in {r["question_id"] for r in rows}:
        rights = {r["right"].lower() for r in rows if r["question_id"] == q}
        wrongs = {r["wrong"].lower() for r in rows if r["question_id"] == q}
        assert not rights & wrongs, f"question {q}: {sorted(rights & wrongs)} is marked both right and wrong"


def test_pairs_name_real_mohler_questions_and_cover_forty(mohler_items: pd.DataFrame) -> None:
    real = set(mohler_items["question_id"])
    rows = _pairs()
    unknown = sorted({r["question_id"] for r in rows} - real)
    assert not unknown, f"question ids not in the Mohler data: {unknown}"
    assert len({r["question_id"] for r in rows}) >= 40
