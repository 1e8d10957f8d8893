"""Held answers and the review queue of ``rubrictool grade``: no mark for an answer a teacher should read first.

An answer with any flag (:data:`rubrictool.flags.FLAGS`: a pasted reference or question, a keyword list, an answer
unlike every training answer, concept levels that disagree with the mark, an empty or a cut answer, padding) gets no
mark: its ``grade`` is left empty, the model's reading is kept in ``model_grade`` for the reader, and
``needs_review`` says why in words. Every other answer is marked, with ``needs_review`` empty.

The review queue ranks the answers by risk for a teacher's fixed budget of reviews: the held answers first (the more
flags, the earlier), then the marked ones by how unsure the grader is and how weak a passing mark's reading is,
``risk = ((1 - grade_prob + uncertainty) / 2 + weak_pass) / 2`` (``uncertainty``: the concept levels' σ²-weighted
entropy, :func:`uncertainty_score`; ``weak_pass``: for an answer given a pass mark, how little of the
rubric its concepts read, :func:`weak_pass`), so a held answer's risk is above 1 and a marked answer's at most 1. A
failing answer given a pass mark is the costliest wrong mark and the commonest, and the grader is seldom unsure of it:
the second term puts those answers in the queue (docs/results.md, "The review queue and failing answers"). A run
without concepts ranks by ``(1 - grade_prob) / 2``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.flags import FLAGS

__all__ = ["HOLD_REASONS", "hold_marks", "level_entropy", "review_queue", "uncertainty_score", "weak_pass"]

HOLD_REASONS = {
    "copies_reference": "pastes the reference answer",
    "copies_question": "pastes the question",
    "keyword_list": "a list of keywords, not an answer",
    "out_of_distribution": "unlike every answer the grader trained on",
    "concepts_disagree_with_grade": "its concept levels disagree with the mark",
    "empty": "no answer",
    "truncated": "longer than the grader reads",
    "repeats_text": "padded with repeated text",
}
"""Why a flag holds the answer, in the words ``needs_review`` uses (every flag of :data:`FLAGS` holds)."""
assert set(HOLD_REASONS) == set(FLAGS)


def _reasons(flags: str) -> str:
    names = [f for f in str(flags).split(";") if f]
    return "; ".join(f"{HOLD_REASONS.get(f, f)} ({f})" for f in names)


def hold_marks(graded: pd.DataFrame) -> pd.DataFrame:
    """``graded`` (with its ``flags`` column) with every flagged answer held: ``grade`` empty, the model's grade in
    ``model_grade`` beside it, and ``needs_review`` (after ``grade``) naming each reason; unflagged rows keep their
    grade and an empty ``needs_review``."""
    out = graded.copy()
    flags = out["flags"].fillna("").astype(str) if "flags" in out.columns else pd.Series("", index=out.index)
    held = (flags != "").to_numpy()
    at = list(out.columns).index("grade") + 1
    out.insert(at, "model_grade", out["grade"].astype("Int64"))
    out.insert(at, "needs_review", flags.map(_reasons))
    out["grade"] = out["grade"].astype("Int64").mask(held)
    return out


def weak_pass(graded: pd.DataFrame, keys: Sequence[str], scale: tuple[int, int],
              pass_mark: int) -> npt.NDArray[np.float64] | None:
    """Per answer, how weak a passing mark's reading is: for an answer the grader marked ``pass_mark`` or above (its
    ``model_grade``, else ``grade``), 1 − the mean of its concepts' expected levels (``<key>_expected``) rescaled from
    ``scale`` to [0, 1] — 1 when every concept reads at the bottom level; 0 for an answer marked below the pass mark.
    None without the concept columns (a PLM run)."""
    cols = [f"{k}_expected" for k in keys]
    if not cols or not all(c in graded.columns for c in cols):
        return None
    lo, hi = scale
    reading = (graded[cols].apply(pd.to_numeric, errors="coerce").mean(axis=1).to_numpy(float) - lo) / max(1, hi - lo)
    mark = pd.to_numeric(graded["model_grade" if "model_grade" in graded.columns else "grade"], errors="coerce")
    passed = (mark >= pass_mark).fillna(False).to_numpy(bool)
    out: npt.NDArray[np.float64] = np.where(passed, 1.0 - np.nan_to_num(np.clip(reading, 0, 1), nan=1.0), 0.0)
    return out


def review_queue(held: pd.DataFrame, uncertainty: npt.NDArray[np.float64] | None, budget: int | None = None,
                 keep: Sequence[str] = ("question", "student", "response"),
                 weak: npt.NDArray[np.float64] | None = None) -> pd.DataFrame:
    """The answers of ``held`` (:func:`hold_marks`' table) ranked by risk, most at risk first: ``budget`` rows (None:
    as many as are held), with ``rank``, ``id``, the ``keep`` columns there are, ``needs_review``, ``model_grade``,
    ``grade_prob``, ``uncertainty``, ``weak_pass`` and ``risk``. ``uncertainty`` (N,): each answer's concept
    uncertainty in [0, 1] (None: a run without concepts, 0); ``weak`` (N,): :func:`weak_pass` (None: not ranked by
    it, the risk is the first term alone)."""
    n = len(held)
    is_held = (held["needs_review"].fillna("") != "").to_numpy()
    n_flags = held["needs_review"].fillna("").map(lambda r: len([x for x in str(r).split("; ") if x])).to_numpy(float)
    # empty answer: no probability
    prob = pd.to_numeric(held["grade_prob"], errors="coerce").fillna(0.0).to_numpy(float)
    unc = np.zeros(n) if uncertainty is None else np.nan_to_num(np.asarray(uncertainty, dtype=float))
    unsure = (1.0 - prob + unc) / 2
    weak_arr = np.zeros(n) if weak is None else np.nan_to_num(np.asarray(weak, dtype=float))
    marked_risk = unsure if weak is None else (unsure + weak_arr) / 2
    risk = np.where(is_held, 1.0 + n_flags / (1.0 + n_flags), marked_risk)
    order = np.argsort(-risk, kind="stable")
    size = int(is_held.sum()) if budget is None else max(0, min(int(budget), n))
    cols = ["id", *[c for c in keep if c in held.columns and c != "id"], "needs_review", "model_grade", "grade_prob"]
    queue = held.iloc[order[:size]][cols].reset_index(drop=True)
    queue.insert(0, "rank", np.arange(1, size + 1))
    queue["uncertainty"], queue["weak_pass"] = unc[order[:size]], weak_arr[order[:size]]
    queue["risk"] = risk[order[:size]]
    return queue


def level_entropy(probs: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Entropy of each concept's level distribution, in [0, 1] (divided by log L): ``(N, K, L)`` → ``(N, K)``."""
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0)  # (N, K, L)
    out: npt.NDArray[np.float64] = -(p * np.log(p)).sum(axis=2) / np.log(p.shape[2])  # (N, K)
    return out


def uncertainty_score(probs: npt.NDArray[np.float64],
                      sigma2: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.float64]:
    """How unsure the grader is about an item's concept levels, in [0, 1]: the mean normalised level
    entropy over concepts, each concept weighted by its learned noise variance σ_k² when the run has an
    LCEC layer (a concept the model found noisy counts more), else equally. ``(N, K, L)`` → ``(N,)``."""
    h = level_entropy(probs)  # (N, K)
    w = np.ones(h.shape[1]) if sigma2 is None else np.asarray(sigma2, dtype=np.float64)  # (K,)
    out: npt.NDArray[np.float64] = (h * w).sum(axis=1) / w.sum()  # (N,)
    return out
