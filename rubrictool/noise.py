"""Noise put into one concept on purpose, and which reliability figure finds it (benchmarks/noise.py).

Two kinds of noise, each in one concept k at a given rate:

* label noise (:func:`label_noise`): that share of concept k's adjudicated levels on the given answers (a fold's
  training part) replaced by levels drawn uniformly from the scale — a wrong label that no reviewer's disagreement
  shows;
* reviewer noise (:func:`reviewer_noise`): that share of one reviewer's levels for concept k replaced the same way
  *before* adjudication — α_k falls, and the majority vote absorbs part of it.

:func:`concept_figures` computes, per concept, what the reliability table shows (:func:`rubrictool.evaluate.
reliability_table`) from a model's cached concept outputs p̂ and the labels, with LCEC set by its moments
(``stage2.lcec_fit = "moments"``, :meth:`reccbm.LatentCorrection.set_from_moments`): σ_k² (the dev outputs' squared
error against the dev labels), σ_k²(implied), 1 − A_kk and the test reliability. Given the encoder, these are exactly
what the default recipe's last steps compute from the same labels. :func:`noisy_rank` says where the noisy concept
ranks among all concepts by one figure and :func:`summarise_trials` turns many trials into shares ranked first and
changes against the clean labels with bootstrap CIs over trials.

What this finds on Mohler is said once, in the reliability table's sentence on σ²
(:data:`rubrictool.evaluate.reliability.SIGMA2_MEANING`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray

import reccbm
from rubrictool.errors import DataError

__all__ = [
    "FIGURES",
    "KINDS",
    "concept_figures",
    "label_noise",
    "noisy_rank",
    "rank_figures",
    "reviewer_noise",
    "summarise_trials",
]

KINDS = ("label", "reviewer")

# figure -> (how the table names it, +1 where a larger value means a noisier concept, -1 where a smaller one does)
FIGURES: dict[str, tuple[str, int]] = {
    "sigma2": ("σ_k²", 1),
    "sigma2_implied": ("σ_k²(implied)", 1),
    "one_minus_A": ("1 − A_kk", 1),
    "alpha": ("α_k", -1),
    "test_reliability": ("test reliability", -1),
}

def _count(rate: float, n: int) -> int:
    if not 0.0 <= rate <= 1.0:
        raise DataError(f"noise rate {rate} is outside 0..1; give a share such as 0.2 for 20 %")
    return round(rate * n)


def label_noise(levels: NDArray[Any], concept: int, rate: float, rows: NDArray[Any], n_levels: int,
                rng: np.random.Generator) -> tuple[NDArray[Any], NDArray[np.intp]]:
    """``levels`` (N, K, 0-based) with ``rate`` of concept ``concept``'s levels on ``rows`` (positions) replaced by
    levels drawn uniformly from 0..n_levels − 1 (a draw may give the level back); returns (copy, positions replaced).
    The other concepts and the other rows are unchanged."""
    out = np.array(levels, dtype=np.int64, copy=True)
    if not 0 <= concept < out.shape[1]:
        raise DataError(f"concept position {concept} is outside the table's {out.shape[1]} concepts")
    rows = np.asarray(rows, dtype=np.intp)
    picked = np.sort(rng.choice(rows, size=_count(rate, len(rows)), replace=False)).astype(np.intp)
    out[picked, concept] = rng.integers(0, n_levels, size=len(picked))
    return out, picked


def reviewer_noise(labels: pd.DataFrame, concept: str, reviewer: str, rate: float, scale: tuple[int, int],
                   rng: np.random.Generator) -> pd.DataFrame:
    """Tidy reviews (``item, reviewer, concept, level``) with ``rate`` of ``reviewer``'s levels for ``concept``
    replaced by levels drawn uniformly from the rubric's ``scale`` (lo, hi), before any adjudication."""
    missing = {"item", "reviewer", "concept", "level"} - set(labels.columns)
    if missing:
        raise DataError("reviews need the columns item, reviewer, concept, level; missing "
                        f"{', '.join(sorted(missing))}")
    out = labels.copy()
    where = np.flatnonzero(((out["reviewer"] == reviewer) & (out["concept"] == concept)).to_numpy())
    if len(where) == 0:
        raise DataError(f"no level of reviewer {reviewer!r} for concept {concept!r} in the reviews")
    picked = np.sort(rng.choice(where, size=_count(rate, len(where)), replace=False))
    levels = out["level"].to_numpy(copy=True)
    levels[picked] = rng.integers(scale[0], scale[1] + 1, size=len(picked))
    out["level"] = levels
    return out


def _expected(p_hat: NDArray[Any]) -> NDArray[Any]:
    p = np.asarray(p_hat, dtype=np.float64)  # (N, K, M+1)
    out: NDArray[Any] = (p * np.arange(p.shape[2])).sum(-1)  # (N, K) expected levels in [0, M]
    return out


def concept_figures(p_dev: NDArray[Any], p_test: NDArray[Any], train_levels: NDArray[Any], dev_levels: NDArray[Any],
                    test_levels: NDArray[Any], M: int, eps: float = 1e-4, ridge: float = 0.0) -> pd.DataFrame:
    """Per concept (one row each, in the table's order): LCEC by its moments from these labels — ``sigma2`` σ_k²
    (mean squared error of the dev outputs' scores against the dev labels), ``A_kk``, ``one_minus_A``, ``label_var``
    v_k and ``sigma2_implied`` v_k (1 − A_kk) / A_kk, as
    :func:`rubrictool.evaluate.reliability.reliability_table` reads them — and the test answers' ``score_sigma2``
    σ̂_k² and ``test_reliability`` (:func:`reccbm.concept_score_reliability`).

    p_dev, p_test: cached concept outputs (N, K, M+1); levels 0..M (N, K)."""
    train = np.asarray(train_levels, dtype=np.float64) / M  # (N_train, K)
    K = train.shape[1]
    lcec = reccbm.LatentCorrection(K, eps)
    s_dev = torch.from_numpy(_expected(p_dev) / M)  # (N_dev, K)
    lcec.set_from_moments(torch.from_numpy(train), s_dev, torch.from_numpy(np.asarray(dev_levels, np.float64) / M),
                          ridge)
    with torch.no_grad():
        sigma2 = lcec.noise_variance().numpy()  # (K,)
        a_kk = np.diag(lcec.denoising_matrix().numpy())  # (K,)
    v = train.var(0)  # (K,)
    score = reccbm.concept_score_reliability(_expected(p_test), test_levels, M)
    return pd.DataFrame({
        "sigma2": sigma2, "A_kk": a_kk, "one_minus_A": 1 - a_kk, "label_var": v,
        "sigma2_implied": np.where(a_kk > 0, v * (1 - a_kk) / np.where(a_kk > 0, a_kk, 1.0), np.nan),
        "score_sigma2": score["sigma2"], "test_reliability": score["reliability"],
    })


def noisy_rank(values: Any, concept: int, sign: int) -> float:
    """Where concept ``concept`` ranks among all by ``values`` (K,), 1 = the noisiest (the largest value for sign +1,
    the smallest for -1); ties share the mean of their ranks."""
    v = sign * np.asarray(values, dtype=np.float64)
    return float((v > v[concept]).sum() + 1 + ((v == v[concept]).sum() - 1) / 2)


def rank_figures(figures: pd.DataFrame, concept: int) -> dict[str, float]:
    """Per figure of :data:`FIGURES` present in ``figures`` (one row per concept), the noisy concept's value
    (``<figure>``) and its rank among all concepts (``<figure>_rank``, 1 = the noisiest by that figure)."""
    out: dict[str, float] = {}
    for fig, (_, sign) in FIGURES.items():
        if fig in figures.columns:
            out[fig] = float(figures[fig].iloc[concept])
            out[f"{fig}_rank"] = noisy_rank(figures[fig].to_numpy(), concept, sign)
    return out


def _ci(values: NDArray[Any], n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    if len(values) < 2:
        return float("nan"), float("nan")
    means = values[rng.integers(0, len(values), (n_boot, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarise_trials(trials: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per kind, rate and figure over the trials (one row each: ``kind``, ``concept``, ``rate``, ``fold``, ``seed``
    and per figure ``<figure>`` the noisy concept's value and ``<figure>_rank`` its rank, :func:`noisy_rank`):
    ``n``, ``first`` the share of trials that rank the noisy concept first, ``mean_rank``, ``value`` its mean with a
    95 % bootstrap CI (``value_lo``, ``value_hi``) and ``change`` the mean change from the same fold and concept
    without noise (rate 0; its first trial, whatever its seed: without noise every draw is the same) with its CI
    (``change_lo``, ``change_hi``), resampling trials (folds × concepts × draws)."""
    rng = np.random.default_rng(seed)
    key = ["kind", "concept", "fold"]
    rows = []
    for kind, of_kind in trials.groupby("kind", sort=False):
        clean = of_kind[of_kind["rate"] == 0].drop_duplicates(key).set_index(key)
        for rate in sorted(of_kind["rate"].unique()):
            at = of_kind[of_kind["rate"] == rate]
            for fig in FIGURES:
                if fig not in at.columns or at[fig].isna().all():
                    continue
                vals = at[fig].to_numpy(np.float64)
                base = clean[fig].reindex(at.set_index(key).index).to_numpy(np.float64)
                ok = ~np.isnan(base) & ~np.isnan(vals)
                change = vals[ok] - base[ok]
                lo, hi = _ci(vals, n_boot, rng)
                clo, chi = _ci(change, n_boot, rng)
                ranks = at[f"{fig}_rank"].to_numpy(np.float64)
                rows.append({"kind": kind, "rate": float(rate), "figure": fig, "n": len(at),
                             "first": float((ranks == 1).mean()), "mean_rank": float(ranks.mean()),
                             "value": float(vals.mean()), "value_lo": lo, "value_hi": hi,
                             "change": float(change.mean()) if len(change) else float("nan"),
                             "change_lo": clo, "change_hi": chi})
    return pd.DataFrame(rows)
