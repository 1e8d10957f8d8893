"""Does a grade head fitted on new questions' concept readings grade new questions better?

Stage II and the joint stage fit the grade head on the training answers' own level shares, which the encoder was
trained on: read surer and righter than a new question's ever are. On question-grouped folds the head then trusts
readings that are worse than it learnt (a run's ``metrics.json`` → ``calibration`` shows how much). This study refits
the head on readings of questions their model never saw — the other folds' pooled test readings, each from a model
that did not train on that question — and grades each fold's test answers with it (the fold's own level shares; its
LCEC and bias unchanged unless ``--mode stage2``). That is what a Stage II cross-fitted by question would give,
without training the k extra models; measured against the reader's own grades of the same answers, paired 95 % CIs by
resampling questions.

    python lab/question_head.py ../benchruns/ema-q/default-ema \\
        benchmarks/results/folds-by-question/default/pooled_predictions.csv \\
        --json lab/results/question_head_default_grouped.json

Concept labels of the Mohler runs: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from question_review import fold_tables, gains_text, write_results

import reccbm
from reccbm.config import StageIIConfig
from reccbm.metrics import quadratic_weighted_kappa as qwk
from reccbm.stage2 import train_grader


def stage2_config(run: Path, fold: int) -> StageIIConfig:
    import yaml

    cfg = yaml.safe_load((run / f"fold-{fold}" / "config.yaml").read_text())["stage2"]
    fields = {k: v for k, v in cfg.items() if k in StageIIConfig.__dataclass_fields__}
    return StageIIConfig(**fields)


def refit(fd: dict[str, Any], others: list[dict[str, Any]], cfg: StageIIConfig, mode: str, dev_share: float,
          seed: int) -> np.ndarray:
    """Grades (0..S) of fold ``fd``'s test answers from its model with the head refitted on ``others``' readings."""
    p = np.concatenate([o["p"] for o in others])
    c = np.concatenate([o["c"] for o in others])
    y = np.concatenate([o["y"] for o in others])
    q = np.concatenate([np.char.add(f"{o['fold']}:", o["q"].astype(str)) for o in others])
    rng = np.random.default_rng(seed)
    questions = np.unique(q)
    dev_q = set(rng.choice(questions, max(1, round(dev_share * len(questions))), replace=False))
    dev = np.array([x in dev_q for x in q])
    model = copy.deepcopy(fd["model"])
    t = torch.as_tensor
    train_grader(model, t(p[~dev]).float(), t(c[~dev]).long(), t(y[~dev]).long(), t(p[dev]).float(),
                 t(y[dev]).long(), cfg, head_only=mode == "head", device="cpu")
    pred = reccbm.shift_levels(model, reccbm.Predictions(np.zeros((len(fd["p"]), 1)), fd["p"]),
                               np.zeros(fd["p"].shape[1]))
    return pred.grade_probs


def decide(probs: np.ndarray, rule: str) -> np.ndarray:
    """Grades from grade probabilities: argmax, or the median of the distribution (minimises the expected |error|)."""
    if rule == "argmax":
        return probs.argmax(1)
    return (np.cumsum(probs, 1) >= 0.5).argmax(1)


def paired(rows: dict[str, np.ndarray], boots: int, seed: int) -> dict[str, Any]:
    y, g0, g1, q, top = rows["y"], rows["g0"], rows["g1"], rows["q"], rows["top"]

    def m(s: Any) -> dict[str, float]:
        return {"t_acc": float(np.mean(g1[s] == y[s]) - np.mean(g0[s] == y[s])),
                "qwk": float(qwk(y[s], g1[s]) - qwk(y[s], g0[s])),
                "t_acc_vs_top": float(np.mean(g1[s] == y[s]) - np.mean(y[s] == top))}

    point = m(slice(None))
    questions = np.unique(q)
    at = {qq: np.flatnonzero(q == qq) for qq in questions}
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(boots):
        s = np.concatenate([at[qq] for qq in rng.choice(questions, len(questions))])
        for k, v in m(s).items():
            draws[k].append(v)
    return {k: {"mean": point[k], "ci95": [float(np.quantile(draws[k], 0.025)), float(np.quantile(draws[k], 0.975))]}
            for k in point}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="k-fold run folder with fold-N/ weights")
    ap.add_argument("pooled", type=Path, help="its pooled_predictions.csv")
    ap.add_argument("--mode", choices=["head", "stage2"], nargs="+", default=["head", "stage2"],
                    help="head: the grade head (W, U) refitted, LCEC kept; stage2: LCEC and the head (Stage II)")
    ap.add_argument("--select", nargs="+", default=["t_f1", "nll"],
                    help="Stage II's selection on the held-out questions")
    ap.add_argument("--rule", nargs="+", choices=["argmax", "median"], default=["argmax", "median"],
                    help="how a grade is read from the grade probabilities")
    ap.add_argument("--blend", type=float, nargs="*", default=[],
                    help="also grade with w of the reader's own grade probabilities and 1 - w of the refitted head's")
    ap.add_argument("--dev-share", type=float, default=0.15,
                    help="share of the other folds' questions held out for selection")
    ap.add_argument("--boots", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    pooled = pd.read_csv(a.pooled, dtype={"id": str})
    folds = fold_tables(a.run, pooled)
    agree = [fd["agree_with_pooled"] for fd in folds]
    print(f"grades recomputed from the pooled shares agree with the pooled grades on {min(agree):.3f}+ of each fold")
    top = int(np.bincount(np.concatenate([fd["y"] for fd in folds])).argmax())
    results = []
    base = np.concatenate([fd["base"].grade_probs for fd in folds])
    y = np.concatenate([fd["y"] for fd in folds])
    q = np.concatenate([np.char.add(f"{fd['fold']}:", fd["q"].astype(str)) for fd in folds])
    cases = [("as read", "-", base)]
    for mode in a.mode:
        for select in a.select:
            probs = []
            for fd in folds:
                cfg = replace(stage2_config(a.run, fd["fold"]), select=select)
                probs.append(refit(fd, [o for o in folds if o is not fd], cfg, mode, a.dev_share, a.seed + fd["fold"]))
            refitted = np.concatenate(probs)
            cases.append((mode, select, refitted))
            for w in a.blend:  # the two heads' grade probabilities mixed: w of the reader's own, 1 − w the refitted
                cases.append((f"{mode}+{w:g}", select, w * base + (1 - w) * refitted))
    g0 = decide(base, "argmax")
    for mode, select, probs in cases:
        for rule in a.rule:
            g1 = decide(probs, rule)
            nll = float(-np.mean(np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, None))))
            res = {"mode": mode, "select": select, "rule": rule, "n": len(y), "nll": nll,
                   "t_acc": float(np.mean(g0 == y)), "t_acc_refit": float(np.mean(g1 == y)),
                   "qwk": float(qwk(y, g0)), "qwk_refit": float(qwk(y, g1)),
                   "top_grade_share": float(np.mean(y == top)), "top_grade_given": float(np.mean(g1 == top)),
                   "top_grade_given_as_read": float(np.mean(g0 == top)),
                   "gain": paired({"y": y, "g0": g0, "g1": g1, "q": q, "top": top}, a.boots, a.seed)}
            results.append(res)
            g = res["gain"]
            print(f"{mode:10s} {select:4s} {rule:6s} NLL {nll:.3f}: T-Acc {res['t_acc_refit']:.3f} QWK "
                  f"{res['qwk_refit']:.3f}  "
                  + gains_text(g), flush=True)
    if a.json:
        write_results(a.json, a.run, a.pooled, agree, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
