"""From a grade distribution to one mark: the decision rule.

The grade head gives p(y | x) over the S + 1 marks. The paper (and the default before 2026-12-06) marks an answer
with the most probable mark, argmax_y p(y | x). On an imbalanced scale (most answers at the top) that rule rarely
gives a low mark: a weak answer whose distribution is spread over the lower marks still has the top mark as its
single most probable one. Two rules here take the scale's order and a course's costs into account:

* :func:`bayes_marks` — the mark of least expected cost, argmin_j Σ_y p(y | x) C[y, j], for an ordinal cost matrix
  C (:func:`cost_matrix`): |y − j| marks of error, plus a course's extra cost for passing a failing answer and for
  failing a passing one. No fitting; it trusts the probabilities as they are.
* :class:`CalibratedBayes` — the distribution first calibrated on the dev answers (a temperature T and one bias b_y
  per mark, p'(y | x) ∝ exp(T log p(y | x) + b_y), fitted by maximum likelihood with a small L2 penalty on b), then
  the Bayes rule for the course's costs on the calibrated distribution. A head trained on a scale where most answers
  sit at the top is over-confident and gives the low marks too little probability; calibration gives them back what
  the dev answers show, and the course's cost of passing a failing answer then acts as it says.
* :class:`Cutpoints` — ordinal cutpoints on the expected mark s(x) = Σ_y y p(y | x): mark j when
  t_j ≤ s < t_{j+1}. The cutpoints are fitted on answers the model never trained on (the dev answers) to minimise
  the same cost, so a distribution the head compresses toward the top is read on the scale the answers actually
  have. With no dev answer of some marks the fit keeps the plain rounding cutpoints j − ½ there.

Everything is numpy on the probability matrix: the rule never touches the model, and can be refitted on kept
predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["CalibratedBayes", "Cutpoints", "bayes_marks", "cost_matrix", "decide", "expected_cost",
           "fit_calibrated_bayes", "fit_cutpoints", "pass_index"]


def cost_matrix(n_marks: int, pass_index: int | None = None, fail_passed: float = 0.0,
                pass_failed: float = 0.0) -> NDArray[np.float64]:
    """C[y, j]: the cost of giving mark j (0-based) to an answer whose true mark is y: |y − j|, plus ``fail_passed``
    when y < pass_index ≤ j (a failing answer passed) and ``pass_failed`` when j < pass_index ≤ y."""
    y = np.arange(n_marks)[:, None]
    j = np.arange(n_marks)[None, :]
    cost = np.abs(y - j).astype(np.float64)
    if pass_index is not None:
        cost += fail_passed * ((y < pass_index) & (j >= pass_index))
        cost += pass_failed * ((j < pass_index) & (y >= pass_index))
    return cost


def bayes_marks(probs: NDArray[Any], cost: NDArray[np.float64]) -> NDArray[np.int64]:
    """argmin_j Σ_y p(y | x) C[y, j] for each row of ``probs`` (N, S+1): the mark of least expected cost."""
    risk = np.asarray(probs, dtype=np.float64) @ cost  # (N, S+1): expected cost of each mark
    out: NDArray[np.int64] = risk.argmin(1).astype(np.int64)
    return out


def expected_cost(y: NDArray[Any], marks: NDArray[Any], cost: NDArray[np.float64]) -> float:
    """Mean of C[y, ŷ] over the answers (0-based marks)."""
    return float(cost[np.asarray(y, dtype=np.int64), np.asarray(marks, dtype=np.int64)].mean())


@dataclass(frozen=True)
class Cutpoints:
    """Mark j for an expected mark s with t_j ≤ s < t_{j+1} (t_0 = −∞; ``t`` holds t_1 … t_S, non-decreasing)."""

    t: tuple[float, ...]

    def marks(self, probs: NDArray[Any]) -> NDArray[np.int64]:
        """The marks of the rows of ``probs`` (N, S+1), 0-based."""
        return self.marks_of(expected_marks(probs))

    def marks_of(self, s: NDArray[Any]) -> NDArray[np.int64]:
        out: NDArray[np.int64] = np.searchsorted(np.asarray(self.t), np.asarray(s), side="right").astype(np.int64)
        return out

    @classmethod
    def rounding(cls, n_marks: int) -> Cutpoints:
        """The plain rounding of the expected mark: t_j = j − ½."""
        return cls(tuple(j - 0.5 for j in range(1, n_marks)))


def expected_marks(probs: NDArray[Any]) -> NDArray[np.float64]:
    """s(x) = Σ_y y p(y | x), the expected mark (0-based)."""
    p = np.asarray(probs, dtype=np.float64)
    out: NDArray[np.float64] = p @ np.arange(p.shape[1], dtype=np.float64)
    return out


def fit_cutpoints(probs: NDArray[Any], y: NDArray[Any], cost: NDArray[np.float64], sweeps: int = 4) -> Cutpoints:
    """Cutpoints on the expected mark that minimise the mean cost C[y, ŷ] on (``probs``, ``y``) — answers the model
    never trained on. Coordinate descent from the rounding cutpoints: each t_j in turn moves to the candidate
    (a midpoint between neighbouring expected marks, kept between t_{j−1} and t_{j+1}) of least total cost; ties
    keep the candidate nearest the rounding cutpoint, so marks no answer has keep their rounding cutpoints."""
    s = expected_marks(probs)
    yy = np.asarray(y, dtype=np.int64)
    n_marks = cost.shape[0]
    t = np.array(Cutpoints.rounding(n_marks).t)
    order = np.sort(s)
    candidates = np.unique(np.concatenate([(order[1:] + order[:-1]) / 2, t]))
    for _ in range(sweeps):
        moved = False
        for j in range(len(t)):
            lo = t[j - 1] if j > 0 else -np.inf
            hi = t[j + 1] if j + 1 < len(t) else np.inf
            options = candidates[(candidates >= lo) & (candidates <= hi)]
            if len(options) == 0:
                continue
            best, best_cost = t[j], np.inf
            rounding = j + 0.5
            for c in options:
                trial = t.copy()
                trial[j] = c
                total = cost[yy, np.searchsorted(trial, s, side="right")].sum()
                if total < best_cost - 1e-9 or (abs(total - best_cost) <= 1e-9
                                                and abs(c - rounding) < abs(best - rounding)):
                    best, best_cost = c, total
            if best != t[j]:
                t[j], moved = best, True
        if not moved:
            break
    return Cutpoints(tuple(float(x) for x in t))


def pass_index(n_marks: int, first_pass: int = -1) -> int:
    """The first passing mark, 0-based: ``first_pass`` when ≥ 0, else the first mark at or above the scale's midpoint
    (0–5: 3, so 0–2 fail; 0–4: 2)."""
    return first_pass if first_pass >= 0 else -(-(n_marks - 1) // 2)


@dataclass(frozen=True)
class CalibratedBayes:
    """The Bayes rule for ``cost`` on p'(y | x) ∝ exp(T log p(y | x) + b_y): ``temperature`` T, ``bias`` b (S+1)."""

    temperature: float
    bias: tuple[float, ...]
    cost: tuple[tuple[float, ...], ...]

    def calibrated(self, probs: NDArray[Any]) -> NDArray[np.float64]:
        """p'(y | x) for the rows of ``probs`` (N, S+1)."""
        logits = (self.temperature * np.log(np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0))
                  + np.asarray(self.bias))
        e = np.exp(logits - logits.max(1, keepdims=True))
        out: NDArray[np.float64] = e / e.sum(1, keepdims=True)
        return out

    def marks(self, probs: NDArray[Any]) -> NDArray[np.int64]:
        return bayes_marks(self.calibrated(probs), np.asarray(self.cost))


def fit_calibrated_bayes(probs: NDArray[Any], y: NDArray[Any], cost: NDArray[np.float64], l2: float = 0.01,
                         steps: int = 300) -> CalibratedBayes:
    """:class:`CalibratedBayes` with T and b fitted on (``probs``, ``y``) — answers the model never trained on — by
    minimising their mean negative log-likelihood + ``l2`` · Σ b_y² (damped Newton steps on this convex problem)."""
    logp = np.log(np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0))  # (N, S+1)
    yy = np.asarray(y, dtype=np.int64)
    n, m = logp.shape
    theta = np.concatenate([[1.0], np.zeros(m)])  # T, b_0 … b_S
    onehot = np.eye(m)[yy]  # (N, S+1)
    def objective(th: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        logits = th[0] * logp + th[1:]
        top = logits.max(1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(logits - top).sum(1))
        nll = float(np.mean(lse - logits[np.arange(n), yy]) + l2 * np.sum(th[1:] ** 2))
        p = np.exp(logits - lse[:, None])
        return nll, p

    value, p = objective(theta)
    for _ in range(steps):
        r = p - onehot  # (N, S+1) ∂NLL/∂logits per answer
        grad = np.concatenate([[np.sum(r * logp) / n], r.mean(0) + 2 * l2 * theta[1:]])
        # Hessian of the mean NLL in (T, b): the features of answer n and mark y are (log p(y | x_n), e_y)
        feats = np.concatenate([logp[:, :, None], np.broadcast_to(np.eye(m), (n, m, m))], axis=2)  # (N, M, 1+M)
        mean = np.einsum("nm,nmf->nf", p, feats)  # (N, 1+M)
        hess = (np.einsum("nm,nmf,nmg->fg", p, feats, feats) - np.einsum("nf,ng->fg", mean, mean)) / n
        hess[1:, 1:] += 2 * l2 * np.eye(m)
        step = np.linalg.solve(hess + 1e-6 * np.eye(m + 1), grad)
        size = 1.0
        while size > 1e-6:  # backtracking: a Newton step that does not lower the objective is halved
            trial = theta - size * step
            t_value, t_p = objective(trial)
            if t_value <= value - 1e-4 * size * float(grad @ step):
                break
            size /= 2
        else:
            break
        theta, value, p = trial, t_value, t_p
        if np.abs(size * step).max() < 1e-9:
            break
    return CalibratedBayes(float(theta[0]), tuple(float(b) for b in theta[1:]),
                           tuple(tuple(float(c) for c in row) for row in np.asarray(cost)))


Decision = Cutpoints | CalibratedBayes  # a fitted rule: .marks(probs)


def decide(probs: NDArray[Any], cutpoints: Decision | None) -> NDArray[np.int64]:
    """The marks (0-based) of the rows of ``probs`` (N, S+1): the model's fitted rule, or argmax without one."""
    if cutpoints is None:
        out: NDArray[np.int64] = np.asarray(probs).argmax(1).astype(np.int64)
        return out
    return cutpoints.marks(probs)
