"""What a run says about itself, in words: the report's verdict and its calibration figure.

:func:`verdict` turns the page's own numbers into short sentences (which grades the model never predicts,
whether it beats the majority class, which concepts are unreliable, which correlations are inconclusive,
whether LCEC does anything, the run's warnings); :func:`calibration_png` draws the reliability diagram of
the grade probabilities (:func:`rubrictool.evaluate.calibration`).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.evaluate import ECE_BINS, inconclusive
from rubrictool.points import POINTS_MARGIN, points_ahead
from rubrictool.report.diagnose import LOW_ALPHA

__all__ = ["LOW_ALPHA", "LOW_RELIABILITY", "POINTS_MARGIN", "calibration_png", "implied_noise_png", "inconclusive",
           "verdict"]

LOW_RELIABILITY = 0.5  # a concept score whose test variance is less than half signal


def _names(values: list[Any]) -> str:
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def verdict(
    *, grades: list[int], predicted: list[int], honest: dict[str, Any], concepts: pd.DataFrame,
    correlations: dict[str, dict[str, float] | None], lcec: dict[str, Any] | None,
    points: dict[str, Any] | None = None, qwk: float | None = None, fold: dict[str, Any] | None = None,
    levels: dict[str, int] | None = None,
) -> list[str]:
    """Short sentences drawn from the page's numbers. grades: the rubric's grade scale; predicted: the grades the
    model gave on the test split; honest: :func:`rubrictool.evaluate.honest_metrics` in rubric grades;
    concepts: the page's concept table (alpha, test_reliability); correlations: name -> ρ with its CI;
    points: the points grader beside the run (metrics.json ``points``); qwk: the model's test QWK; fold: the run is
    one fold of a k-fold run (:func:`rubrictool.train.kfold.fold_context`), whose pooled page is the one to read;
    levels: who set the levels it trained on (run.json ``labels.levels``: levels per source)."""
    out = []
    never = [g for g in grades if g not in set(predicted)]
    n = honest.get("n_test", "")
    if len(set(predicted)) == 1:
        out.append(f"The model gives every one of the {n} test answers grade {predicted[0]}: it grades nothing.")
    elif never:
        out.append(f"The model never predicts grade{'s' if len(never) > 1 else ''} {_names(never)} on the "
                   f"{n} test answers.")
    if honest.get("vs_majority"):
        vs, maj = honest["vs_majority"], honest["majority"]
        beats = vs["lo"] > 0
        out.append(f"It {'beats' if beats else 'does not beat'} the majority class (always grade {maj['grade']}, "
                   f"T-Acc {maj['t_acc']:.3f}): T-Acc {vs['diff']:+.3f} over it, 95 % CI "
                   f"[{vs['lo']:+.3f}, {vs['hi']:+.3f}].")
    if "alpha" in concepts:
        low = concepts.loc[concepts["alpha"].astype(float) < LOW_ALPHA, "concept"].tolist()
        if low and levels and set(levels) == {"resolution"}:
            out.append(f"The reviewers do not agree on {_names(low)} (α below {LOW_ALPHA}); a teacher's resolution set "
                       "every level this run trained on, so the levels are the teacher's, not the reviewers'.")
        elif low:
            these = "these concepts'" if len(low) > 1 else "its"
            out.append(f"Reviewers do not agree on {_names(low)} (α below {LOW_ALPHA}): treat {these} levels as "
                       "tentative.")
    if "test_reliability" in concepts:
        noisy = concepts.loc[concepts["test_reliability"].astype(float) < LOW_RELIABILITY, "concept"].tolist()
        if noisy:
            out.append(f"The model's scores for {_names(noisy)} are mostly noise on new answers (test reliability "
                       f"below {LOW_RELIABILITY}).")
    vague = [name for name, ci in correlations.items() if ci is not None and inconclusive(ci)]
    if vague:
        out.append(f"Inconclusive (95 % CI spans 0, or over 3 concepts or fewer): {_names(vague)}.")
    small = [w for w in honest.get("warnings", []) if w.get("code") == "small_test"]
    if small and fold:
        out.append(f"This is fold {fold['fold']} of a {fold['folds']}-fold run: its {n} test answers cannot tell this "
                   "model from another; the pooled page covers every answer (`rubrictool report --run "
                   f"{fold['parent']}`).")
    elif small:
        out.append(f"With {n} test answers these numbers cannot tell this model from another: "
                   "train with --folds 5 to test every answer once.")
    ahead = points_ahead(points, qwk)
    low_alpha = (concepts.loc[concepts["alpha"].astype(float) < LOW_ALPHA, "concept"].tolist()
                 if "alpha" in concepts else [])
    if ahead and low_alpha:  # the levels it would grade from are not reliable: never the route (rubrictool.route)
        out.append(f"A points table on the adjudicated levels scores higher on these test answers, but the levels it "
                   f"would grade new answers from have α below {LOW_ALPHA} on {_names(low_alpha)}: not recommended.")
    elif ahead:
        out.append(ahead)
    if lcec and lcec.get("inert"):
        out.append(f"LCEC is inert in this run ({lcec['reason']}), so its learned links are not shown.")
    return out


def calibration_png(cal: dict[str, Any]) -> bytes:
    """Reliability diagram: per bin of the top-class probability, the share of answers graded right against the
    mean probability (the diagonal is perfect calibration); bar widths are the bins, labels their counts."""
    plt = _plt()
    bins = cal.get("bins") or []  # equal-width bins (rubrictool.evaluate.ECE_BINS)
    fig, ax = plt.subplots(figsize=(4.6, 3.8))
    ax.plot([0, 1], [0, 1], color="#7f7f7f", linestyle="--", linewidth=1, label="perfect calibration")
    if bins:
        lo = np.array([b["lo"] for b in bins], dtype=float)
        acc = np.array([b["accuracy"] for b in bins], dtype=float)
        conf = np.array([b["confidence"] for b in bins], dtype=float)
        ax.bar(lo, acc, width=1 / ECE_BINS, align="edge", color="#1f77b4", alpha=0.75, edgecolor="white",
               label="share right")
        ax.scatter(conf, acc, color="#ff7f0e", zorder=3, s=18, label="mean probability")
        for x, y, b in zip(lo, acc, bins):
            ax.annotate(str(b["n"]), (x + 0.5 / ECE_BINS, min(y, 0.93)), xytext=(0, 3), textcoords="offset points",
                        ha="center", fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("probability of the predicted grade (grade_prob)")
    ax.set_ylabel("share graded right")
    nll = cal.get("nll")
    ax.set_title(f"calibration: ECE {cal['ece']:.3f}" + (f", NLL {nll:.3f}" if nll is not None else ""), fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def implied_noise_png(concepts: pd.DataFrame, rho: dict[str, float] | None) -> bytes:
    """One labelled dot per concept: the noise LCEC's shrinkage implies, σ_k²(implied), against the noise
    measured on the test answers, σ̂_k² (columns sigma2_implied, score_sigma2)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    x, y = concepts["score_sigma2"].to_numpy(float), concepts["sigma2_implied"].to_numpy(float)
    ax.scatter(x, y, color="#1f77b4")
    for xi, yi, k in zip(x, y, concepts["concept"]):
        ax.annotate(str(k), (xi, yi), xytext=(4, 3), textcoords="offset points", fontsize=9)
    ax.set_xlabel("measured noise σ̂_k² = var(s̃ − c/M), test answers")
    ax.set_ylabel("implied noise v_k (1 − A_kk) / A_kk")
    title = "implied vs measured concept noise"
    if rho:
        title += (f" (ρ = {rho['rho']:.2f} [{rho['lo']:.2f}, {rho['hi']:.2f}]"
                  + (", inconclusive)" if inconclusive(rho) else ")"))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()

