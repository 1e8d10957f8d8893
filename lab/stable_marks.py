"""Which marks an invariance edit moves: the behavioural suite's invariance tests read by how sure the grader was.

The suite (``rubrictool.behaviour``) counts the marks a typo, a reordering, a synonym or the student's name moves. This
study splits them by the probability the grader gave the original mark (``grade_prob`` of the run's
``test_predictions.csv``): the share of marks moved among sure marks (p ≥ 0.8) and unsure ones (p < 0.6), and the share
of the moved marks that lie in the run's least-sure fifth (what the review queue's first fifth reads first).

    RUBRICTOOL_DATA=../shared/datasets .venv/bin/python lab/stable_marks.py RUN [RUN ...] --out lab/results/X.json

Grades are the teachers'; the runs' concept labels are what they trained on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TESTS = ["typo", "sentence_order", "synonym", "student_name"]
SURE, UNSURE = 0.8, 0.6


def by_sureness(edits: pd.DataFrame, grade_prob: pd.Series, fifth: float) -> pd.DataFrame:
    """Per test: answers, marks moved, the share moved among sure and unsure marks, the moved marks in the least-sure
    fifth. ``edits``: the suite's rows (``id``, ``test``, ``grade_before``, ``grade_after``); ``grade_prob`` by id."""
    df = edits.assign(p=edits["id"].astype(str).map(grade_prob),
                      moved=edits["grade_before"] != edits["grade_after"])
    rows = []
    for test, g in df.groupby("test", sort=False):
        m = g[g["moved"]]
        rows.append({"test": test, "answers": len(g), "moved": float(g["moved"].mean()),
                     "moved_if_sure": float(g.loc[g["p"] >= SURE, "moved"].mean()),
                     "moved_if_unsure": float(g.loc[g["p"] < UNSURE, "moved"].mean()),
                     "moved_in_least_sure_fifth": float((m["p"] <= fifth).mean()) if len(m) else float("nan")})
    return pd.DataFrame(rows)


def _progress(p: Any) -> None:
    """The suite's grading, as one line on stderr that counts up."""
    if p.kind == "progress":
        print(f"\r{p.task}: {p.done}/{p.total if p.total is not None else '?'}", end="", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    example = "\n".join(line for line in __doc__.splitlines() if line.startswith("    "))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="example:\n" + example,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="trained run folders (each with test_predictions.csv)")
    ap.add_argument("--data-dir", default=None, help="the runs' data (default: $RUBRICTOOL_DATA)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the table as JSON here")
    args = ap.parse_args(argv)
    if args.out is not None and Path(args.out).suffix != ".json":
        ap.error(f"--out {args.out}: give a .json file (this study writes JSON, never over its inputs)")

    from rubrictool.behaviour.suite import run_suite

    edits, probs = [], []
    for run in args.runs:
        if not (run / "test_predictions.csv").is_file():
            print(f"{run}: no test_predictions.csv (give a trained run's folder)", file=sys.stderr)
            return 2
        result = run_suite(run, data_dir=args.data_dir, seed=args.seed, tests=TESTS, progress=_progress)
        print(file=sys.stderr)
        edits.append(result.items)
        probs.append(pd.read_csv(run / "test_predictions.csv", dtype={"id": str})[["id", "grade_prob"]])
    p = pd.concat(probs).set_index("id")["grade_prob"]
    fifth = float(np.quantile(p, 0.2))
    table = by_sureness(pd.concat(edits, ignore_index=True), p, fifth)
    print(f"{len(p)} test answers; sure: p ≥ {SURE} ({(p >= SURE).mean():.0%} of the marks), unsure: p < {UNSURE} "
          f"({(p < UNSURE).mean():.0%}); the least-sure fifth: p ≤ {fifth:.2f}\n")
    print("| test | answers | marks moved | among sure marks | among unsure marks "
          "| moved marks in the least-sure fifth |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in table.itertuples():
        print(f"| {r.test} | {r.answers} | {r.moved:.1%} | {r.moved_if_sure:.1%} | {r.moved_if_unsure:.1%} "
              f"| {r.moved_in_least_sure_fifth:.0%} |")
    if args.out:
        doc: dict[str, Any] = {"runs": [str(r) for r in args.runs], "seed": args.seed, "fifth": fifth,
                               "share_sure": float((p >= SURE).mean()), "share_unsure": float((p < UNSURE).mean()),
                               "rows": table.to_dict("records")}
        from rubrictool.atomic import atomic_write_json

        atomic_write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    from rubrictool.cli import run_script

    run_script(main)  # bad data or run folder: one line, no traceback
