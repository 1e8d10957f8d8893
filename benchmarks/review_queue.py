"""The review queue and failing answers: of the failing answers a grader passed, how many does a teacher's review of
the queue's first answers catch, with the queue ranked as ``rubrictool grade`` ranks it today
(:func:`rubrictool.route.queue_reads`, with :func:`~rubrictool.review_queue.weak_pass`) and by the grader's
unsureness alone (the ranking before it)?

    python benchmarks/review_queue.py [--runs RUN,RUN] [--budgets 5,10,20] [--out benchmarks/results/review_queue]
    python benchmarks/review_queue.py --smoke

A kept k-fold run's pooled predictions stand for one term's marked answers (each graded by a fold model that never
trained on it); nothing is trained or graded again. No answer is held here (the pooled answers carry no flags), so the
whole budget goes to marked answers. Concept uncertainty is weighted by σ_k² averaged over the folds (``grade`` uses its
run's own). A reviewed answer is assumed to get the teachers' mark. Per ranking and budget (a share of the answers):
the failing answers passed before and after the review (their share of all failing answers), the wrong marks the
queue holds, and the passing answers in it. Concept labels (Mohler): majority vote over three independent LLM
annotation passes, NOT validated by experts. ``--runs`` defaults to the default's kept random and question-grouped
folds (``benchmarks/results/folds{,-by-question}/default``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pandas as pd

from rubrictool.route import queue_reads
from rubrictool.textsafe import md_table

RUNS = "benchmarks/results/folds/default,benchmarks/results/folds-by-question/default"
RANKINGS = ("unsure only (before)", "unsure + weak pass (today)")


def _concepts(pooled: pd.DataFrame) -> tuple[list[str], list[int]]:
    """The concept keys (``<key>_expected`` columns) and the levels of their ``<key>_p<level>`` columns."""
    keys = [c[: -len("_expected")] for c in pooled.columns if c.endswith("_expected")]
    levels = sorted({int(c.rsplit("_p", 1)[1]) for c in pooled.columns
                     if keys and c.startswith(f"{keys[0]}_p") and c.rsplit("_p", 1)[1].isdigit()})
    return keys, levels


def measure(pooled: pd.DataFrame, sigma2: list[float] | None, pass_mark: int,
            budgets: list[int]) -> list[dict[str, Any]]:
    """One row per ranking and budget (percent of the answers)."""
    keys, levels = _concepts(pooled)
    truth, mark = pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy()
    failing = truth < pass_mark
    passed_wrongly = failing & (mark >= pass_mark)
    rows = []
    for name, weak in zip(RANKINGS, (False, True)):
        for b in budgets:
            n = round(b / 100 * len(pooled))
            inq = queue_reads(pooled, keys, (levels[0], levels[-1]), pass_mark, n, sigma2, weak=weak)
            if inq is None:
                sys.exit("the pooled predictions keep no concept readings (<KEY>_p<level>, <KEY>_expected): a PLM run?")
            rows.append({"ranking": name, "budget_pct": b, "reviewed": n, "failing": int(failing.sum()),
                         "failing_passed_before": float(passed_wrongly.sum() / max(1, failing.sum())),
                         "failing_passed_after": float((passed_wrongly & ~inq).sum() / max(1, failing.sum())),
                         "caught": int((passed_wrongly & inq).sum()),
                         "wrong_marks_reviewed": int(((mark != truth) & inq).sum()),
                         "passing_reviewed": int((~failing & inq).sum())})
    return rows


def _markdown(name: str, rows: list[dict[str, Any]]) -> str:
    head = ["ranking", "reviewed", "failing passed: before → after", "caught", "wrong marks reviewed",
            "passing answers reviewed"]
    body = [[r["ranking"], f"{r['budget_pct']} % ({r['reviewed']})",
             f"{100 * r['failing_passed_before']:.0f} → {100 * r['failing_passed_after']:.0f} %",
             str(r["caught"]), str(r["wrong_marks_reviewed"]), str(r["passing_reviewed"])] for r in rows]
    return f"### {name}\n\n" + "\n".join(md_table(head, body))


def _smoke_run(root: Path) -> Path:
    """A k-fold run's pooled predictions and folds.json made up of 200 answers (a weak reading passed at times)."""
    rng = np.random.default_rng(0)
    n = 200
    truth = rng.integers(0, 6, n)
    read = np.clip(1 + 2 * truth[:, None] / 5 + rng.normal(0, 0.4, (n, 2)), 1, 3)  # (N, 2) expected levels 1..3
    mark = np.clip(truth + rng.integers(0, 3, n), 0, 5)
    df = pd.DataFrame({"id": [f"a{i}" for i in range(n)], "grade_true": truth, "grade": mark,
                       "grade_prob": rng.uniform(0.4, 1.0, n)})
    for k, key in enumerate(("A", "B")):
        p3 = (read[:, k] - 1) / 2
        df[f"{key}_p1"], df[f"{key}_p2"], df[f"{key}_p3"] = (1 - p3) * 0.8, 0.2 * np.ones(n), p3 * 0.8
        df[f"{key}_expected"] = read[:, k]
    run = root / "smoke"
    run.mkdir(parents=True)
    df.to_csv(run / "pooled_predictions.csv", index=False)
    (run / "folds.json").write_text(json.dumps({"pass_mark": 3, "reliability": {"sigma2_mean": [0.05, 0.1]}}))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=RUNS, help="kept k-fold runs (with pooled_predictions.csv), comma-separated")
    ap.add_argument("--budgets", default="5,10,20", help="review budgets, percent of the answers")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/review_queue"))
    ap.add_argument("--smoke", action="store_true", help="a made-up run of 200 answers, written to a temp folder")
    a = ap.parse_args()
    budgets = [int(b) for b in a.budgets.split(",")]
    tmp = tempfile.TemporaryDirectory() if a.smoke else None
    runs = [_smoke_run(Path(tmp.name))] if tmp else [Path(r) for r in a.runs.split(",")]
    out = Path(tmp.name) / "out" if tmp else a.out
    result, text = {}, ["# The review queue and failing answers", ""]
    for run in runs:
        if not (run / "pooled_predictions.csv").is_file():
            sys.exit(f"{run}: no pooled_predictions.csv (a finished k-fold run's folder); pass --runs")
        summary = json.loads((run / "folds.json").read_text(encoding="utf-8"))
        pooled = pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})
        pm = summary.get("pass_mark", 3)  # folds.json: {"pass_mark": 3, "costs": ...}
        pass_mark = int(pm["pass_mark"] if isinstance(pm, dict) else pm)
        rows = measure(pooled, (summary.get("reliability") or {}).get("sigma2_mean"), pass_mark, budgets)
        result[str(run)] = rows
        text.append(_markdown(str(run), rows))
    out.mkdir(parents=True, exist_ok=True)
    (out / "review_queue.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "review_queue.md").write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))
    print(f"wrote {out / 'review_queue.json'} and review_queue.md")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
