"""A trained run's grader read four ways, without training anything: as trained (argmax on the answer as written),
with the answer normalised (``model.normalise``), with cutpoints fitted on its dev answers (``stage2.decision``), and
with both — each measured on the run's test answers (grade quality, failing answers) and by the behavioural suite.

    python lab/grader_variants.py RUN [RUN …] --out lab/results/grader-variants/NAME

The runs' models were trained on answers as written: "normalised" here is a grading-time change only (a model trained
with ``model.normalise`` would also read its training answers so). Runs given together (the folds of a k-fold run)
are pooled. Concept labels (Mohler): majority vote over three independent LLM annotation passes, NOT validated by
experts.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pandas as pd

import reccbm
from reccbm.decision import cost_matrix, decide, fit_cutpoints, pass_index
from reccbm.metrics import macro_f1, quadratic_weighted_kappa
from rubrictool.behaviour import read_pairs, suite_on_run, summarise
from rubrictool.grade import inputs_for
from rubrictool.report.run import open_run, split_rows
from rubrictool.textsafe import md_table

PAIRS = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "mohler_minimal_pairs.jsonl"
VARIANTS = {"as trained": (False, False), "normalised": (True, False), "cutpoints": (False, True),
            "normalised + cutpoints": (True, True)}


def _probs(run: Any, part: str) -> tuple[np.ndarray, np.ndarray]:
    rows = split_rows(run, part)
    feats = inputs_for(run.model, run.tokenizer, rows)
    preds = reccbm.predict(run.model, reccbm.EncodedItems(feats), run.tokenizer.pad_token_id, 64)
    return preds.grade_probs, rows["_y"].to_numpy(np.int64)


def _headline(r: dict[str, Any]) -> str:
    """A test's figure against its target: marks changed (invariance), top-marked answers lowered by a mark or more
    (must fall), the mean gain (must not rise), right above wrong (minimal pairs); "no" marks a missed target."""
    miss = "" if r.get("passes") in (True, None) else " (no)"
    if r["expect"] == "same":
        return f"{r['share_changed']:.1%} changed{miss}"
    if r["expect"] == "falls":
        return f"{r['share_top_fell']:.0%} of 4–5 fell{miss}"
    if r["expect"] == "not_up":
        return f"{r['mean_shift']:+.2f}{miss}"
    return f"{r['share_expected']:.0%} right > wrong{miss}"


def markdown(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table, its index as the first column."""
    head = [str(frame.index.name or ""), *(str(c) for c in frame.columns)]
    return "\n".join(md_table(head, ([i, *row] for i, row in zip(frame.index, frame.to_numpy())))).rstrip("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fail-passed", type=float, default=2.0)
    ap.add_argument("--pass-failed", type=float, default=1.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = read_pairs(PAIRS) if PAIRS.is_file() else None
    quality: dict[str, dict[str, list[np.ndarray]]] = {v: {"y": [], "pred": []} for v in VARIANTS}
    suites: dict[str, list[tuple[pd.DataFrame, pd.DataFrame]]] = {v: [] for v in VARIANTS}
    grades: tuple[int, int] = (0, 0)
    for path in args.runs:
        run = open_run(path)
        run.load_table()
        model = run.model
        base_cfg = model.config
        n = base_cfg.num_grades
        grades = (run.grade_min, run.grade_min + n - 1)
        for name, (norm, cut) in VARIANTS.items():
            model.config = replace(base_cfg, normalise=norm)
            model.decision = None
            if cut:
                dev_p, dev_y = _probs(run, "dev")
                cost = cost_matrix(n, pass_index(n), args.fail_passed, args.pass_failed)
                model.decision = fit_cutpoints(dev_p, dev_y, cost)
            test_p, test_y = _probs(run, "test")
            quality[name]["y"].append(test_y)
            quality[name]["pred"].append(decide(test_p, model.decision))
            res = suite_on_run(run, pairs=pairs)
            suites[name].append((res.items, res.pairs))
            print(f"{path} {name}: done", flush=True)
        model.config, model.decision = base_cfg, None
    rows, out = [], {}
    n_marks = grades[1] - grades[0] + 1
    p_idx = pass_index(n_marks)
    for name in VARIANTS:
        y, pred = np.concatenate(quality[name]["y"]), np.concatenate(quality[name]["pred"])
        fail = y < p_idx
        items = pd.concat([s[0] for s in suites[name]], ignore_index=True)
        prs = pd.concat([s[1] for s in suites[name]], ignore_index=True) if any(
            s[1] is not None for s in suites[name]) else pd.DataFrame()
        summary = summarise(items, prs, grades)
        out[name] = {"t_acc": float((pred == y).mean()), "t_f1": macro_f1(y, pred),
                     "qwk": quadratic_weighted_kappa(y, pred, n_marks),
                     "fail_passed": float((pred[fail] >= p_idx).mean()),
                     "fail_error": float((pred[fail] - y[fail]).mean()), "n_test": len(y),
                     "suite": summary.to_dict(orient="records")}
        row: dict[str, Any] = {"grader": name, "QWK": f"{out[name]['qwk']:.3f}", "T-Acc": f"{out[name]['t_acc']:.3f}",
                               "T-F1": f"{out[name]['t_f1']:.3f}", "failing passed": f"{out[name]['fail_passed']:.0%}",
                               "failing error": f"{out[name]['fail_error']:+.2f}"}
        for r in summary.to_dict(orient="records"):
            row[str(r["test"])] = _headline(r)
        rows.append(row)
    (args.out / "variants.json").write_text(json.dumps(out, indent=1, default=float) + "\n")
    table = markdown(pd.DataFrame(rows).set_index("grader").T)
    (args.out / "variants.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
