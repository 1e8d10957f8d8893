"""Per-item decision traces: what the grade head saw and how each concept pushed the grade.

For item i with predicted grade ŷ: the concept levels argmax p̂_k, the expected scores ĉ_k,
the corrected concepts μ_post,k and each concept's contribution W_{ŷ,k} · μ_post,k to the
logit of ŷ (the logit is Σ_k W_{ŷ,k} μ_post,k + b_ŷ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from reccbm.model import RecCBM
from reccbm.train import Predictions

__all__ = ["DecisionTrace", "decision_trace", "reliability"]


@dataclass
class DecisionTrace:
    """Arrays for N items and K concepts (levels are 0..M; add the rubric's minimum to display)."""

    grade: NDArray[Any]  # (N,) predicted grade ŷ, 0..S
    grade_prob: NDArray[Any]  # (N,) probability of ŷ
    levels: NDArray[Any]  # (N, K) argmax_m p̂_{k,m}
    expected: NDArray[Any]  # (N, K) ĉ_k ∈ [0, M]
    mu_post: NDArray[Any]  # (N, K) μ_post (s̃ without LCEC)
    contributions: NDArray[Any]  # (N, K) W_{ŷ,k} · μ_post,k
    bias: NDArray[Any]  # (N,) b_ŷ


def decision_trace(model: RecCBM, preds: Predictions) -> DecisionTrace:
    """The trace of each prediction of a concept-bottleneck model."""
    if preds.p_hat is None or preds.c_hat is None or preds.mu_post is None:
        raise ValueError("the PLM baseline has no concept bottleneck to explain")
    W = model.W.weight.detach().cpu().numpy()  # (S+1, K)
    b = model.W.bias.detach().cpu().numpy()  # (S+1,)
    y = preds.grades  # (N,)
    return DecisionTrace(
        grade=y,
        grade_prob=preds.grade_probs[np.arange(len(y)), y],
        levels=preds.levels,
        expected=preds.c_hat,
        mu_post=preds.mu_post,
        contributions=W[y] * preds.mu_post,  # (N, K)
        bias=b[y],
    )


def reliability(model: RecCBM) -> dict[str, NDArray[Any]]:
    """Learned measurement-noise variances σ_k², shrinkage A_kk and prior precision Ω (LCEC only)."""
    if model.lcec is None:
        raise ValueError("this model has no LCEC layer")
    lc = model.lcec
    return {
        "sigma2": lc.noise_variance().detach().cpu().numpy(),
        "A": lc.denoising_matrix().detach().cpu().numpy(),
        "Omega": lc.precision().detach().cpu().numpy(),
    }
