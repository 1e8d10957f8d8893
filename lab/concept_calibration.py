"""The concept reader's level shares, recalibrated on the dev answers: do the levels read better, and the grades?

The default's concept heads give the top level more often than the labels do, on random folds too (on Mohler the
mean p̂ of a concept's top level is well above that level's share of the answers). Here, per concept, a bias b_k on
the log-probabilities (M + 1 values, the first fixed at 0) is fitted on the run's dev answers (answers the encoder
never trained on) by their negative log-likelihood: p̃_k = softmax(log p̂_k + b_k), what temperature scaling is for
a classifier's confidence but for its level shares (``stage2.calibrate``: reccbm.model.fit_level_bias). Then, on the
run's test answers:

- C-Acc of argmax p̃ against argmax p̂, paired (bootstrap over answers), and per concept;
- the grades: the head refitted (Stage II, head only, the run's settings) through LCEC set by its moments, once on
  the calibrated p̃ and once on p̂ (so that the refit's own change is not counted), paired.

    python lab/concept_calibration.py RUN [RUN...] [--json out.json]

RUN: fold runs with their weights (``train --folds`` or ``benchmarks/folds.py``). Concept labels of the Mohler runs:
majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lcec_moments import boot, paired_grades, scores
from numpy.typing import NDArray

from reccbm.model import calibrated, fit_level_bias


def study(run: Path) -> dict[str, Any]:
    import yaml

    import reccbm

    df, keys, M, model = scores(run)
    cfg = yaml.safe_load((run / "config.yaml").read_text())["stage2"]
    s2 = reccbm.StageIIConfig(**{f.name: cfg[f.name] for f in fields(reccbm.StageIIConfig) if f.name in cfg})
    grade_min = int(json.loads((run / "model.json").read_text())["grade"][0])

    def part(p: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = df[df["part"] == p]
        P = torch.tensor(np.stack([d[[f"{k}_p{m + 1}" for m in range(M + 1)]].to_numpy(float) for k in keys], 1))
        c = torch.tensor(d[[f"{k}_true" for k in keys]].to_numpy() - 1)
        y = torch.tensor(d["grade_true"].round().to_numpy().astype(int) - grade_min)
        return P, c, y

    parts = {p: part(p) for p in ("train", "dev", "test")}
    b = fit_level_bias(parts["dev"][0], parts["dev"][1])  # what stage2.calibrate fits (reccbm.model)

    def cal(P: torch.Tensor) -> torch.Tensor:
        return calibrated(P, b)

    (Pte, cte, yte) = parts["test"]
    raw_hits = (Pte.argmax(-1) == cte).double()  # (n, K)
    cal_hits = (cal(Pte).argmax(-1) == cte).double()
    out: dict[str, Any] = {"run": str(run), "answers": len(cte), "bias": b.numpy().round(3).tolist(),
                           "c_acc": float(raw_hits.mean()), "c_acc_calibrated": float(cal_hits.mean()),
                           "c_acc_change_ci": boot((cal_hits - raw_hits).mean(1).numpy()),
                           "per_concept": {k: [float(raw_hits[:, i].mean()), float(cal_hits[:, i].mean())]
                                           for i, k in enumerate(keys)},
                           "top_share": {"labels": float((cte == M).double().mean()),
                                         "p_hat": float(Pte[..., M].mean()),
                                         "calibrated": float(cal(Pte)[..., M].mean())}}
    grades: dict[str, NDArray[Any]] = {}
    for name, f in (("refit", lambda P: P), ("refit_calibrated", cal)):
        m = copy.deepcopy(model)
        (Ptr, ctr, ytr), (Pdv, cdv, ydv) = parts["train"], parts["dev"]
        Ptr, Pdv, Pt = f(Ptr).float(), f(Pdv).float(), f(Pte).float()
        m.lcec.set_from_moments(ctr.double() / M, reccbm.model.expected_scores(Pdv.double()) / M, cdv.double() / M,
                                float(s2.lcec_ridge))
        torch.manual_seed(0)
        reccbm.train_grader(m, Ptr, ctr, ytr, Pdv, ydv, s2, head_only=True, device="cpu")
        with torch.no_grad():
            grades[name] = m.grade_from_concepts(Pt).grade_logits.argmax(1).numpy()
    t = yte.numpy()
    new, old = grades["refit_calibrated"], grades["refit"]
    out |= paired_grades(t, old, new, ("refit", "refit_calibrated"))
    out["_hits"] = (raw_hits.mean(1).numpy(), cal_hits.mean(1).numpy())
    out["_grades"] = (t, old, new)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    folds = []
    for run in a.runs:
        r = study(run)
        folds.append(r)
        print(f"{run}: C-Acc {r['c_acc']:.3f} -> {r['c_acc_calibrated']:.3f} calibrated "
              f"([{r['c_acc_change_ci'][0]:+.3f}, {r['c_acc_change_ci'][1]:+.3f}]); top-level share labels "
              f"{r['top_share']['labels']:.3f}, p̂ {r['top_share']['p_hat']:.3f}, calibrated "
              f"{r['top_share']['calibrated']:.3f}; grades refitted: T-Acc {r['refit']['t_acc']:.3f} -> "
              f"{r['refit_calibrated']['t_acc']:.3f}, QWK {r['refit']['qwk']:.3f} -> "
              f"{r['refit_calibrated']['qwk']:.3f}",
              flush=True)
    raw = np.concatenate([r["_hits"][0] for r in folds])
    cal = np.concatenate([r["_hits"][1] for r in folds])
    from sklearn.metrics import cohen_kappa_score

    t = np.concatenate([r["_grades"][0] for r in folds])
    old = np.concatenate([r["_grades"][1] for r in folds])
    new = np.concatenate([r["_grades"][2] for r in folds])
    rng = np.random.default_rng(0)
    idx = [rng.integers(0, len(t), len(t)) for _ in range(2000)]
    qd = [cohen_kappa_score(t[i], new[i], weights="quadratic") - cohen_kappa_score(t[i], old[i], weights="quadratic")
          for i in idx]
    q_old, q_new = (float(cohen_kappa_score(t, g, weights="quadratic")) for g in (old, new))
    pooled = {"answers": len(raw), "c_acc": float(raw.mean()), "c_acc_calibrated": float(cal.mean()),
              "c_acc_change_ci": boot(cal - raw),
              "t_acc_refit": float((old == t).mean()), "t_acc_refit_calibrated": float((new == t).mean()),
              "t_acc_change_ci": boot((new == t).astype(float) - (old == t)),
              "qwk_refit": q_old, "qwk_refit_calibrated": q_new,
              "qwk_change_ci": [float(np.percentile(qd, 2.5)), float(np.percentile(qd, 97.5))]}
    print(f"pooled over {len(folds)} runs ({len(raw)} answers): C-Acc {pooled['c_acc']:.3f} -> "
          f"{pooled['c_acc_calibrated']:.3f} ([{pooled['c_acc_change_ci'][0]:+.3f}, "
          f"{pooled['c_acc_change_ci'][1]:+.3f}]); grades refitted: T-Acc {pooled['t_acc_refit']:.3f} -> "
          f"{pooled['t_acc_refit_calibrated']:.3f} ([{pooled['t_acc_change_ci'][0]:+.3f}, "
          f"{pooled['t_acc_change_ci'][1]:+.3f}]), QWK {q_old:.3f} -> {q_new:.3f} ([{pooled['qwk_change_ci'][0]:+.3f}, "
          f"{pooled['qwk_change_ci'][1]:+.3f}])")
    if a.json:
        for r in folds:
            r.pop("_hits")
            r.pop("_grades")
        a.json.write_text(json.dumps({"pooled": pooled, "folds": folds,
                                      "labels": "three LLM annotation passes' majority, not expert-validated"},
                                     indent=2) + "\n")


if __name__ == "__main__":
    main()
