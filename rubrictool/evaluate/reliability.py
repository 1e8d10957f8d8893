"""A run's reliability table: per concept the raters' α beside what the model learned (σ_k², A_kk, σ_k²(implied)) and
the noise measured on the test answers, with the Spearman correlations across concepts and their Markdown.

:func:`reliability_table` builds it for one run, :func:`reliability_markdown` writes the run's reliability.md,
:func:`reliability_rows` is the table every page shows and :func:`folds_reliability` reads it back from folds.json.
The training stage writes them and the report reads them; the Markdown sits beside the statistics rather than in
:mod:`rubrictool.report` because the report imports the stages above training (learning curves, ablations), so
training cannot import the report.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.stats import spearmanr

import reccbm
from rubrictool.evaluate import inconclusive, lcec_activity, spearman_with_ci, why_inconclusive
from rubrictool.rubric import Rubric
from rubrictool.textsafe import md_inline, md_quote

__all__ = [
    "RELIABILITY_HEAD",
    "SIGMA2_MEANING",
    "concept_alpha",
    "folds_reliability",
    "implied_noise_rhos",
    "lcec_state",
    "noise_share_rho",
    "reliability_markdown",
    "reliability_rows",
    "reliability_table",
]


def concept_alpha(agreement: dict[str, Any] | None, key: str) -> tuple[float, float, float]:
    """(α, lo, hi) of a concept from agreement.json's {"concepts": {KEY: {"alpha", "alpha_ci"}}}; NaN if absent."""
    nan = float("nan")
    try:
        entry = (agreement or {}).get("concepts", {}).get(key, {})
        a = entry.get("alpha")
        ci = entry.get("alpha_ci") or [None, None]
        conv = [float(x) if isinstance(x, (int, float)) else nan for x in (a, *list(ci)[:2])] + [nan, nan]
        return conv[0], conv[1], conv[2]
    except (AttributeError, TypeError, ValueError):
        return nan, nan, nan


def lcec_state(model: reccbm.Model) -> dict[str, Any] | None:
    """Whether the learned LCEC does anything (:func:`rubrictool.evaluate.lcec_activity`); None without LCEC."""
    if not isinstance(model, reccbm.RecCBM) or model.lcec is None:
        return None
    rel = reccbm.reliability(model)
    return lcec_activity(np.diag(rel["A"]), reccbm.partial_correlations(rel["Omega"]))


def reliability_table(
    model: reccbm.Model, rubric: Rubric, per_concept: dict[str, list[float]] | None, agreement: dict[str, Any] | None,
    train_levels: NDArray[Any] | None = None,
) -> tuple[pd.DataFrame, float | None]:
    """Per concept: α (inter-rater), learned σ_k², shrinkage A_kk, test C-Acc/C-F1, the test reliability of the
    concept score and its measured noise σ̂_k² = var(s̃ − c/M) on the test answers
    (:func:`reccbm.concept_score_reliability`); with ``train_levels`` (N, K levels 0..M) also v_k = var(c_k/M)
    over the training labels and the identified noise σ_k²(implied) = v_k (1 − A_kk) / A_kk (under a diagonal
    prior precision A_kk = v_k / (v_k + σ_k²); σ_k² itself is identified only together with Ω). And ρ(σ², 1 − α)."""
    rel = reccbm.reliability(model) if isinstance(model, reccbm.RecCBM) and model.lcec is not None else None
    nan = float("nan")
    v = (np.asarray(train_levels, float) / rubric.M).var(0) if train_levels is not None and len(train_levels) > 1 \
        else np.full(rubric.K, nan)  # (K,)
    rows = []
    for k, c in enumerate(rubric.concepts):
        a, lo, hi = concept_alpha(agreement, c.key)
        a_kk = float(rel["A"][k, k]) if rel else nan
        rows.append({
            "concept": c.key, "name": c.name, "alpha": a, "alpha_lo": lo, "alpha_hi": hi,
            "sigma2": float(rel["sigma2"][k]) if rel else nan,
            "A_kk": a_kk,
            "label_var": float(v[k]),
            "sigma2_implied": float(v[k] * (1 - a_kk) / a_kk) if a_kk > 0 else nan,
            "score_sigma2": (per_concept or {}).get("score_sigma2", [nan] * rubric.K)[k],
            "test_c_acc": per_concept["acc"][k] if per_concept else nan,
            "test_c_f1": per_concept["f1"][k] if per_concept else nan,
            "test_reliability": (per_concept or {}).get("score_reliability", [nan] * rubric.K)[k],
        })
    df = pd.DataFrame(rows)
    ok = df["alpha"].notna() & df["sigma2"].notna()
    rho = None
    if ok.sum() >= 3 and df.loc[ok, "alpha"].nunique() > 1 and df.loc[ok, "sigma2"].nunique() > 1:
        rho = float(spearmanr(df.loc[ok, "sigma2"], 1 - df.loc[ok, "alpha"]).statistic)
    return df, rho


def implied_noise_rhos(sigma2_implied: Any, score_sigma2: Any, alpha: Any) -> dict[str, dict[str, float] | None]:
    """Does the identified noise σ_k²(implied) mean what it claims? Spearman ρ with the measured noise on new
    answers σ̂_k² and with 1 − α_k, each with a bootstrap CI over concepts (None when a side is missing or constant)."""
    s = np.asarray(sigma2_implied, float)
    return {"implied_vs_measured": spearman_with_ci(s, np.asarray(score_sigma2, float)),
            "implied_vs_1_minus_alpha": spearman_with_ci(s, 1 - np.asarray(alpha, float))}


def noise_share_rho(reliability: Any, alpha: Any) -> dict[str, float] | None:
    """Spearman ρ(1 − test reliability_k, 1 − α_k) with its bootstrap CI over concepts: does the model's concept
    score carry more noise on the concepts the raters disagree on? None without α or test labels."""
    return spearman_with_ci(1 - np.asarray(reliability, float), 1 - np.asarray(alpha, float))


def _ci_text(ci: dict[str, float] | None, what: str) -> str:
    if ci is None:
        return f"— (needs {what})"
    verdict = f" — inconclusive: {why_inconclusive(ci)}" if inconclusive(ci) else ""
    return f"{ci['rho']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]{verdict}"


def reliability_markdown(df: pd.DataFrame, rho: float | None, notes: list[str]) -> str:
    """A run's reliability.md: :func:`reliability_table` as Markdown, the Spearman correlations and what σ² means."""
    def f(x: float, spec: str = ".3f") -> str:
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    lines = [("| concept | name | α | α 95% CI | σ² | A_kk | σ²(implied) | σ̂² (test) | test C-Acc | test C-F1 | "
             "test reliability |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.to_dict("records"):
        ci = f"[{f(r['alpha_lo'])}, {f(r['alpha_hi'])}]" if not math.isnan(r["alpha_lo"]) else "—"
        lines.append(f"| {md_inline(r['concept'])} | {md_inline(r['name'])} | {f(r['alpha'])} | {ci} | "
                     f"{f(r['sigma2'], '.4g')} | {f(r['A_kk'])} | {f(r['sigma2_implied'], '.4g')} | "
                     f"{f(r['score_sigma2'], '.4g')} | {f(r['test_c_acc'])} | {f(r['test_c_f1'])} | "
                     f"{f(r['test_reliability'])} |")
    share = noise_share_rho(df["test_reliability"], df["alpha"])
    rhos = implied_noise_rhos(df["sigma2_implied"], df["score_sigma2"], df["alpha"])
    lines += ["", f"Spearman ρ(σ_k², 1 − α_k) across concepts: {f(rho) if rho is not None else '— (needs α and σ²)'}",
              "Spearman ρ(σ_k²(implied), σ̂_k²) across concepts: "
              + _ci_text(rhos["implied_vs_measured"], "LCEC and test labels"),
              "Spearman ρ(σ_k²(implied), 1 − α_k) across concepts: "
              + _ci_text(rhos["implied_vs_1_minus_alpha"], "LCEC and α"),
              "Spearman ρ(1 − test reliability_k, 1 − α_k): " + _ci_text(share, "α and test labels"),
              "", ("> σ²(implied) = v_k (1 − A_kk) / A_kk with v_k = var(c_k/M) over the training labels: the noise "
                   "variance LCEC's shrinkage A_kk implies under a diagonal prior (A_kk = v_k / (v_k + σ_k²)); the "
                   "learned σ_k² is identified only together with the prior precision Ω. σ̂² = var(s̃ − c/M) over the "
                   "test answers is the noise measured on answers the model never trained on."),
              "", ("> test reliability = var(c/M) / (var(c/M) + σ̂²): the share of the concept score's variance that "
                   "is signal on answers the model never trained on (docs/design.md).")]
    return "\n".join(lines + [""] + [md_quote(n) for n in notes]) + "\n"


SIGMA2_MEANING = (
    "What σ² measures: σ²(implied) is the noise the model's own reading of a concept carries — on this project's data "
    "(Mohler, five folds; docs/results.md) it ranks the concepts as the noise measured on new answers (σ̂²) does, and "
    "it does not follow the raters' disagreement (1 − α): read α for the raters, σ² for the model. Noise put into one "
    "concept on purpose (docs/results.md) shows what σ² detects: it rises with wrong labels in its concept (+0.025 "
    "per 10 % of them replaced at random with the encoder kept, +0.015 with the whole recipe retrained) and ranks "
    "that concept first in 86 % of trials at 20 % and in all at 40 %, but one reviewer's random levels that the "
    "majority vote absorbs leave it as it was — α shows those."
)
"""The one sentence every page shows beside the reliability table (kept here alone, so a new measurement changes it
once)."""


RELIABILITY_HEAD = ["concept", "α [95 % CI]", "σ²", "σ²(implied)", "test C-Acc", "test reliability"]


def reliability_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The reliability table every page shows (head, rows): per concept α with its CI, the learned σ_k², the identified
    σ_k²(implied), test C-Acc and test reliability; columns ``concept, alpha, alpha_lo, alpha_hi, sigma2,
    sigma2_implied, test_c_acc, test_reliability`` (missing ones shown as —)."""
    def g(r: dict[Any, Any], k: str, spec: str = ".3f") -> str:
        v = r.get(k)
        x = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")
        return "—" if math.isnan(x) else format(x, spec)

    rows = []
    for r in df.to_dict("records"):
        ci = f" [{g(r, 'alpha_lo')}, {g(r, 'alpha_hi')}]" if g(r, "alpha_lo") != "—" else ""
        rows.append([str(r["concept"]), g(r, "alpha") + ci, g(r, "sigma2", ".4g"), g(r, "sigma2_implied", ".4g"),
                     g(r, "test_c_acc"), g(r, "test_reliability")])
    return RELIABILITY_HEAD, rows


def folds_reliability(summary: dict[str, Any]) -> pd.DataFrame:
    """folds.json's reliability as one table (:func:`reliability_rows`' columns): α and its CI, σ² and σ²(implied)
    averaged over the folds, C-Acc and the test reliability on every pooled answer. Empty without concepts."""
    rel, score = summary.get("reliability") or {}, summary.get("score_reliability") or {}
    keys = score.get("concepts") or rel.get("concepts") or []
    if not keys:
        return pd.DataFrame()
    nan = [float("nan")] * len(keys)
    ci = score.get("alpha_ci") or [[float("nan"), float("nan")]] * len(keys)
    return pd.DataFrame({"concept": keys, "alpha": score.get("alpha") or rel.get("alpha") or nan,
                         "alpha_lo": [c[0] for c in ci], "alpha_hi": [c[1] for c in ci],
                         "sigma2": rel.get("sigma2_mean") or nan,
                         "sigma2_implied": rel.get("sigma2_implied_mean") or nan,
                         "test_c_acc": score.get("c_acc") or nan, "test_reliability": score.get("reliability") or nan})
