"""What a few reviewed answers of a new question are worth to the grades of its other answers.

On question-grouped folds the reader reads a new question as a whole too high or too low (lab/
question_offsets.py: the questions' offsets are 10–27 % of the squared error per concept). Given n answers of each test
question with their levels (an expert's review, or the LLM panel run on n answers instead of all), the question's
level shift δ_k per concept is fitted on them (``reccbm.fit_level_tilt``, a Gaussian prior of strength λ) and every
other answer of the question is read with its level shares tilted by δ (``reccbm.shift_levels``: p̃_{k,m} ∝
p̂_{k,m} e^{m δ_k}; LCEC and the head run on the result). Measured on the question's other answers only (the reviewed
ones are known already), against the reader's own reading of the same answers, over ``--draws`` random choices of the
n; paired 95 % CIs by resampling questions.

Needs the k-fold run whose fold weights made the pooled predictions (the concept shares are read from the pooled
table; each fold's LCEC and head from its weights):

    python lab/question_review.py RUN benchmarks/results/folds-by-question/default/pooled_predictions.csv \
        --json lab/results/question_review_default_grouped.json

Concept labels of the Mohler runs: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

import reccbm
from reccbm.metrics import quadratic_weighted_kappa as qwk


def question_of(ids: pd.Series) -> pd.Series:
    """Mohler's answer ids are QUESTION.ANSWER: the question is all before the last dot."""
    return ids.astype(str).str.rsplit(".", n=1).str[0]


def fold_tables(run: Path, pooled: pd.DataFrame) -> list[dict[str, Any]]:
    """Per fold: its model, the test answers' p̂ (N, K, M+1), true levels (N, K; 0..M), true grades (0..S),
    questions, and the grades the reader gives them as read (recomputed from p̂: a check against the pooled table)."""
    from rubrictool.grade import load_grader

    out = []
    for f in sorted(pooled["fold"].unique()):
        grader = load_grader(run / f"fold-{f}")
        model, meta = grader.model_, grader.rubric.as_meta()
        keys, smin, gmin = list(meta["concept_keys"]), int(meta["scale"][0]), int(meta["grade"][0])
        d = pooled[pooled["fold"] == f].reset_index(drop=True)
        L = int(model.config.num_levels)
        p = np.stack([d[[f"{k}_p{smin + j}" for j in range(L)]].to_numpy(float) for k in keys], axis=1)  # (N, K, L)
        p = p / p.sum(-1, keepdims=True)
        base = reccbm.shift_levels(model, reccbm.Predictions(np.zeros((len(d), 1)), p), np.zeros(len(keys)))
        agree = float(np.mean(base.grades + gmin == d["grade"].to_numpy()))
        out.append({"fold": int(f), "model": model, "p": p, "keys": keys,
                    "c": np.stack([d[f"{k}_true"].to_numpy(int) - smin for k in keys], axis=1),
                    "y": d["grade_true"].to_numpy(int) - gmin, "q": question_of(d["id"]).to_numpy(),
                    "base": base, "agree_with_pooled": agree})
    return out


def one_draw(folds: list[dict[str, Any]], n: int, strength: float, rng: np.random.Generator,
             grade_strength: float = 0.0) -> dict[str, np.ndarray]:
    """Every fold's test questions with more than n answers: n reviewed at random, the rest read shifted. Per other
    answer: question, true grade, grade as read / shifted, concepts right as read / shifted (mean over K)."""
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("q", "y", "g0", "g1", "c0", "c1")}
    for fd in folds:
        q, p, c = fd["q"], fd["p"], fd["c"]
        delta = np.zeros(c.shape)  # (N, K): each answer's question's shift
        rest = np.zeros(len(q), dtype=bool)
        chosen = []
        for question in np.unique(q):
            idx = np.flatnonzero(q == question)
            if len(idx) <= n:
                continue
            pick = rng.permutation(idx)
            seen, other = pick[:n], pick[n:]
            d = reccbm.fit_level_tilt(torch.as_tensor(p[seen]), torch.as_tensor(c[seen]), strength).numpy()
            delta[other] = delta[seen] = d
            rest[other] = True
            chosen.append((seen, other))
        shifted = reccbm.shift_levels(fd["model"], fd["base"], delta)
        if grade_strength > 0:  # and the grades tilted by the reviewed answers' grades, on top
            gp = shifted.grade_probs.copy()
            for seen, other in chosen:
                e = reccbm.fit_level_tilt(torch.as_tensor(gp[seen][:, None]), torch.as_tensor(fd["y"][seen][:, None]),
                                          grade_strength).numpy()
                gp[other] = reccbm.tilted(torch.as_tensor(gp[other][:, None]), torch.as_tensor(e)).numpy()[:, 0]
            shifted = reccbm.Predictions(gp, shifted.p_hat)
        rows["q"].append(np.char.add(f"{fd['fold']}:", q[rest].astype(str)))
        rows["y"].append(fd["y"][rest])
        rows["g0"].append(fd["base"].grades[rest])
        rows["g1"].append(shifted.grades[rest])
        rows["c0"].append((fd["base"].p_hat.argmax(2) == c).mean(1)[rest])
        rows["c1"].append((shifted.p_hat.argmax(2) == c).mean(1)[rest])
    return {k: np.concatenate(v) for k, v in rows.items()}


def measures(r: dict[str, np.ndarray], sel: np.ndarray | None = None) -> dict[str, float]:
    s = slice(None) if sel is None else sel
    y, g0, g1 = r["y"][s], r["g0"][s], r["g1"][s]
    return {"t_acc": float(np.mean(g0 == y)), "t_acc_shifted": float(np.mean(g1 == y)),
            "qwk": float(qwk(y, g0)), "qwk_shifted": float(qwk(y, g1)),
            "c_acc": float(np.mean(r["c0"][s])), "c_acc_shifted": float(np.mean(r["c1"][s]))}


def study(folds: list[dict[str, Any]], n: int, strength: float, draws: int, boots: int, seed: int,
          grade_strength: float = 0.0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    runs = [one_draw(folds, n, strength, rng, grade_strength) for _ in range(draws)]
    mean = {k: float(np.mean([measures(r)[k] for r in runs])) for k in measures(runs[0])}
    out: dict[str, Any] = {"n": n, "strength": strength, "grade_strength": grade_strength, "draws": draws,
                           "answers_read": len(runs[0]["y"]), **mean}
    if boots:
        questions = np.unique(runs[0]["q"])
        brng = np.random.default_rng(seed + 1)
        diffs: dict[str, list[float]] = {"t_acc": [], "qwk": [], "c_acc": []}
        at = [{qq: np.flatnonzero(r["q"] == qq) for qq in questions} for r in runs]
        for _ in range(boots):
            pick = brng.choice(questions, len(questions))
            per = [measures(r, np.concatenate([a[qq] for qq in pick])) for r, a in zip(runs, at, strict=True)]
            for k, values in diffs.items():
                values.append(float(np.mean([m[f"{k}_shifted"] - m[k] for m in per])))
        out["gain"] = {k: {"mean": mean[f"{k}_shifted"] - mean[k],
                           "ci95": [float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))]}
                       for k, v in diffs.items()}
    return out


def gains_text(gain: dict[str, dict[str, Any]]) -> str:
    """"name +mean [lo, hi]" for each paired difference."""
    return "  ".join(f"{k} {v['mean']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}]" for k, v in gain.items())


def write_results(path: Path, run: Path, pooled: Path, agree: list[float], results: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"run": str(run), "pooled": str(pooled), "agree_with_pooled": agree, "results": results,
                                "labels": "three LLM passes' majority, not expert-validated"}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="k-fold run folder with fold-N/ weights")
    ap.add_argument("pooled", type=Path, help="its pooled_predictions.csv")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 3, 5, 10])
    ap.add_argument("--strength", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--grade-strength", type=float, default=0.0,
                    help="> 0: also tilt the grades by the reviewed answers' grades (prior strength), after the levels")
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--boots", type=int, default=300, help="question resamples for the CIs (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    folds = fold_tables(a.run, pd.read_csv(a.pooled, dtype={"id": str}))
    agree = [fd["agree_with_pooled"] for fd in folds]
    print(f"grades recomputed from the pooled shares agree with the pooled grades on {min(agree):.3f}+ of each fold")
    results = []
    for s in a.strength:
        for n in a.n:
            r = study(folds, n, s, a.draws, a.boots, a.seed, a.grade_strength)
            results.append(r)
            g = r.get("gain", {})
            ci = gains_text(g)
            print(f"λ {s:g} n {n:2d}: T-Acc {r['t_acc']:.3f}→{r['t_acc_shifted']:.3f} QWK {r['qwk']:.3f}→"
                  f"{r['qwk_shifted']:.3f} C-Acc {r['c_acc']:.3f}→{r['c_acc_shifted']:.3f}  {ci}", flush=True)
    if a.json:
        write_results(a.json, a.run, a.pooled, agree, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
