"""What LCEC does in a k-fold run of the default: shrinkage, interventions by conditioning, LCEC on vs off, σ² vs noise.

For every finished fold of a Mohler k-fold run (``rubrictool train --benchmark mohler --folds 5 --out RUN``; the folds
keep their model.safetensors), on that fold's test answers, pooled over the folds found:

1. the run as trained: T-Acc, T-F1, QWK, grade NLL and ECE (10 equal-width bins of the top grade's probability),
   LCEC's mean A_kk and its partial correlations −Ω_ij/√(Ω_ii Ω_jj);
2. interventions (reccbm.grades_from_levels, which conditions LCEC on the given levels when model.condition is on):
   oracle on all concepts and on the k most uncertain, the most damaging wrong level on all concepts;
3. LCEC off on the same encoder: a copy of the model without LCEC whose grade head (W, U) is refitted by Stage II on
   the same training outputs with the same settings; paired bootstrap (items) of on − off for T-Acc, T-F1, QWK,
   and the differences in NLL and ECE;
4. σ_k² against the noise they claim: σ²_implied,k = v_k (1 − A_kk) / A_kk (v_k = var(c_k/M) over the training labels)
   and the learned σ_k², against σ̂_k² = var(s̃_k − c_k/M) on the pooled test answers: Spearman ρ with a bootstrap CI
   over concepts; and ρ(σ²_implied, 1 − α_k).

    .venv/bin/python lab/lcec_conditioning.py RUN [--out lab/results/lcec_conditioning.json]

Concept labels: majority vote over three LLM annotation passes (Mohler), NOT validated by experts.
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

import reccbm
from reccbm import StageIIConfig
from reccbm.config import config_from_dict
from rubrictool.evaluate import paired_bootstrap, spearman_with_ci
from rubrictool.grade import inputs_for
from rubrictool.pipeline import benchmark_table


def ece(probs: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error of the top grade's probability, equal-width bins."""
    conf, pred = probs.max(1), probs.argmax(1)
    edges = np.linspace(0, 1, bins + 1)
    err = 0.0
    for lo, hi in itertools.pairwise(edges):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            err += m.mean() * abs(float((pred[m] == y[m]).mean()) - float(conf[m].mean()))
    return float(err)


def nll(probs: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, 1)).mean())


def encode(model: Any, tok: Any, rows: Any, keys: list[str], smin: int, gmin: int) -> reccbm.EncodedItems:
    c = rows[keys].to_numpy(np.int64) - smin
    y = rows["grade"].to_numpy(np.int64) - gmin
    return reccbm.EncodedItems(inputs_for(model, tok, rows), c, y)


def lcec_off(model: reccbm.RecCBM, cfg: dict[str, Any], p_tr: torch.Tensor, tr: reccbm.EncodedItems,
             p_dev: torch.Tensor,
             dev: reccbm.EncodedItems) -> reccbm.RecCBM:
    """The same encoder and concept heads, no LCEC; W, U refitted on the training outputs (Stage II settings of the
    run)."""
    off = reccbm.RecCBM(replace(model.config, lcec=False), model.encoder)  # type: ignore[arg-type]
    off.bottleneck.load_state_dict(model.bottleneck.state_dict())
    off.W.load_state_dict(model.W.state_dict())
    if model.U is not None and off.U is not None:
        off.U.data.copy_(model.U.data)
    s2 = config_from_dict(StageIIConfig, cfg["stage2"])
    reccbm.train_grader(off, p_tr, torch.tensor(tr.concepts), torch.tensor(tr.grades), p_dev, torch.tensor(dev.grades),
                        s2)
    return off


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, default=Path("lab/results/lcec_conditioning.json"))
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args()
    import yaml

    torch.set_num_threads(2)
    rb, table, agreement = benchmark_table("mohler", a.data_dir)
    table = table.assign(id=table["id"].astype(str)).set_index("id", drop=False)
    keys, smin, gmin, M = rb.keys, rb.scale.min, rb.grade.min, rb.M
    pooled: dict[str, list[Any]] = {k: [] for k in ("y", "c", "c_hat", "p_on", "p_off", "p_oracle", "p_wrong", "p_k1",
                                                    "p_k2")}
    per_fold = []
    for fold in sorted(a.run.glob("fold-*/model.safetensors")):
        d = fold.parent
        model, tok, _ = reccbm.load_checkpoint(d)
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        split = json.loads((d / "split.json").read_text())
        sets = {s: encode(model, tok, table.loc[[str(i) for i in split[s]]], keys, smin, gmin)
                for s in ("train", "dev", "test")}
        preds = {s: reccbm.predict(model, sets[s], tok.pad_token_id) for s in sets}
        te, p_te = sets["test"], preds["test"].p_hat
        assert te.concepts is not None and te.grades is not None and p_te is not None
        rel = reccbm.reliability(model)
        A, Omega = rel["A"], rel["Omega"]
        pc = reccbm.partial_correlations(Omega)
        off = np.abs(pc[~np.eye(len(keys), dtype=bool)])
        v = (sets["train"].concepts / M).var(0)  # type: ignore[operator]
        akk = np.clip(np.diag(A), 1e-6, None)
        per_fold.append({"fold": d.name, "mean_A_kk": float(np.diag(A).mean()), "A_kk": np.diag(A).tolist(),
                         "sigma2": rel["sigma2"].tolist(), "sigma2_implied": (v * (1 - akk) / akk).tolist(),
                         "max_abs_partial_corr": float(off.max()), "mean_abs_partial_corr": float(off.mean())})
        ones = np.ones_like(te.concepts, dtype=bool)
        order = np.argsort(reccbm.concept_order(p_te, "uncertain"), axis=1)
        wrong = reccbm.intervention_levels(model, p_te, te.concepts, te.grades, "wrong")
        p_tr = torch.as_tensor(preds["train"].p_hat)
        p_dev = torch.as_tensor(preds["dev"].p_hat)
        noll = lcec_off(model, cfg, p_tr, sets["train"], p_dev, sets["dev"])
        with torch.no_grad():
            p_off = noll.grade_from_concepts(torch.as_tensor(p_te).float()).grade_logits.softmax(-1).numpy()
        pooled["y"].append(te.grades)
        pooled["c"].append(te.concepts)
        pooled["c_hat"].append(preds["test"].c_hat)
        pooled["p_on"].append(preds["test"].grade_probs)
        pooled["p_off"].append(p_off)
        pooled["p_oracle"].append(reccbm.grades_from_levels(model, p_te, te.concepts, ones))
        pooled["p_wrong"].append(reccbm.grades_from_levels(model, p_te, wrong, ones))
        pooled["p_k1"].append(reccbm.grades_from_levels(model, p_te, te.concepts, order < 1))
        pooled["p_k2"].append(reccbm.grades_from_levels(model, p_te, te.concepts, order < 2))
        print(f"{d.name}: mean A_kk {per_fold[-1]['mean_A_kk']:.3f}, max |partial corr| {off.max():.3f}", flush=True)
    if not per_fold:
        raise SystemExit(f"{a.run}: no fold with model.safetensors")
    P = {k: np.concatenate(v) for k, v in pooled.items()}
    y = P["y"]

    def grade(p: np.ndarray) -> dict[str, float]:
        return reccbm.grade_metrics(y, p.argmax(1)) | {"nll": nll(p, y), "ece": ece(p, y)}

    res: dict[str, Any] = {"run": str(a.run), "folds": [f["fold"] for f in per_fold], "n_items": len(y),
                           "labels": "majority vote over three LLM annotation passes, not expert-validated"}
    res["metrics"] = {k: grade(P[f"p_{k}"]) for k in ("on", "off", "oracle", "wrong", "k1", "k2")}
    res["on_minus_off"] = {m: paired_bootstrap(y, P["p_off"].argmax(1), P["p_on"].argmax(1), m)
                           for m in ("t_acc", "t_f1", "qwk")}
    rng = np.random.default_rng(0)
    boots = {"nll": [], "ece": []}
    for _ in range(1000):
        i = rng.integers(0, len(y), len(y))
        boots["nll"].append(nll(P["p_on"][i], y[i]) - nll(P["p_off"][i], y[i]))
        boots["ece"].append(ece(P["p_on"][i], y[i]) - ece(P["p_off"][i], y[i]))
    for k, b in boots.items():
        res["on_minus_off"][k] = {"diff": res["metrics"]["on"][k] - res["metrics"]["off"][k],
                                  "lo": float(np.percentile(b, 2.5)), "hi": float(np.percentile(b, 97.5))}
    res["oracle_minus_none"] = {m: paired_bootstrap(y, P["p_on"].argmax(1), P["p_oracle"].argmax(1), m)
                                for m in ("t_acc", "qwk")}
    res["wrong_minus_none"] = {m: paired_bootstrap(y, P["p_on"].argmax(1), P["p_wrong"].argmax(1), m)
                               for m in ("t_acc", "qwk")}
    sig_hat = ((P["c_hat"] - P["c"]) / M).var(0)
    implied = np.mean([f["sigma2_implied"] for f in per_fold], 0)
    learned = np.mean([f["sigma2"] for f in per_fold], 0)
    alpha = np.array([agreement["concepts"][k]["alpha"] for k in keys], float)
    res["concepts"] = {"keys": keys, "sigma2_hat": sig_hat.tolist(), "sigma2_implied": implied.tolist(),
                       "sigma2_learned": learned.tolist(), "alpha": alpha.tolist(),
                       "mean_A_kk": float(np.mean([f["mean_A_kk"] for f in per_fold]))}
    res["rho"] = {"implied_vs_hat": spearman_with_ci(implied, sig_hat),
                  "learned_vs_hat": spearman_with_ci(learned, sig_hat),
                  "implied_vs_1_minus_alpha": spearman_with_ci(implied, 1 - alpha),
                  "learned_vs_1_minus_alpha": spearman_with_ci(learned, 1 - alpha)}
    res["per_fold"] = per_fold
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1, default=float) + "\n")
    print(json.dumps({k: res[k] for k in ("metrics", "on_minus_off", "oracle_minus_none", "wrong_minus_none", "rho")},
                     indent=1, default=float))


if __name__ == "__main__":
    main()
