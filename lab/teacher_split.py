"""Failing answers the teachers themselves split on: how each Mohler teacher marks the answers that their average fails.

Issue 72 counts an answer as failing when the teachers' mark (the mean of Mohler's two graders, ``me`` and ``other``,
rounded half up) is below the pass mark, and asks that a grader give at most 35 % of those answers a pass mark. This
study reads the same line through each teacher alone:

- **each teacher against the mark** (no model): a teacher's own mark, rounded half up as the mark is, against the
  mark — the share of failing answers that teacher passes, their mean error, the share of passing answers failed;
- **the graders on the two kinds of failing answer**: for each kept k-fold run given (its ``pooled_predictions.csv``:
  every answer tested once), the failing answers split into those *both* teachers fail and those one teacher passes
  (the teachers split) — how many of each the grader passes, their mean error, with bootstrap 95 % CIs.

    RUBRICTOOL_DATA=../shared/datasets .venv/bin/python lab/teacher_split.py \\
        --runs benchmarks/results/folds/default benchmarks/results/folds-by-question/default \\
               benchmarks/results/folds/plm benchmarks/results/folds-by-question/plm-default \\
               benchmarks/results/folds/paper benchmarks/results/folds-by-question/paper \\
        --out lab/results/teacher-split.json

Grades are the teachers' own (Mohler's ``me``, ``other`` and their average); no concept label is read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.evaluate import low_marks
from rubrictool.report.scores import round_half_up as half_up  # the Mohler rule that makes ``grade`` from the mean

TEACHERS = ("grade_me", "grade_other")


def teacher_figures(table: pd.DataFrame, pass_mark: int, teachers: tuple[str, ...] = TEACHERS) -> list[dict[str, Any]]:
    """Each teacher's own mark (rounded half up) graded against ``grade``, as :func:`low_marks` reads a grader."""
    y = table["grade"].to_numpy(int)
    grades = sorted(set(y.tolist()))
    out = []
    for t in teachers:
        lm = low_marks(y, half_up(table[t]), grades, pass_mark)
        out.append({"teacher": t, "failing": lm["failing"], "passing": lm["passing"],
                    "exact": float((half_up(table[t]) == y).mean())})
    return out


def split_figures(pooled: pd.DataFrame, table: pd.DataFrame, pass_mark: int,
                  teachers: tuple[str, ...] = TEACHERS) -> dict[str, Any]:
    """A run's failing answers split by whether every teacher fails them (``both``) or one passes them (``split``)."""
    t = table.assign(id=table["id"].astype(str)).set_index("id")
    rows = t.loc[pooled["id"].astype(str)]
    y, g = pooled["grade_true"].to_numpy(int), pooled["grade"].to_numpy(int)
    if not np.array_equal(y, rows["grade"].to_numpy(int)):
        raise SystemExit("the run's grade_true is not the table's grade: give a run of this benchmark")
    every = np.all([half_up(rows[c]) < pass_mark for c in teachers], axis=0)
    fail = y < pass_mark
    grades = sorted(set(y.tolist()))
    out: dict[str, Any] = {}
    for name, m in (("all", fail), ("both", fail & every), ("split", fail & ~every)):
        lm = low_marks(y[m], g[m], grades, pass_mark)
        out[name] = lm["failing"]
    return out


def main(argv: list[str] | None = None) -> int:
    example = "\n".join(line for line in __doc__.splitlines() if line.startswith("    "))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="example:\n" + example,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="*", default=["benchmarks/results/folds/default",
                                                  "benchmarks/results/folds-by-question/default"],
                    help="kept k-fold runs (folders with pooled_predictions.csv)")
    ap.add_argument("--data-dir", default=None, help="benchmark data (default: $RUBRICTOOL_DATA, else ./data)")
    ap.add_argument("--out", default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.out is not None and Path(args.out).suffix != ".json":
        ap.error(f"--out {args.out}: give a .json file (this study writes JSON, never over its inputs)")

    from rubrictool.pipeline import benchmark_table

    rb, table, _ = benchmark_table("mohler", args.data_dir)
    missing = [c for c in TEACHERS if c not in table.columns]
    if missing:
        print(f"the Mohler table has no {', '.join(missing)} column: this study needs each teacher's own mark",
              file=sys.stderr)
        return 2
    pass_mark = rb.pass_mark
    teachers = teacher_figures(table, pass_mark)
    print(f"Each teacher against the mark (failing: below {pass_mark}; {teachers[0]['failing']['n']} answers)\n")
    print("| teacher | exact mark | failing answers passed [95 % CI] | their mean error | passing answers failed |")
    print("|---|---:|---:|---:|---:|")
    for r in teachers:
        f, p = r["failing"], r["passing"]
        print(f"| {r['teacher']} | {r['exact']:.3f} | {f['passed']:.0%} [{f['passed_lo']:.0%}, {f['passed_hi']:.0%}] "
              f"| {f['mean_error']:+.2f} | {p['failed']:.0%} |")
    runs: dict[str, Any] = {}
    for run in args.runs:
        path = Path(run) / "pooled_predictions.csv"
        if not path.is_file():
            print(f"{run}: no pooled_predictions.csv (give a k-fold run's folder)", file=sys.stderr)
            return 2
        runs[run] = split_figures(pd.read_csv(path, dtype={"id": str}), table, pass_mark)
    if runs:
        print("\nThe graders on failing answers: all, those both teachers fail, those one teacher passes\n")
        print("| run | all: passed, error | both teachers fail: n, passed [95 % CI], error "
              "| one teacher passes: n, passed [95 % CI], error |")
        print("|---|---|---|---|")
        for run, s in runs.items():
            cells = [f"{s['all']['passed']:.0%}, {s['all']['mean_error']:+.2f}"]
            for k in ("both", "split"):
                f = s[k]
                cells.append(f"{f['n']}, {f['passed']:.0%} [{f['passed_lo']:.0%}, {f['passed_hi']:.0%}], "
                             f"{f['mean_error']:+.2f}")
            print(f"| {run} | " + " | ".join(cells) + " |")
    if args.out:
        from rubrictool.atomic import atomic_write_json

        atomic_write_json(args.out, {"pass_mark": pass_mark, "teachers": teachers, "runs": runs})
    return 0


if __name__ == "__main__":
    from rubrictool.cli import run_script

    run_script(main)  # bad data or run folder: one line, no traceback
