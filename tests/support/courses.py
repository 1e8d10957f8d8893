"""A small course that is not Mohler: a first-year chemistry-lab rubric with its own concepts (SAFE, METH, UNIT)
on levels 0..2 and a 0..10 grade (the annotate tests), and the same course's marks as the tutor keeps them, an
XLSX workbook with its own headers (the docs/your-course.md guide test; levels 1..3 there, as `rubric new`
writes them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "CHEMLAB_HEADERS",
    "CHEMLAB_KEYS",
    "CHEMLAB_PANEL_NOISE",
    "COURSE_RUBRIC",
    "chemlab_levels_of",
    "chemlab_marks",
    "chemlab_panel_reply",
    "chemlab_words",
    "write_chemlab_tables",
    "write_chemlab_xlsx",
]

COURSE_RUBRIC = """\
name: chemlab
title: First-year chemistry lab reports
version: "1.0"
description: Short written answers in a first-year chemistry lab course, graded 0-10 by the lab tutor.
source: course syllabus
fields:
  question: The lab question.
  response: The student's written answer.
  reference: The tutor's model answer.
scale: {min: 0, max: 2}
grade: {min: 0, max: 10}
concepts:
  - key: SAFE
    name: Safety reasoning
    definition: Whether the answer names the hazard and the precaution that controls it.
    levels:
      - {value: 0, anchor: No hazard named}
      - {value: 1, anchor: Hazard named without a precaution}
      - {value: 2, anchor: Hazard and matching precaution}
    examples:
      - {text: "Wear goggles because the acid splashes.", level: 2}
  - key: METH
    name: Method
    definition: Whether the steps of the procedure are in a workable order with quantities.
    levels:
      - {value: 0, anchor: Steps missing or in an unworkable order}
      - {value: 1, anchor: Workable order but quantities missing}
      - {value: 2, anchor: Workable order with quantities}
    examples:
      - {text: "Add 10 mL of HCl to the flask, then titrate.", level: 2}
  - key: UNIT
    name: Units and significant figures
    definition: Whether results carry correct units and a sensible number of significant figures.
    levels:
      - {value: 0, anchor: Units absent}
      - {value: 1, anchor: Units present with errors}
      - {value: 2, anchor: Correct units and precision}
    examples:
      - {text: "0.105 mol/L", level: 2}
"""


# == the chemistry-lab course as a teacher keeps it: a marks spreadsheet with its own headers ===============

CHEMLAB_KEYS = ["SAFE", "METH", "UNIT"]

# What an answer says for each concept at levels 1..3 (two wordings per level, so answers differ).
_PHRASES: dict[str, dict[int, list[str]]] = {
    "SAFE": {1: ["just mix it", "there is no danger here"],
             2: ["the acid is corrosive", "the flame is a hazard"],
             3: ["the acid is corrosive so wear goggles and gloves", "the flame is a hazard so tie your hair back"]},
    "METH": {1: ["add some and measure", "do the experiment"],
             2: ["add the acid to the flask then titrate", "heat the sample then weigh it"],
             3: ["add 25 mL of acid to the flask then titrate with 0.1 M base",
                 "heat 2 g of the sample for 10 minutes then weigh it"]},
    "UNIT": {1: ["the result is 0.1", "it came out at 12"],
             2: ["the result is 0.1 mol", "it came out at 12 grams"],
             3: ["the concentration is 0.105 mol/L", "the mass loss is 1.2 g"]},
}
_OPENERS = ["", "I think", "First", "In the lab", "We found that", "Well"]
_LAB_QUESTIONS = [
    ("How do you find the concentration of the hydrochloric acid?",
     ("The acid is corrosive so wear goggles and gloves. Add 25 mL of acid to the flask then titrate with 0.1 M "
     "base. The concentration is 0.105 mol/L.")),
    ("How do you measure the water of crystallisation in copper sulfate?",
     ("The flame is a hazard so tie your hair back. Heat 2 g of the sample for 10 minutes then weigh it. "
     "The mass loss is 1.2 g.")),
    ("What makes the rate of the magnesium reaction change?",
     ("The acid is corrosive so wear goggles and gloves. Add 25 mL of acid to the flask then time the gas. "
     "The rate is 0.4 mL/s.")),
    ("How do you prepare a standard solution of sodium carbonate?",
     ("Sodium carbonate is an irritant so wear goggles. Weigh 2.65 g into a 250 mL flask and fill to the mark. "
     "The concentration is 0.100 mol/L.")),
]
# A question first set in the spring term (chem110-spring.xlsx): no grader trained on the autumn marks has seen it.
_NEW_LAB_QUESTION = (
    "How do you find the water lost when hydrated magnesium sulfate is heated?",
    ("The flame is a hazard so tie your hair back. Heat 2 g of the sample for 10 minutes then weigh it. "
     "The mass loss is 1.2 g."),
)
CHEMLAB_HEADERS = ["Student ID", "Lab question", "Answer", "Model answer", "Mark (0-10)", "Tutor comment"]


def chemlab_levels_of(response: str) -> dict[str, int]:
    """The concept levels an answer's wording carries (the scripted LLM panel's ground truth)."""
    text = response.lower()
    out = {}
    for key, by_level in _PHRASES.items():
        found = [lv for lv in (3, 2, 1) for p in by_level[lv] if p.lower() in text]
        out[key] = found[0] if found else 1
    return out


def chemlab_marks(students: int = 18, seed: int = 0, new_question: bool = False) -> pd.DataFrame:
    """The course's marks sheet: every student answers the four lab questions (``students`` × 4 rows; with
    ``new_question`` also the spring term's new one, × 5) under the tutor's headers (CHEMLAB_HEADERS). Student ids
    repeat across questions, as in a real gradebook; another ``seed`` is another cohort, with its own student ids (s001…
    for seed 0, s101… for seed 1). The mark (0..10) follows the concept levels the wording carries, ±1 for the tutor's
    own judgement on 2 answers in 5."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(students):
        for question, reference in [*_LAB_QUESTIONS, *([_NEW_LAB_QUESTION] if new_question else [])]:
            levels = {k: int(rng.integers(1, 4)) for k in CHEMLAB_KEYS}
            parts = [str(rng.choice(_PHRASES[k][levels[k]])) for k in CHEMLAB_KEYS]
            opener = str(rng.choice(_OPENERS))
            answer = ". ".join(parts) + "."
            answer = f"{opener} {answer}" if opener else answer[0].upper() + answer[1:]
            total = sum(levels.values())  # 3..9
            mark = int(np.clip(round((total - 3) / 6 * 10) + int(rng.choice([-1, 0, 0, 0, 1])), 0, 10))
            rows.append({"Student ID": f"s{100 * seed + s + 1:03d}", "Lab question": question, "Answer": answer,
                         "Model answer": reference, "Mark (0-10)": mark,
                         "Tutor comment": "see me" if mark < 4 else ""})
    return pd.DataFrame(rows, columns=CHEMLAB_HEADERS)


def write_chemlab_xlsx(path: Path, students: int = 18, seed: int = 0, marked: bool = True,
                       new_question: bool = False) -> pd.DataFrame:
    """The marks sheet as the tutor's workbook: sheet 'Marks' (chemlab_marks) after a 'Read me' sheet. ``marked=False``:
    answers not marked yet (no 'Mark (0-10)' or 'Tutor comment' column), e.g. next term's; ``new_question``: a fifth
    lab question, set for the first time."""
    import openpyxl

    marks = chemlab_marks(students, seed, new_question)
    if not marked:
        marks = marks.drop(columns=["Mark (0-10)", "Tutor comment"])
    wb = openpyxl.Workbook()
    readme = wb.active
    assert readme is not None
    readme.title = "Read me"
    readme.append(["CHEM 110 lab reports" + (", marked by the lab tutors" if marked else ", not marked yet")])
    sheet = wb.create_sheet("Marks")
    sheet.append(list(marks.columns))
    for row in marks.itertuples(index=False):
        sheet.append(list(row))
    wb.save(path)
    return marks


def chemlab_words() -> list[str]:
    """Every word of the course's questions, model answers and answer phrases: the vocabulary of a tiny backbone
    that can see what the answers say (tests.support.tiny_models.build_backbone(words=...))."""
    import re

    texts = [p for by_level in _PHRASES.values() for ps in by_level.values() for p in ps]
    questions = [*_LAB_QUESTIONS, _NEW_LAB_QUESTION]
    texts += _OPENERS + [q for q, _ in questions] + [r for _, r in questions]
    return sorted({w.lower() for t in texts for w in re.findall(r"\w+|[^\w\s]+", t)})


# How often each scripted panel model reads a concept one level off (panel-a reads the wording as written).
CHEMLAB_PANEL_NOISE = {"panel-a": 0.0, "panel-b": 0.2, "panel-c": 0.3}


def chemlab_panel_reply(model: str, response: str) -> str:
    """A scripted panel model's annotation of a CHEM 110 answer (the line format): the levels the wording carries
    (chemlab_levels_of), one level off for a deterministic share CHEMLAB_PANEL_NOISE[model] of (answer, concept)."""
    import hashlib

    levels = chemlab_levels_of(response)
    lines = []
    for key in CHEMLAB_KEYS:
        u = int(hashlib.sha256(f"{model}|{response}|{key}".encode()).hexdigest()[:8], 16) / 16**8
        lv = levels[key]
        if u < CHEMLAB_PANEL_NOISE.get(model, 0.0):
            lv = lv + 1 if lv < 3 else lv - 1
        lines.append(f"concept={key}; label={lv}; evidence=the answer says so")
    return "\n".join(lines)


def write_chemlab_tables(d: Path, n: int) -> dict[str, Path]:
    """The chemistry-lab course in ``d``: its rubric (SAFE, METH, UNIT on 0..2, a 0..10 grade), an adjudicated table of
    ``n`` Mohler-like answers and the same answers as an item table."""
    from tests.support.tiny_models import mohler_like_table

    (d / "chemlab.yaml").write_text(COURSE_RUBRIC, encoding="utf-8")
    df = mohler_like_table(n)
    c = df[["FC", "CC", "TU"]].to_numpy() - 1
    table = df[["id", "question", "response", "reference"]].assign(
        SAFE=c[:, 0], METH=c[:, 1], UNIT=c[:, 2], grade=np.rint(c.sum(1) * 10 / 6).astype(int))
    table.to_csv(d / "adjudicated.csv", index=False)
    table[["id", "question", "response", "reference", "grade"]].to_csv(d / "items.csv", index=False)
    return {"dir": d, "rubric": d / "chemlab.yaml", "table": d / "adjudicated.csv", "items": d / "items.csv"}
