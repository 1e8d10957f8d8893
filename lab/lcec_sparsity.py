"""How LCEC's sparsity weight λ_s shapes what it learns from new answers, on a k-fold run's fold models.

For each fold model of RUN (the default recipe: LCEC fitted on the dev outputs, the head refitted through it), LCEC is
fitted again from its initial state on the same dev outputs with each λ_s, and the head refitted on the training outputs
(the run's Stage II settings), exactly as ``reccbm.fit`` ends; then on the fold's test answers: grade metrics and NLL,
the oracle intervention (all concepts, and the single most uncertain one) by conditioning, mean A_kk, the partial
correlations −Ω_ij/√(Ω_ii Ω_jj), and ρ(σ²_implied, σ̂²) over concepts.

    .venv/bin/python lab/lcec_sparsity.py RUN --lambda-s 0.005,0.0005,0

Concept labels: majority vote over three LLM annotation passes (Mohler), NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

import reccbm
from reccbm import StageIIConfig
from reccbm.config import config_from_dict
from reccbm.lcec import LatentCorrection
from rubrictool.grade import inputs_for
from rubrictool.pipeline import benchmark_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--lambda-s", default="0.005,0.0005,0")
    ap.add_argument("--out", type=Path, default=Path("lab/results/lcec_sparsity.json"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    rb, table, _ = benchmark_table("mohler")
    table = table.assign(id=table["id"].astype(str)).set_index("id", drop=False)
    keys, M = rb.keys, rb.M
    res: dict[str, Any] = {"run": str(a.run), "labels": "three LLM annotation passes, not expert-validated",
                           "folds": {}}
    for fold in sorted(a.run.glob("fold-*/model.safetensors")):
        d = fold.parent
        model, tok, _ = reccbm.load_checkpoint(d)
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        split = json.loads((d / "split.json").read_text())
        sets = {}
        for s in ("train", "dev", "test"):
            rows = table.loc[[str(i) for i in split[s]]]
            sets[s] = reccbm.EncodedItems(inputs_for(model, tok, rows),
                                          rows[keys].to_numpy(np.int64) - rb.scale.min,
                                          rows["grade"].to_numpy(np.int64) - rb.grade.min)
        p = {s: torch.as_tensor(reccbm.predict(model, sets[s], tok.pad_token_id).p_hat) for s in sets}
        te = sets["test"]
        assert te.concepts is not None and te.grades is not None
        mu0 = model.lcec.mu0.clone() if model.lcec is not None else None
        head = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(("W.", "U"))}
        out = {}
        for ls in [float(x) for x in a.lambda_s.split(",")]:
            s2 = replace(config_from_dict(StageIIConfig, cfg["stage2"]), lambda_s=ls)
            model.lcec = LatentCorrection(len(keys), model.config.eps)
            assert mu0 is not None
            model.lcec.mu0.copy_(mu0)
            model.load_state_dict(head, strict=False)
            reccbm.fit_lcec(model, p["dev"], torch.tensor(sets["dev"].concepts), s2)
            reccbm.train_grader(model, p["train"], torch.tensor(sets["train"].concepts),
                                torch.tensor(sets["train"].grades),
                                p["dev"], torch.tensor(sets["dev"].grades), s2, head_only=True)
            with torch.no_grad():
                model.eval()
                probs = model.grade_from_concepts(p["test"]).grade_logits.softmax(-1).numpy()
            ph = p["test"].numpy()
            ones = np.ones_like(te.concepts, dtype=bool)
            order = np.argsort(reccbm.concept_order(ph, "uncertain"), axis=1)
            oracle = reccbm.grades_from_levels(model, ph, te.concepts, ones)
            k1 = reccbm.grades_from_levels(model, ph, te.concepts, order < 1)
            rel = reccbm.reliability(model)
            A = np.diag(rel["A"])
            pc = reccbm.partial_correlations(rel["Omega"])[~np.eye(len(keys), dtype=bool)]
            v = (sets["train"].concepts / M).var(0)  # type: ignore[operator]
            implied = v * (1 - np.clip(A, 1e-6, None)) / np.clip(A, 1e-6, None)
            c_hat = (ph * np.arange(ph.shape[-1])).sum(-1)
            sig_hat = ((c_hat - te.concepts) / M).var(0)
            from scipy.stats import spearmanr

            y = te.grades
            out[str(ls)] = {
                "none": reccbm.grade_metrics(y, probs.argmax(1)) | {
                    "nll": float(-np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, 1)).mean())},
                "oracle": {k: v for k, v in reccbm.grade_metrics(y, oracle.argmax(1)).items() if k in ("t_acc", "qwk")},
                "k1": {k: v for k, v in reccbm.grade_metrics(y, k1.argmax(1)).items() if k in ("t_acc", "qwk")},
                "mean_A_kk": float(A.mean()), "max_abs_partial": float(np.abs(pc).max()),
                "mean_abs_partial": float(np.abs(pc).mean()),
                "rho_implied_vs_hat": float(spearmanr(implied, sig_hat).statistic),
            }
            print(d.name, ls, json.dumps({k: (round(v, 3) if isinstance(v, float) else
                                              {kk: round(vv, 3) for kk, vv in v.items()})
                                          for k, v in out[str(ls)].items()}),
                  flush=True)
        res["folds"][d.name] = out
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
