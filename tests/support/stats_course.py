"""A course that is not Mohler: a statistics quiz with its own three concepts on a 0..2 scale and a 0..2 grade,
for the tests of what a run says about itself (test size, majority class, CIs, warnings, calibration)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from rubrictool.cli import app

__all__ = ["STATS_KEYS", "stats_rubric", "stats_table", "train_stats"]

STATS_KEYS = ["MEAN", "SPREAD", "UNITS"]

RUBRIC = """\
name: stats101
title: Statistics 101 quiz
version: "0.3"
description: Short answers on describing a sample.
fields:
  question: The quiz question.
  response: The student's answer.
  reference: The teacher's model answer.
scale: {min: 0, max: 2}
grade: {min: 0, max: 2}
concepts:
  - key: MEAN
    name: Centre
    definition: Names a measure of centre and says what it summarises.
    levels:
      - {value: 0, anchor: No centre}
      - {value: 1, anchor: Centre named}
      - {value: 2, anchor: Centre explained}
  - key: SPREAD
    name: Spread
    definition: Names a measure of spread such as the standard deviation.
    levels:
      - {value: 0, anchor: No spread}
      - {value: 1, anchor: Spread named}
      - {value: 2, anchor: Spread explained}
  - key: UNITS
    name: Units
    definition: States the units of the summary.
    levels:
      - {value: 0, anchor: No units}
      - {value: 1, anchor: Some units}
      - {value: 2, anchor: Correct units}
"""

GOOD = ("mean", "deviation", "metres")
BAD = ("nothing", "guess", "whatever")
FILL = ("the", "sample", "data", "values", "we", "look", "at", "shows", "some", "answer")


def stats_rubric(tmp: Path, grade_max: int = 2) -> Path:
    """The course's rubric as a YAML file; grade_max 1 makes the grade pass/fail."""
    path = tmp / "stats101.yaml"
    path.write_text(RUBRIC.replace("grade: {min: 0, max: 2}", f"grade: {{min: 0, max: {grade_max}}}"))
    return path


def stats_table(n: int = 48, seed: int = 0, skew: float = 0.0) -> pd.DataFrame:
    """n answers whose concept levels follow their words; grade 0..2 from the levels. skew > 0 makes most
    answers grade 1 (a course where always saying 1 is hard to beat). Columns named as a teacher might:
    graders `grade_ta` and `grade_prof` beside the adjudicated grade."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        lv = rng.integers(0, 3, size=3)
        if rng.random() < skew:
            lv = np.array([1, 1, 1])
        words = [GOOD[k] if lv[k] == 2 else (BAD[k] if lv[k] == 0 else "maybe") for k in range(3)]
        response = " ".join(words + list(rng.choice(FILL, size=int(rng.integers(2, 7)))))
        grade = int(np.clip(round(lv.sum() / 3), 0, 2))
        rows.append({"id": f"s{i:03d}", "question": f"describe sample {i % 4}", "response": response,
                     "reference": "the mean and the standard deviation in metres", "grade": grade,
                     "grade_ta": grade, "grade_prof": int(np.clip(grade + rng.choice([-1, 0, 0, 0, 1]), 0, 2)),
                     **{k: int(v) for k, v in zip(STATS_KEYS, lv)}})
    return pd.DataFrame(rows)


def train_stats(tmp: Path, backbone: str, df: pd.DataFrame, *extra: str, grade_max: int = 2) -> tuple[int, str, Path]:
    """`rubrictool train` on the course with a tiny backbone; (exit code, output, run dir). The table is
    written to tmp/stats.csv, the rubric to tmp/stats101.yaml."""
    data, out = tmp / "stats.csv", tmp / "run"
    df.assign(grade=df["grade"].clip(0, grade_max), grade_ta=df["grade_ta"].clip(0, grade_max),
              grade_prof=df["grade_prof"].clip(0, grade_max)).to_csv(data, index=False)
    args = ["train", "--table", str(data), "--rubric", str(stats_rubric(tmp, grade_max)), "--backbone", backbone,
            "--epochs", "1",
            "--max-len", "24", "--out", str(out), "--device", "cpu", "--lr", "3e-3", "--cfg", "joint.epochs=0", *extra]
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output, out
