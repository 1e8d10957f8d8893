"""LCEC's prior from the labels: does a correction of one concept by an expert improve the others?

LCEC's Gaussian model (reccbm/lcec.py, Eq. 17-20): latent levels z ~ N(μ₀, Ω⁻¹), the concept head's scores
s̃ | z ~ N(z, D). Fitted by gradient (L_den + λ_s L_spa, the default's ``stage2.lcec_fit: dev``) its Ω ends near
diagonal on Mohler, so an expert's level for one concept moves no other. This study sets the two by their moments
instead (empirical Bayes): Ω⁻¹ = the covariance of the adjudicated levels c/M over the training answers (a ridge of
``--ridge`` × its diagonal added), μ₀ their mean, D = diag of the mean squared error of s̃ against c/M on the dev
answers (answers the encoder never trained on). Then, on the run's test answers:

- the levels read from the posterior mean (round(M · μ_post)) against the head's own (argmax p̂);
- for each concept k corrected by an expert (conditioned on its adjudicated level: Eq. 20 with d_k = 0), the accuracy
  of the *other* concepts' posterior levels against no correction — with the run's learned LCEC and with the moments.

    python lab/lcec_moments.py runs/mohler-reccbm [--json out.json]

Reads the run's table copy, split and weights; grades every answer once. Concept labels of the Mohler runs: majority
vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray


def scores(run: Path) -> tuple[pd.DataFrame, list[str], int, Any]:
    """Every answer of the run's table graded once: its p̂ columns, with the adjudicated levels and the split part."""
    from rubrictool.grade import grade_loaded, load_grader

    table = pd.read_csv(run / "table.csv", dtype={"id": str})
    split = json.loads((run / "split.json").read_text())
    part = {str(i): p for p in ("train", "dev", "test") for i in split[p]}
    grader = load_grader(run)
    model = grader.model_
    graded = grade_loaded(grader, table, flags=False, device="cpu")  # every answer once; the run folder is not written
    keys = [c[: -len("_level")] for c in graded.columns if c.endswith("_level")]
    df = table[["id", "grade", *keys]].rename(columns={"grade": "grade_true", **{k: f"{k}_true" for k in keys}}).merge(
        graded, on="id")
    df["part"] = df["id"].map(part)
    return df, keys, model.config.M, model


def posterior(s: NDArray[Any], mu0: NDArray[Any], C: NDArray[Any], d: NDArray[Any],
              observed: NDArray[Any] | None = None) -> NDArray[Any]:
    """μ_post = μ₀ + C (C + D_i)⁻¹ (x − μ₀), D_i = diag(d) with d_k = 0 where observed (then x_k is the expert's)."""
    out = np.empty_like(s)
    for i in range(len(s)):
        di = d.copy() if observed is None else np.where(observed[i], 0.0, d)
        out[i] = mu0 + C @ np.linalg.solve(C + np.diag(di), s[i] - mu0)
    return out


def study(df: pd.DataFrame, keys: list[str], M: int, model: Any, ridge: float) -> dict[str, Any]:
    lv_true = {p: df.loc[df["part"] == p, [f"{k}_true" for k in keys]].to_numpy(float) - 1
               for p in ("train", "dev", "test")}
    p_cols = [[f"{k}_p{m + 1}" for m in range(M + 1)] for k in keys]
    s = {p: np.stack([(df.loc[df["part"] == p, cols].to_numpy(float) * np.arange(M + 1)).sum(1) for cols in p_cols],
                     1) / M
         for p in ("train", "dev", "test")}
    head_levels = df.loc[df["part"] == "test", [f"{k}_level" for k in keys]].to_numpy(float) - 1
    z_train = lv_true["train"] / M
    C_lab = np.cov(z_train.T)
    C_m = C_lab + ridge * np.diag(np.diag(C_lab))
    mu_m = z_train.mean(0)
    d_m = ((s["dev"] - lv_true["dev"] / M) ** 2).mean(0)
    lcec = model.lcec
    with torch.no_grad():
        C_l = torch.linalg.inv(lcec.precision()).numpy()
        d_l, mu_l = lcec.noise_variance().numpy(), lcec.mu0.double().numpy()
    truth = lv_true["test"]
    K = len(keys)

    def acc(levels: NDArray[Any], cols: NDArray[Any] | None = None) -> float:
        """Share of (answer, concept) levels right, over the concepts ``cols`` (all by default)."""
        cols = np.ones(K, bool) if cols is None else cols
        return float((levels[:, cols] == truth[:, cols]).mean())

    def read(mu: NDArray[Any]) -> NDArray[Any]:
        return np.clip(np.rint(mu * M), 0, M)

    out: dict[str, Any] = {"answers": len(truth), "head_c_acc": acc(head_levels),
                           "label_corr": np.corrcoef(z_train.T).round(3).tolist()}
    for name, (mu0, C, d) in {"learned": (mu_l, C_l, d_l), "moments": (mu_m, C_m, d_m)}.items():
        prior_corr = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))
        base = read(posterior(s["test"], mu0, C, d))
        others_none, others_cond, per_answer = [], [], []
        for k in range(K):
            obs = np.zeros_like(truth, dtype=bool)
            obs[:, k] = True
            x = s["test"].copy()
            x[:, k] = truth[:, k] / M
            cond = read(posterior(x, mu0, C, d, obs))
            mask = np.ones(K, bool)
            mask[k] = False
            others_none.append(acc(base, mask))
            others_cond.append(acc(cond, mask))
            per_answer.append(((cond[:, mask] == truth[:, mask]).mean(1), (base[:, mask] == truth[:, mask]).mean(1)))
        gains = np.mean([(cond_hits - none_hits) for cond_hits, none_hits in per_answer], 0)
        out[name] = {"others_gain_ci": boot(gains),
                     "posterior_c_acc": acc(base), "others_c_acc_uncorrected": float(np.mean(others_none)),
                     "others_c_acc_one_corrected": float(np.mean(others_cond)),
                     "per_corrected_concept": dict(zip(keys,
                                                       [round(b - a, 4) for a, b in zip(others_none, others_cond)])),
                     "sigma2": dict(zip(keys, np.round(d, 4).tolist())),
                     "max_prior_corr": float(np.abs(prior_corr - np.eye(K)).max())}
    return out


def boot(diff: NDArray[Any], n_boot: int = 2000, seed: int = 0) -> list[float]:
    """95 % percentile CI of the mean of ``diff`` (one value per answer) over resampled answers."""
    rng = np.random.default_rng(seed)
    means = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(n_boot)]
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def refit_grades(run: Path, df: pd.DataFrame, keys: list[str], M: int, model: Any, ridge: float) -> dict[str, Any]:
    """The run's head refitted (Stage II, head only, the run's stage2 settings) through LCEC set by moments, on the
    cached p̂ of the training answers: test grades of the run as trained and of the refit, paired."""
    import copy
    from dataclasses import fields

    import yaml

    import reccbm
    from reccbm.model import expected_scores

    cfg = yaml.safe_load((run / "config.yaml").read_text())["stage2"]
    s2 = reccbm.StageIIConfig(**{f.name: cfg[f.name] for f in fields(reccbm.StageIIConfig) if f.name in cfg})
    # grades are indices from the scale's low end
    grade_min = int(json.loads((run / "model.json").read_text())["grade"][0])

    def part(p: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = df[df["part"] == p]
        P = torch.tensor(np.stack([d[[f"{k}_p{m + 1}" for m in range(M + 1)]].to_numpy(float) for k in keys], 1),
                         dtype=torch.float32)
        c = torch.tensor(d[[f"{k}_true" for k in keys]].to_numpy() - 1)
        y = torch.tensor(d["grade_true"].round().to_numpy().astype(int) - grade_min)
        return P, c, y

    (Ptr, ctr, ytr), (Pdv, cdv, ydv), (Pte, _, yte) = part("train"), part("dev"), part("test")
    moments = copy.deepcopy(model)
    moments.lcec.set_from_moments(ctr.double() / M, expected_scores(Pdv.double()) / M, cdv.double() / M, ridge)
    reccbm.train_grader(moments, Ptr, ctr, ytr, Pdv, ydv, s2, head_only=True, device="cpu")
    with torch.no_grad():
        own = model.grade_from_concepts(Pte).grade_logits.argmax(1).numpy()
        new = moments.grade_from_concepts(Pte).grade_logits.argmax(1).numpy()
    t = yte.numpy()
    out: dict[str, Any] = {
        "own_matches_graded": float((own + grade_min == df.loc[df["part"] == "test", "grade"]).mean())}
    return out | paired_grades(t, own, new, ("as_trained", "moments"))


def paired_grades(t: NDArray[Any], old: NDArray[Any], new: NDArray[Any], names: tuple[str, str]) -> dict[str, Any]:
    """T-Acc and QWK of two gradings of the same answers (``names``: old's, new's) and new − old with bootstrap 95 %
    CIs over answers: {old: {t_acc, qwk}, new: {...}, t_acc_change: [Δ, lo, hi], qwk_change: [Δ, lo, hi]}."""
    from sklearn.metrics import cohen_kappa_score

    def qwk(y: NDArray[Any], g: NDArray[Any]) -> float:
        return float(cohen_kappa_score(y, g, weights="quadratic"))

    out: dict[str, Any] = {name: {"t_acc": float((g == t).mean()), "qwk": qwk(t, g)}
                           for name, g in zip(names, (old, new))}
    out["t_acc_change"] = [float((new == t).mean() - (old == t).mean()), *boot((new == t).astype(float) - (old == t))]
    rng = np.random.default_rng(0)
    diffs = [qwk(t[i], new[i]) - qwk(t[i], old[i]) for i in (rng.integers(0, len(t), len(t)) for _ in range(2000))]
    out["qwk_change"] = [out[names[1]]["qwk"] - out[names[0]]["qwk"], float(np.percentile(diffs, 2.5)),
                         float(np.percentile(diffs, 97.5))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--ridge", type=float, default=0.0, help="added to the label covariance: ridge × its diagonal")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    df, keys, M, model = scores(a.run)
    out = study(df, keys, M, model, a.ridge) | {"run": str(a.run), "ridge": a.ridge}
    out["grades"] = refit_grades(a.run, df, keys, M, model, a.ridge)
    print(f"{out['answers']} test answers; the head's levels (argmax p̂): C-Acc {out['head_c_acc']:.3f}")
    for name in ("learned", "moments"):
        r = out[name]
        print(f"{name:8s} LCEC: largest prior correlation {r['max_prior_corr']:.3f}; posterior levels C-Acc "
              f"{r['posterior_c_acc']:.3f}; the other concepts {r['others_c_acc_uncorrected']:.3f} -> "
              f"{r['others_c_acc_one_corrected']:.3f} with one corrected (gain 95 % CI [{r['others_gain_ci'][0]:+.3f}, "
              f"{r['others_gain_ci'][1]:+.3f}])")
        print("   gain per corrected concept: " + ", ".join(f"{k} {v:+.3f}"
                                                            for k, v in r["per_corrected_concept"].items()))
    g = out["grades"]
    print(f"grades, head refitted through the moments LCEC: T-Acc {g['as_trained']['t_acc']:.3f} -> "
          f"{g['moments']['t_acc']:.3f} ({g['t_acc_change'][0]:+.3f} [{g['t_acc_change'][1]:+.3f}, "
          f"{g['t_acc_change'][2]:+.3f}]), QWK {g['as_trained']['qwk']:.3f} -> {g['moments']['qwk']:.3f} "
          f"({g['qwk_change'][0]:+.3f} [{g['qwk_change'][1]:+.3f}, {g['qwk_change'][2]:+.3f}]); the run's own head "
          f"reproduces {g['own_matches_graded']:.1%} of its graded test grades")
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
