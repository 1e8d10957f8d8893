"""What the pooled test outputs say about concept noise: the σ_k² and A_kk the data imply, next to LCEC's.

For each configuration of benchmarks/folds.py whose five folds are pooled (``<folds>/<config>/pooled_predictions.csv``:
every Mohler answer's outputs from the fold model that never trained on it), per concept k:

- s̃_k = (E[level] − 1) / M, the model's concept score on the [0, 1] scale, and c_k / M the adjudicated level;
- σ̂_k² = var(s̃_k − c_k/M): the noise of the model's score on new answers (the measurement model s̃ = z + e
  of LCEC, e ~ N(0, σ_k²));
- b_k = cov(c_k/M, s̃_k) / var(s̃_k): the least-squares slope of the label on the score, which is the A_kk that
  minimises L_den (Eq. 24) for a diagonal A; and the reliability of the score,
  var(c_k/M) / (var(c_k/M) + σ̂_k²), which is A_kk of the Remark's diagonal case;
- LCEC's learned σ_k² and A_kk, averaged over the folds (``folds.json``).

It reports Spearman ρ(1 − reliability_k, 1 − α_k) (the noise share of the model's score against the raters'),
and ρ(σ̂_k², 1 − α_k) with two 95 % bootstrap intervals: over concepts (as the runs report
ρ) and over answers (the α_k fixed, σ̂_k² recomputed on resampled answers: how sure the ranking is given
these eight concepts). α_k is the inter-rater α of the three LLM annotation passes.

    # default, paper, vanilla: the pooled predictions in benchmarks/results/folds
    .venv/bin/python lab/reliability.py

Concept labels: majority vote over three LLM annotation passes, NOT validated by experts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr


def concept_noise(pooled: pd.DataFrame, keys: list[str], lo: int, hi: int) -> pd.DataFrame:
    """Per concept: σ̂², the MMSE slope b, the reliability of the score (reccbm.concept_score_reliability), and
    the mean error of the score, from pooled test outputs."""
    from reccbm import concept_score_reliability

    c_hat = pooled[[f"{k}_expected" for k in keys]].to_numpy(float) - lo  # (N, K) in [0, M]
    c = pooled[[f"{k}_true" for k in keys]].to_numpy(float) - lo  # (N, K) in 0..M
    r = concept_score_reliability(c_hat, c, hi - lo)
    return pd.DataFrame({"concept": keys, "sigma2_hat": r["sigma2"], "bias": ((c_hat - c) / (hi - lo)).mean(0),
                         "slope_b": r["slope"], "var_c": (c / (hi - lo)).var(0), "reliability": r["reliability"]})


def rho_over_answers(pooled: pd.DataFrame, keys: list[str], alpha: np.ndarray, lo: int, hi: int, n_boot: int,
                     seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    M = hi - lo
    resid = np.stack([((pooled[f"{k}_expected"].to_numpy(float) - lo) - (pooled[f"{k}_true"].to_numpy(float) - lo)) / M
                      for k in keys], 1)  # (N, K)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(resid), len(resid))
        boots.append(float(spearmanr(resid[idx].var(0), 1 - alpha).statistic))
    lo_, hi_ = np.percentile(boots, [2.5, 97.5])
    return float(lo_), float(hi_)


def main() -> None:
    from rubrictool.evaluate import spearman_with_ci
    from rubrictool.evaluate.reliability import noise_share_rho
    from rubrictool.rubric import load_rubric

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=Path, default=Path("benchmarks/results/folds"),
                    help="a folder of finished k-fold runs (default: the pooled predictions kept in the tree)")
    ap.add_argument("--configs", default="default,paper,vanilla")
    ap.add_argument("--out", type=Path, default=Path("lab/results/reliability_data.json"))
    ap.add_argument("--boot", type=int, default=2000)
    a = ap.parse_args()
    rb = load_rubric("mohler")
    keys, lo, hi = rb.keys, rb.scale.min, rb.scale.max
    out: dict[str, Any] = {}
    for name in a.configs.split(","):
        d = a.folds / name
        if not (d / "pooled_predictions.csv").is_file() or not (d / "folds.json").is_file():
            print(f"{name}: not pooled yet, skipped")
            continue
        pooled = pd.read_csv(d / "pooled_predictions.csv", dtype={"id": str})
        rel = json.loads((d / "folds.json").read_text()).get("reliability") or {}
        alpha = np.asarray(rel.get("alpha") or pd.read_csv(d / "fold-0" / "reliability.csv")["alpha"], float)
        t = concept_noise(pooled, keys, lo, hi)
        t["alpha"] = alpha
        t["lcec_sigma2"] = rel.get("sigma2_mean", [np.nan] * len(keys))
        t["lcec_A_kk"] = rel.get("A_kk_mean", [np.nan] * len(keys))
        ci = spearman_with_ci(t["sigma2_hat"], 1 - alpha)
        ans_lo, ans_hi = rho_over_answers(pooled, keys, alpha, lo, hi, a.boot)
        lcec_ci = spearman_with_ci(t["lcec_sigma2"], 1 - alpha)
        share_ci = noise_share_rho(t["reliability"], alpha)  # noise share of the score vs of the raters
        assert share_ci is not None
        print(f"\n## {name} ({len(pooled)} answers, pooled test outputs)\n")
        print("| concept | α | σ̂² (data) | mean error | slope b (MMSE A_kk) | reliability | LCEC σ² | LCEC A_kk |")
        print("|---|---|---|---|---|---|---|---|")
        for r in t.to_dict("records"):
            print(f"| {r['concept']} | {r['alpha']:.3f} | {r['sigma2_hat']:.4f} | {r['bias']:+.3f} | "
                  f"{r['slope_b']:.3f} | {r['reliability']:.3f} | {r['lcec_sigma2']:.4g} | {r['lcec_A_kk']:.3f} |")
        assert ci is not None
        print(f"\nmean slope b {t['slope_b'].mean():.3f}, mean reliability {t['reliability'].mean():.3f}, "
              f"LCEC mean A_kk {np.nanmean(t['lcec_A_kk']):.3f}")
        print(f"ρ(σ̂², 1 − α) = {ci['rho']:.3f}, 95 % CI over concepts [{ci['lo']:.2f}, {ci['hi']:.2f}], "
              f"over answers [{ans_lo:.2f}, {ans_hi:.2f}]"
              + (f"; LCEC's ρ(σ², 1 − α) = {lcec_ci['rho']:.3f} [{lcec_ci['lo']:.2f}, {lcec_ci['hi']:.2f}]" if lcec_ci
                 else ""))
        print(f"ρ(1 − reliability, 1 − α) = {share_ci['rho']:.3f} [{share_ci['lo']:.2f}, {share_ci['hi']:.2f}]")
        out[name] = {"table": t.to_dict("records"), "rho": ci, "rho_ci_answers": [ans_lo, ans_hi],
                     "lcec_rho": lcec_ci, "rho_noise_share": share_ci}
    path = a.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=float) + "\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    sys.exit(main())
