"""LCEC on outputs for new answers: what keeps the learned A_kk near 1, and what a larger λ_d costs.

Stage II (LCEC and the grade head, from a fresh initialisation) is fitted on the pooled test outputs of a
bench_folds.py configuration (``<folds>/<config>/pooled_predictions.csv``): every answer's p̂ comes from the
fold model that never trained on it, i.e. the outputs cross-fitting gives, for all 2,273 answers at once.
For each of the five folds the head is fitted on the other four folds' outputs (1/8 of them, stratified by
grade, kept for Stage II's dev selection) and tested on the fold's own; the rows pool the five test folds.
Settings vary λ_d (the weight of L_den, Eq. 24) and the share of random interventions while the head trains.
``L_den only`` fits LCEC on L_den alone (no grade head): the A that denoises best.

    .venv/bin/python bench/bench_lcec.py --config default

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pandas as pd
import torch
from bench_stage2 import fresh_head  # the same fresh Stage II head as the Stage II bench

SETTINGS: dict[str, dict[str, Any]] = {
    "λ_d 0.1, interventions 0.25 (the default's Stage II)": {"lambda_d": 0.1, "intervention_p": 0.25},
    "λ_d 0.1, no interventions (the paper's)": {"lambda_d": 0.1, "intervention_p": 0.0},
    "λ_d 1, interventions 0.25": {"lambda_d": 1.0, "intervention_p": 0.25},
    "λ_d 1, no interventions": {"lambda_d": 1.0, "intervention_p": 0.0},
    "λ_d 10, no interventions": {"lambda_d": 10.0, "intervention_p": 0.0},
    "L_den only": {"lambda_d": 1.0, "lambda_t": 0.0, "intervention_p": 0.0},
}


def main() -> None:
    import reccbm
    from rubrictool.evaluate import spearman_with_ci
    from rubrictool.rubric import load_rubric

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=Path, default=Path("bench/results/folds"))
    ap.add_argument("--config", default="default")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rb = load_rubric("mohler")
    d = a.folds / a.config
    pooled = pd.read_csv(d / "pooled_predictions.csv", dtype={"id": str})
    alpha = np.asarray(json.loads((d / "folds.json").read_text())["reliability"]["alpha"], float)
    levels = range(rb.scale.min, rb.scale.max + 1)
    p_all = torch.tensor(np.stack([pooled[[f"{k}_p{m}" for m in levels]].to_numpy(np.float32) for k in rb.keys], 1))
    c_all = torch.tensor(np.stack([pooled[f"{k}_true"].to_numpy() - rb.scale.min for k in rb.keys], 1))
    y_all = torch.tensor(pooled["grade_true"].to_numpy() - rb.grade.min)
    fold = pooled["fold"].to_numpy()
    model, _, _ = reccbm.load_checkpoint(d / "fold-0")
    torch.set_num_threads(1)
    rng = np.random.default_rng(a.seed)
    print(f"config {a.config}: Stage II on the pooled new-answer outputs of {len(pooled)} answers, 5 folds, seed {a.seed}")
    print("| setting | T-Acc | T-F1 | QWK | oracle T-Acc | oracle QWK | mean A_kk | A_kk min–max | ρ(σ², 1 − α) |\n"
          "|---|---|---|---|---|---|---|---|---|")
    results = {}
    for name, kw in SETTINGS.items():
        preds = np.zeros(len(pooled), dtype=int)
        oracle = np.zeros(len(pooled), dtype=int)
        diags, sig = [], []
        for f in range(5):
            train = np.flatnonzero(fold != f)
            dev_mask = np.zeros(len(train), bool)
            for g in np.unique(y_all[train].numpy()):
                idx = np.flatnonzero(y_all[train].numpy() == g)
                dev_mask[rng.permutation(idx)[: max(1, len(idx) // 8)]] = True
            tr, dv, te = train[~dev_mask], train[dev_mask], np.flatnonzero(fold == f)
            torch.manual_seed(a.seed)
            fresh_head(model)
            cfg = reccbm.StageIIConfig(seed=a.seed, **{"lambda_t": 1.0} | kw)
            reccbm.train_grader(model, p_all[tr], c_all[tr], y_all[tr], p_all[dv], y_all[dv], cfg)
            with torch.no_grad():
                preds[te] = model.grade_from_concepts(p_all[te]).grade_logits.argmax(1).numpy()
            c_te = c_all[te].numpy()  # every concept replaced by its adjudicated level
            oracle[te] = reccbm.grades_from_levels(model, p_all[te].numpy(), c_te, np.ones_like(c_te, bool)).argmax(1)
            rel = reccbm.reliability(model)
            diags.append(np.diag(rel["A"]))
            sig.append(rel["sigma2"])
        m = reccbm.grade_metrics(y_all.numpy(), preds)
        m |= {f"oracle_{k}": v for k, v in reccbm.grade_metrics(y_all.numpy(), oracle).items() if k in ("t_acc", "qwk")}
        A = np.mean(diags, 0)
        ci = spearman_with_ci(np.mean(sig, 0), 1 - alpha)
        rho = f"{ci['rho']:.2f} [{ci['lo']:.2f}, {ci['hi']:.2f}]" if ci else "—"
        grade = kw.get("lambda_t", 1.0) > 0
        print(f"| {name} | " + (" | ".join(f"{m[k]:.3f}" for k in ("t_acc", "t_f1", "qwk", "oracle_t_acc", "oracle_qwk")) if grade
                                     else "— | — | — | — | —")
              + f" | {A.mean():.3f} | {A.min():.2f}–{A.max():.2f} | {rho} |", flush=True)
        results[name] = {"metrics": m if grade else None, "A_kk": A.tolist(), "sigma2": np.mean(sig, 0).tolist(),
                         "rho": ci}
    out = d / "lcec_new_answers.json"
    out.write_text(json.dumps(results, indent=2, default=float) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
