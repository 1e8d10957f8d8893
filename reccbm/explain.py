"""Per-item decision traces, concept interventions and RACE attention diagnostics.

Decision trace, for item i with predicted grade ŷ: the concept levels argmax p̂_k, the expected scores
ĉ_k, the corrected concepts μ_post,k and each concept's contribution to the logit of ŷ — W_{ŷ,k} μ_post,k
(Eq. 22), plus Σ_m (U_{ŷ,k,m} − Ū_{ŷ,k}) p̂_{k,m} with the level head — so that Σ_k contribution + bias
is the logit of ŷ.

Interventions (§Human Intervention): per item, rank the K concept predictions by uncertainty
1 − max_m p̂_{k,m}, take the k most uncertain (or most confident), and replace their p̂_k by a one-hot:
the adjudicated level ("oracle"), the wrong level that most lowers the probability of the gold grade
("wrong", chosen per concept through the frozen head) or a uniformly random level ("random"); the frozen
grade path (LCEC, head) then runs on the result (:func:`grades_from_levels`). With ``ModelConfig.condition``
LCEC conditions on the given levels (exact; the others move through Ω, reccbm/lcec.py); without it (the
paper) the one-hots pass through A.

Latent denoising analysis: the learned prior precision Ω (Eq. 17, 21) reads as partial correlations
r_ij = −Ω_ij / √(Ω_ii Ω_jj) (:func:`partial_correlations`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from reccbm.data import EncodedItems, collate
from reccbm.errors import ReccbmError
from reccbm.inference import Predictions
from reccbm.model import Model, RecCBM, masked_mean, tilted

__all__ = [
    "INTERVENTIONS",
    "DecisionTrace",
    "attention_diagnostics",
    "concept_order",
    "contributions_toward",
    "decision_trace",
    "grades_from_levels",
    "intervention_levels",
    "override",
    "partial_correlations",
    "reliability",
    "shift_levels",
]

INTERVENTIONS = ("oracle", "wrong", "random")


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


def _bottleneck(model: Model, what: str) -> RecCBM:
    """``model`` as the concept-bottleneck model it must be for ``what``; the PLM baseline has none (ReccbmError)."""
    if not isinstance(model, RecCBM):
        raise ReccbmError(f"the PLM baseline has no concept bottleneck: {what} needs one")
    return model


@torch.no_grad()
def contributions_toward(model: Model, preds: Predictions, grades: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
    """Each concept's contribution to the logit of grade g_i (any grade, 0..S, one per item) and the bias b_g:
    ``(N, K), (N,)``. With g = ŷ this is the decision trace; with g = the gold (or runner-up) grade it shows
    what argued for that grade instead. Σ_k contribution_k + b_g = logit of g (Eq. 22), so the difference of
    two grades' logits splits exactly into per-concept differences."""
    if preds.p_hat is None or preds.mu_post is None:
        raise ValueError("the PLM baseline has no concept bottleneck to explain")
    g = torch.as_tensor(np.asarray(grades)).long()  # (N,)
    contrib, bias = _bottleneck(model, "contributions").contributions(
        torch.as_tensor(preds.p_hat).float(), torch.as_tensor(preds.mu_post).float(), g
    )  # (N, K), (N,)
    return contrib.numpy(), bias.numpy()


def decision_trace(model: Model, preds: Predictions) -> DecisionTrace:
    """The trace of each prediction of a concept-bottleneck model."""
    if preds.p_hat is None or preds.c_hat is None or preds.mu_post is None:
        raise ValueError("the PLM baseline has no concept bottleneck to explain")
    y = preds.grades  # (N,)
    contrib, bias = contributions_toward(model, preds, y)  # (N, K), (N,)
    return DecisionTrace(
        grade=y,
        grade_prob=preds.grade_probs[np.arange(len(y)), y],
        levels=preds.levels,
        expected=preds.c_hat,
        mu_post=preds.mu_post,
        contributions=contrib,  # (N, K)
        bias=bias,
    )


@torch.no_grad()
def grades_from_levels(model: Model, p_hat: NDArray[Any], levels: NDArray[Any], replace: NDArray[Any]) -> NDArray[Any]:
    """Grade probabilities (N, S+1) after an intervention: where replace (N, K) is True, concept k's p̂_k
    becomes the one-hot of levels[i, k] (0..M); the frozen grade path (LCEC, head) runs on the result."""
    p = torch.as_tensor(p_hat).float().clone()  # (N, K, M+1)
    onehot = torch.nn.functional.one_hot(torch.as_tensor(levels).long(), p.shape[-1]).float()  # (N, K, M+1)
    mask = torch.as_tensor(replace).bool().unsqueeze(-1)  # (N, K, 1)
    p = torch.where(mask, onehot, p)
    model = _bottleneck(model, "an intervention")
    model.eval()
    out: NDArray[Any] = model.grade_from_concepts(p, mask[..., 0]).grade_logits.float().softmax(-1).numpy()
    return out


@torch.no_grad()
def override(model: Model, preds: Predictions, levels: NDArray[Any], replace: NDArray[Any]) -> Predictions:
    """The predictions after an educator's override: concept k of item i judged at levels[i, k] (0..M)
    wherever replace[i, k]; ĉ, μ_post and the grade follow through the frozen LCEC and head."""
    if preds.p_hat is None:
        raise ValueError("the PLM baseline has no concepts to override")
    p = torch.as_tensor(preds.p_hat).float().clone()  # (N, K, M+1)
    onehot = torch.nn.functional.one_hot(torch.as_tensor(levels).long(), p.shape[-1]).float()  # (N, K, M+1)
    observed = torch.as_tensor(replace).bool()  # (N, K)
    p = torch.where(observed.unsqueeze(-1), onehot, p)
    return _regraded(_bottleneck(model, "an override"), p, observed)


def _regraded(model: RecCBM, p: Tensor, observed: Tensor | None = None) -> Predictions:
    """Predictions from level shares p (N, K, M+1) set from outside: ĉ, μ_post and the grade through the frozen LCEC
    and head (``observed``: the concepts LCEC conditions on, see :meth:`RecCBM.grade_from_concepts`)."""
    model.eval()
    out = model.grade_from_concepts(p, observed)
    assert out.c_hat is not None and out.mu_post is not None
    logits = out.grade_logits.float()  # (N, S+1)
    return Predictions(logits.softmax(-1).numpy(), p.numpy(), out.c_hat.float().numpy(),
                       out.mu_post.float().numpy(), logits.numpy(), model.decision)


@torch.no_grad()
def shift_levels(model: Model, preds: Predictions, delta: NDArray[Any]) -> Predictions:
    """The predictions with every item's level shares shifted by its question's δ (:func:`reccbm.model.tilted`;
    δ (N, K), or (K,) for all items, from :func:`reccbm.model.fit_level_tilt` on the question's reviewed answers);
    ĉ, μ_post and the grade follow through the frozen LCEC and head, as after an override."""
    if preds.p_hat is None:
        raise ValueError("the PLM baseline has no concepts to shift")
    # (N, K, M+1)
    p = tilted(torch.as_tensor(preds.p_hat).float(), torch.tensor(np.asarray(delta, dtype=np.float64))).float()
    return _regraded(_bottleneck(model, "a level shift"), p)


@torch.no_grad()
def attention_diagnostics(model: Model, items: EncodedItems, pad_id: int, batch_size: int = 64) -> dict[str, Any]:
    """How far RACE is from mean pooling: per concept, the mean attention entropy over an item's tokens
    divided by log T (1 = uniform), and the mean cosine between h_k (Eq. 10) and the masked mean of H."""
    if not isinstance(model, RecCBM) or model.bottleneck.Q is None:
        raise ValueError("attention diagnostics need a model with RACE")
    model.eval()
    K = model.config.num_concepts
    ent, cos, n = np.zeros(K), np.zeros(K), 0
    device = next(model.parameters()).device
    for start in range(0, len(items), batch_size):
        idx = np.arange(start, min(start + batch_size, len(items)))
        batch = {k: v.to(device) for k, v in collate(items, idx, pad_id).items()}
        H = model.token_states(batch)  # (B, T, d)
        _, alpha = model.bottleneck(H, batch["attention_mask"])
        assert alpha is not None
        mask = batch["attention_mask"].float()  # (B, T)
        T = mask.sum(1, keepdim=True)  # (B, 1)
        a = alpha.float().clamp_min(1e-12)  # (B, K, T)
        H_ent = -(a * a.log() * mask.unsqueeze(1)).sum(-1) / T.clamp_min(2).log()  # (B, K)
        h = torch.einsum("bkt,btd->bkd", alpha.float(), H.float())  # (B, K, d)
        mean = masked_mean(H.float(), mask).unsqueeze(1)  # (B, 1, d)
        c = torch.nn.functional.cosine_similarity(h, mean.expand_as(h), dim=-1)  # (B, K)
        ent = ent + H_ent.sum(0).cpu().numpy()
        cos = cos + c.sum(0).cpu().numpy()
        n += len(idx)
    return {"entropy_ratio": (ent / n).tolist(), "cosine_to_mean": (cos / n).tolist()}


def reliability(model: Model) -> dict[str, NDArray[Any]]:
    """Learned measurement-noise variances σ_k², shrinkage A_kk and prior precision Ω (LCEC only)."""
    if not isinstance(model, RecCBM) or model.lcec is None:
        raise ValueError("this model has no LCEC layer")
    lc = model.lcec
    return {
        "sigma2": lc.noise_variance().detach().cpu().numpy(),
        "A": lc.denoising_matrix().detach().cpu().numpy(),
        "Omega": lc.precision().detach().cpu().numpy(),
    }


def partial_correlations(omega: NDArray[Any]) -> NDArray[Any]:
    """r_ij = −Ω_ij / √(Ω_ii Ω_jj) off the diagonal, 1 on it: the partial correlation of concepts i and j
    given all the others under the prior z ~ N(0, Ω⁻¹) (Eq. 17)."""
    O = np.asarray(omega, dtype=float)  # (K, K)
    d = np.sqrt(np.diag(O))  # (K,)
    r = -O / np.outer(d, d)  # (K, K)
    np.fill_diagonal(r, 1.0)
    return r


def concept_order(p_hat: NDArray[Any], most: str = "uncertain") -> NDArray[Any]:
    """Per item, concept indices (N, K) from the most uncertain (1 − max_m p̂_{k,m} largest) down, or from
    the most confident with most="confident". Ties keep the concept order."""
    if most not in ("uncertain", "confident"):
        raise ValueError(f"most must be 'uncertain' or 'confident', got {most!r}")
    u = 1.0 - np.asarray(p_hat).max(-1)  # (N, K)
    out: NDArray[Any] = np.argsort(-u if most == "uncertain" else u, axis=1, kind="stable")  # (N, K)
    return out


@torch.no_grad()
def intervention_levels(
    model: Model, p_hat: NDArray[Any], gold: NDArray[Any], grades: NDArray[Any], strategy: str,
    rng: np.random.Generator | None = None,
) -> NDArray[Any]:
    """The level (0..M) each (item, concept) is set to by an intervention (N, K).

    oracle: the adjudicated level `gold`. wrong: per concept, the level ≠ gold that, set alone, gives the
    gold grade `grades` (N,) the lowest probability through the frozen head. random: uniform over 0..M."""
    N, K, L = np.asarray(p_hat).shape  # (N, K, M+1)
    if strategy == "oracle":
        return np.asarray(gold)
    if strategy == "random":
        return (rng or np.random.default_rng(0)).integers(0, L, size=(N, K))
    if strategy != "wrong":
        raise ValueError(f"unknown intervention {strategy!r}; use one of {', '.join(INTERVENTIONS)}")
    best = np.asarray(gold).copy()  # (N, K)
    low = np.full((N, K), np.inf)
    rows = np.arange(N)
    for k in range(K):
        only_k = np.zeros((N, K), dtype=bool)
        only_k[:, k] = True
        for m in range(L):
            levels = np.full((N, K), m)
            p_gold = grades_from_levels(model, p_hat, levels, only_k)[rows, grades]  # (N,)
            better = (m != np.asarray(gold)[:, k]) & (p_gold < low[:, k])
            low[better, k] = p_gold[better]
            best[better, k] = m
    return best
