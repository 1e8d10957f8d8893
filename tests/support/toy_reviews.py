"""Toy review tables for the adjudication tests (Mohler rubric: concepts FC CC TU CP R DU EE FR, levels 1..3)."""

from __future__ import annotations

import pandas as pd

__all__ = ["TOY", "long_rows", "toy_items", "toy_reviews"]

# item -> concept -> levels of reviewers A, B, C (None = no review)
TOY: dict[str, dict[str, tuple[int | None, int | None, int | None]]] = {
    "q1": {"FC": (3, 3, 3), "CC": (1, 2, 3), "TU": (2, 2, 1)},  # unanimous, three-way tie, majority
    "q2": {"FC": (1, 3, None), "CC": (2, 2, None), "TU": (3, None, None)},  # two disagree, two agree, single
    "q3": {"FC": (2, 2, 2), "CC": (3, 3, 2), "TU": (1, 1, 1)},
    "q4": {"FC": (1, 1, 2), "CC": (1, 1, 1), "TU": (2, 3, 3)},
}


def long_rows(
    table: dict[str, dict[str, tuple[int | None, int | None, int | None]]] = TOY, reviewers: str = "ABC"
) -> list[dict[str, object]]:
    return [
        {"item": item, "reviewer": reviewers[r], "concept": concept, "level": level}
        for item, per in table.items()
        for concept, levels in per.items()
        for r, level in enumerate(levels)
        if level is not None
    ]


def toy_reviews() -> pd.DataFrame:
    return pd.DataFrame(long_rows())


def toy_items() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": list(TOY),
            "question": ["What is a stack?"] * 4,
            "response": ["LIFO list", "a queue", "push and pop on one end", "memory"],
            "reference": ["A last-in first-out structure."] * 4,
            "grade": [5, 1, 4, 2],
            "grade_me": [5, 1, 4, 2],
            "grade_other": [4.5, 1, 4, 3],
        }
    )
