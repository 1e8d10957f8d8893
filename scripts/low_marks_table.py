"""Per true mark and for the failing answers (rubrictool.evaluate.low_marks), one row per kept k-fold run.

    python scripts/low_marks_table.py mohler benchmarks/results/folds/default benchmarks/results/folds/plm ...

Reads each folder's pooled_predictions.csv; prints a Markdown table: the failing answers (below the rubric's pass
mark) given a pass mark and their mean error, each with its 95 % bootstrap CI, and the mean error per true mark.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from rubrictool.evaluate import low_marks
from rubrictool.rubric import load_rubric


def main(rubric: str, folders: list[str]) -> None:
    rb = load_rubric(rubric)
    marks = rb.grade.values
    print("| run | failing answers passed [95 % CI] | their mean error [95 % CI] | "
          + " | ".join(f"error at {g}" for g in marks) + " |")
    print("|---|---|---|" + "---|" * len(marks))
    for folder in folders:
        pooled = pd.read_csv(Path(folder) / "pooled_predictions.csv", dtype={"id": str})
        lm = low_marks(pooled["grade_true"], pooled["grade"], marks, rb.pass_mark)
        f = lm["failing"]
        print(f"| {folder} | {100 * f['passed']:.0f} % [{100 * f['passed_lo']:.0f}, {100 * f['passed_hi']:.0f}] of "
              f"{f['n']} | {f['mean_error']:+.2f} [{f['mean_error_lo']:+.2f}, {f['mean_error_hi']:+.2f}] | "
              + " | ".join(f"{r['mean_error']:+.2f}" for r in lm["per_mark"]) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
