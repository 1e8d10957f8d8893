"""A small course laid out unlike CHEM 110: a 48-answer statistics quiz (12 students × 4 questions) kept as an XLSX
gradebook headed 'Student', 'Q#', 'Answer', 'Score (0-5)', graded 0..5, with a four-concept rubric on levels 1..3.

Its grades follow the concept levels loosely: most answers sit in the middle of the scale and the lowest profiles
are rare, so a least-squares points table shrinks every total towards the middle (its lowest total earns grade 2:
grades 0 and 1, 17 of the 48 answers, can never be given) and grades worse than always giving the most common grade.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["QUIZ_HEADERS", "QUIZ_KEYS", "QUIZ_RUBRIC", "quiz_marks", "quiz_table", "write_quiz_xlsx"]

QUIZ_KEYS = ["CLAIM", "EVID", "CALC", "UNIT"]
QUIZ_HEADERS = ["Student", "Q#", "Answer", "Score (0-5)"]

QUIZ_RUBRIC = """\
name: quiz
title: STAT 120 weekly quiz
version: "0.1"
description: Short answers to a statistics quiz, scored 0-5 by the instructor.
fields:
  question: The quiz question number.
  response: The student's answer.
scale: {min: 1, max: 3}
grade: {min: 0, max: 5}
concepts:
""" + "".join(f"""\
  - key: {k}
    name: {k.title()}
    definition: How well the answer handles {k.lower()}.
    levels:
      - {{value: 1, anchor: absent}}
      - {{value: 2, anchor: partial}}
      - {{value: 3, anchor: complete}}
""" for k in QUIZ_KEYS)

# grade -> how many answers get it (48 in all; 15 at the majority grade 3, 17 at grades 0 and 1)
_GRADES = {0: 7, 1: 10, 2: 9, 3: 15, 4: 5, 5: 2}
_WORDS = {1: "unsure", 2: "partly", 3: "clearly"}


def quiz_table(seed: int = 0) -> pd.DataFrame:
    """The quiz as a table: student, question (1..4), grade, the four concept levels (1..3) and an answer text
    that mentions each concept's level. Low grades mostly come with middling levels, as a lenient panel labels them."""
    rng = np.random.default_rng(seed)
    grades = rng.permutation(np.repeat(list(_GRADES), list(_GRADES.values())))  # (48,)
    rows = []
    for i, g in enumerate(grades):
        centre = {0: 2.1, 1: 2.1, 2: 2.1, 3: 2.1, 4: 2.5, 5: 2.8}[int(g)]
        lv = np.clip(np.rint(centre + rng.normal(0, 0.55, size=len(QUIZ_KEYS))), 1, 3).astype(int)
        student, q = f"s{101 + i // 4}", i % 4 + 1
        text = " ".join(f"{_WORDS[int(v)]} {k.lower()}" for k, v in zip(QUIZ_KEYS, lv)) + f" for question {q}"
        rows.append({"student": student, "question": q, "response": text, "grade": int(g),
                     **{k: int(v) for k, v in zip(QUIZ_KEYS, lv)}})
    return pd.DataFrame(rows)


def quiz_marks(seed: int = 0, graded: bool = True) -> pd.DataFrame:
    """The gradebook as the instructor keeps it (:data:`QUIZ_HEADERS`; no 'Score (0-5)' when not ``graded``)."""
    t = quiz_table(seed)
    marks = pd.DataFrame({"Student": t["student"], "Q#": t["question"], "Answer": t["response"],
                          "Score (0-5)": t["grade"]})
    return marks if graded else marks.drop(columns="Score (0-5)")


def write_quiz_xlsx(path: Path, marks: pd.DataFrame | None = None) -> pd.DataFrame:
    """Write the gradebook (or ``marks``) to ``path`` as a one-sheet workbook; returns what was written."""
    df = quiz_marks() if marks is None else marks
    df.to_excel(path, sheet_name="Quiz 3", index=False)
    return df
