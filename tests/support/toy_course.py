"""A small course that is not Mohler, for the learning-curve tests: three concepts on a 0..2 scale, grades 1..4,
six questions, answers whose words carry the levels (so a tiny model can learn a little)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tests.support.tiny_models import toy_table

__all__ = ["ECOLOGY_KEYS", "ecology_rubric", "ecology_table"]

ECOLOGY_KEYS = ["EV", "MC", "CL"]

_RUBRIC = """\
name: ecology
title: Ecology short answers (toy course for tests)
version: "0.1"
description: A toy course with three concepts on a 0-2 scale and grades 1-4.
fields:
  question: The question.
  response: The student's answer.
  reference: The reference answer.
scale: {min: 0, max: 2}
grade: {min: 1, max: 4}
concepts:
  - key: EV
    name: Evidence
    definition: The answer cites an observation that supports its claim.
    levels:
      - {value: 0, anchor: No evidence}
      - {value: 1, anchor: Some evidence}
      - {value: 2, anchor: Strong evidence}
  - key: MC
    name: Mechanism
    definition: The answer names the process that causes the effect.
    levels:
      - {value: 0, anchor: Absent}
      - {value: 1, anchor: Vague}
      - {value: 2, anchor: Precise}
  - key: CL
    name: Clarity
    definition: The answer is worded clearly.
    levels:
      - {value: 0, anchor: Unclear}
      - {value: 1, anchor: Mostly clear}
      - {value: 2, anchor: Clear}
"""

_QUESTIONS = ["what is a stack", "what is a queue", "what is a list", "what is an array", "what is a pointer",
              "what is a linked list"]


def ecology_rubric(folder: Path) -> Path:
    """The toy course's rubric YAML, written into ``folder``."""
    path = folder / "ecology.yaml"
    path.write_text(_RUBRIC)
    return path


def ecology_table(n: int = 90, seed: int = 0) -> pd.DataFrame:
    """n answers on the ecology rubric: levels 0..2 per concept, grade 1 + min(3, Σ levels // 2)."""
    t = toy_table(n, K=3, seed=seed)
    c = t["c"]  # (n, 3) in 0..2
    df = pd.DataFrame({"id": [f"eco-{i:03d}" for i in range(n)],
                       "question": [_QUESTIONS[i % len(_QUESTIONS)] for i in range(n)],
                       "response": t["r"], "reference": t["a"]})
    for k, key in enumerate(ECOLOGY_KEYS):
        df[key] = c[:, k]
    df["grade"] = 1 + np.minimum(3, c.sum(1) // 2)
    return df
