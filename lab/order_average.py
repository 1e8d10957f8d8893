"""A mark read over the orders of its sentences: does averaging the grade distribution over sentence orders hold the
marks a reordering moves, and what does it do to grade quality?

The behavioural suite's ``sentence_order`` test rotates an answer's sentences and counts the marks that move. This
study reads each test answer of two or more sentences in several orders of its sentences and averages the grade and
concept probabilities over them — ``model.sentence_orders`` 6 set on the run's own grader (``reccbm/orders.py``:
every order up to three sentences, else the sorted order and five more drawn by their number alone, so the
orders read depend on the set of sentences and not on the order written). The averaged reading is the same for any
order of the same sentences by construction; the study checks that on a rotation of the sentences (the suite's edit)
and measures grade quality (T-Acc, QWK, C-Acc, failing answers passed) against the run's own reading of the answers
as written, paired by answer.

    RUBRICTOOL_DATA=../shared/datasets .venv/bin/python lab/order_average.py RUN [RUN ...] --out lab/results/X.json

Grades are the teachers'; concept labels are the runs' training labels (three LLM passes on Mohler, not
expert-validated).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score

from reccbm.orders import sentences
from rubrictool.atomic import atomic_write_json
from rubrictool.cli import run_script
from rubrictool.evaluate import paired_bootstrap
from rubrictool.grade import load_grader

DRAWN = 6


def reading(grader: Any, rows: pd.DataFrame, orders: int) -> Any:
    """The grader's predictions of ``rows`` with ``model.sentence_orders`` set to ``orders`` (0: read once)."""
    grader.model_.config = dataclasses.replace(grader.model_.config, sentence_orders=orders)
    return grader.predictions(rows)


def figures(grades: np.ndarray, levels: np.ndarray, truth: np.ndarray, true_levels: np.ndarray,
            top: int) -> dict[str, float]:
    failing = truth < (top + 1) / 2
    return {"t_acc": float((grades == truth).mean()),
            "qwk": float(cohen_kappa_score(truth, grades, weights="quadratic")),
            "c_acc": float(np.nanmean(np.where(np.isnan(true_levels), np.nan, levels == true_levels))),
            "failing_passed": float((grades[failing] >= (top + 1) / 2).mean()) if failing.any() else float("nan")}


def paired_ci(a: np.ndarray, b: np.ndarray, truth: np.ndarray, seed: int = 0, reps: int = 2000) -> dict[str, Any]:
    """T-Acc and QWK of b − a with the project's paired bootstrap CI over answers: [diff, lo, hi]."""
    out: dict[str, Any] = {}
    for name in ("t_acc", "qwk"):
        r = paired_bootstrap(truth, a, b, name, n_boot=reps, seed=seed)
        out[name] = [r["diff"], r["lo"], r["hi"]]
    return out


def study(run: Path) -> dict[str, Any]:
    grader = load_grader(run)
    table = pd.read_csv(run / "table.csv", dtype={"id": str}, keep_default_na=False)
    test_ids = json.loads((run / "split.json").read_text())["test"]
    rows = table.set_index("id").loc[[str(i) for i in test_ids]].reset_index()
    shown = pd.read_csv(run / "test_predictions.csv", nrows=0).columns
    keys = [c[: -len("_level")] for c in shown if c.endswith("_level")]  # the concepts in the model's order
    parts = [sentences(r) for r in rows["response"]]
    multi = np.array([len(p) >= 2 for p in parts])
    plain, avg = reading(grader, rows, 0), reading(grader, rows, DRAWN)
    rot = [" ".join(p[1:] + p[:1]) if len(p) >= 2 else str(r) for p, r in zip(parts, rows["response"])]
    rotated = rows.assign(response=rot)
    rot_plain, rot_avg = reading(grader, rotated, 0), reading(grader, rotated, DRAWN)
    avg_g, avg_c, rot_g = avg.grade_probs, avg.p_hat, rot_avg.grade_probs
    truth = rows["grade"].astype(int).to_numpy()
    top = plain.grade_probs.shape[1] - 1
    true_levels = rows[keys].replace("", np.nan).astype(float).to_numpy()
    g0, g1 = plain.grade_probs.argmax(1), avg_g.argmax(1)
    lv0 = plain.p_hat.argmax(2) + 1
    lv1 = avg_c.argmax(2) + 1
    return {"run": str(run), "answers": len(rows), "multi_sentence": int(multi.sum()),
            "as_written": figures(g0, lv0, truth, true_levels, top),
            "order_averaged": figures(g1, lv1, truth, true_levels, top),
            "marks_changed_by_averaging": float((g0 != g1)[multi].mean()),
            "rotation_moves_as_written": float((g0 != rot_plain.grade_probs.argmax(1))[multi].mean()),
            "rotation_moves_averaged": float((g1 != rot_g.argmax(1))[multi].mean()),
            "_g": [g0.tolist(), g1.tolist(), truth.tolist()]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    per = []
    for run in args.runs:
        per.append(study(run))
        print(json.dumps({k: v for k, v in per[-1].items() if k != "_g"}), flush=True)
    g0 = np.concatenate([np.asarray(p["_g"][0]) for p in per])
    g1 = np.concatenate([np.asarray(p["_g"][1]) for p in per])
    truth = np.concatenate([np.asarray(p["_g"][2]) for p in per])
    doc = {"runs": [{k: v for k, v in p.items() if k != "_g"} for p in per],
           "pooled_averaged_minus_as_written": paired_ci(g0, g1, truth)}
    atomic_write_json(args.out, doc)
    print(json.dumps(doc["pooled_averaged_minus_as_written"]))
    return 0


if __name__ == "__main__":
    run_script(main)
