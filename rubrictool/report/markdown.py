"""The report as Markdown (``report.md``): :func:`render_markdown`, section by section, over the :class:`Report`
:func:`rubrictool.report.page.build_report` gathers. Text from the data is escaped (:mod:`rubrictool.textsafe`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.report.audit_section import audit_markdown
from rubrictool.report.ceiling import ceiling_markdown
from rubrictool.report.page import GRADE_METRICS, NEAR_ZERO, Report, curve_lines, trace_file
from rubrictool.textsafe import md_inline, md_quote, strip_controls

__all__ = ["render_markdown"]


def _md_table(df: pd.DataFrame, cols: list[tuple[str, str]]) -> list[str]:
    def cell(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return "—" if np.isnan(v) else f"{v:.3f}"
        return "—" if v is None else md_inline(v)

    lines = ["| " + " | ".join(n for _, n in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c, _ in cols) + " |" for row in df.to_dict("records")]
    return lines


def _spans(ci: dict[str, float] | None) -> str:
    from rubrictool.evaluate import why_inconclusive

    why = why_inconclusive(ci) if ci else None
    return f". Inconclusive: {why}" if why else ""


def _ci_words(ci: dict[str, float]) -> str:
    """``95 % bootstrap CI over N concepts [lo, hi]``, or only ``over N concepts`` when N is too few for one."""
    from rubrictool.evaluate import FEW_CONCEPTS

    if ci["n"] <= FEW_CONCEPTS:
        return f"over {ci['n']} concepts: no CI"
    return f"95 % bootstrap CI over {ci['n']} concepts [{ci['lo']:.3f}, {ci['hi']:.3f}]"


def render_markdown(r: Report) -> str:
    """The report as Markdown (figures referenced as the PNG files written beside it). Text that comes from
    the data (ids, answers, names, notes) is escaped (:mod:`rubrictool.textsafe`): no HTML, no markup."""
    L = [f"# {md_inline(r.title)}", "", f"Test split: {r.n_test} answers. Numbers from {md_inline(r.metrics_source)}.",
         ""]
    if r.verdict:
        L += ["## Verdict", ""] + [f"- {md_inline(v)}" for v in r.verdict] + [""]
    for w in r.warnings:
        L += [f"**Warning:** {md_inline(w['message'])}", ""]
    L += [md_quote(n) for n in r.notes] + [""] if r.notes else []
    L += (_grade_lines(r) + _low_marks_lines(r) + _agreement_and_concept_lines(r) + _figure_lcec_trace_lines(r)
          + audit_markdown(r.audit) + _provenance_lines(r))
    return "\n".join(L)


def _grade_lines(r: Report) -> list[str]:
    """The grade metrics with their CIs, the baselines, calibration, the figures and the learning curve."""
    L: list[str] = []
    ci = r.honest.get("ci") or {}

    def val(k: str) -> str:
        v = r.metrics.get(k, np.nan)
        out = "—" if np.isnan(v) else format(v, ".3f")
        if k in ci and not np.isnan(ci[k]["lo"]):
            out += f" [{ci[k]['lo']:.3f}, {ci[k]['hi']:.3f}]"
        return out

    L += ["## Grade metrics", "", "| metric | value [95 % bootstrap CI] |", "|---|---|"]
    L += [f"| {name} | {val(k)} |" for k, name in GRADE_METRICS if k in r.metrics]
    if r.honest.get("majority"):
        L += [(f"| majority class (always grade {r.honest['majority']['grade']}): T-Acc | "
              f"{r.honest['majority']['t_acc']:.3f} |")]
    for key, what in (("gold_levels", "the adjudicated levels"), ("predicted_levels", "the model's predicted levels")):
        if key in r.points:
            pts = r.points[key]
            L += [f"| points grader on {what}: T-Acc / QWK | {pts['t_acc']:.3f} / {pts['qwk']:.3f} |"]
    if r.points.get("source"):
        L += [f"| points | {md_inline(r.points['source'])} |"]
    if r.calibration:
        L += [f"| ECE ({r.calibration['ece_bins']}) | {r.calibration['ece']:.3f} |",
              f"| NLL of the grade probabilities | {r.calibration['nll']:.3f} |"]
    L += ["", "![confusion matrix](confusion.png)"]
    if "calibration.png" in r.images:
        L += ["", "![calibration: reliability diagram of grade_prob](calibration.png)"]
    if r.curve:
        L += ["", "## On the learning curve", "", *(md_inline(x) for x in curve_lines(r.curve)),
              "", f"Curve: {md_inline(r.curve['curve'])}"]
    return L


def _low_marks_lines(r: Report) -> list[str]:
    """Per true mark the test answers' mean predicted mark and error, and the failing answers given a pass mark."""
    if not r.low_marks_table:
        return []
    head, rows, text = r.low_marks_table
    return ["", "## Low marks", "", f"**{md_inline(text)}**", "",
            md_inline(f"The course's {r.pass_mark} (rubric YAML: grade.pass_mark, grade.costs)."), "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(row) + " |" for row in rows)]


def _agreement_and_concept_lines(r: Report) -> list[str]:
    """Machine–human agreement, the concept table and its Spearman correlations."""
    L: list[str] = []
    L += ["", "## Machine–human and human–human agreement", ""]
    L += _md_table(r.agreement, [("pair", "pair"), ("n", "n"), ("qwk", "QWK"), ("pearson", "Pearson r"),
                                 ("smd", "SMD"), ("exact", "exact")]
                   + ([("adjacent", "adjacent")] if "adjacent" in r.agreement else []))
    if len(r.concepts):
        L += ["", "## Concepts", ""]
        cols = [("concept", "concept"), ("c_acc", "C-Acc"), ("c_f1", "C-F1"), ("alpha", "α"), ("alpha_lo", "α lo"),
                ("alpha_hi", "α hi"), ("sigma2", "σ²"), ("A_kk", "A_kk")]
        if "sigma2_implied" in r.concepts:
            cols += [("sigma2_implied", "σ²(implied)"), ("score_sigma2", "σ̂² (test)")]
        L += _md_table(r.concepts, cols + ([("test_reliability", "test reliability")]
                                           if "test_reliability" in r.concepts else []))
        sci, share = r.spearman_ci, r.noise_share
        L += ["", md_inline(r.sigma2_meaning)] if r.sigma2_meaning else []
        L += ["", f"Spearman ρ(σ², 1 − α) = {'—' if r.spearman is None else format(r.spearman, '.3f')}"
              + (f" ({_ci_words(sci)})" if sci else "")
              + _spans(sci)]
        for key, what in (("implied_vs_measured", "ρ(σ²(implied), σ̂²)"),
                          ("implied_vs_1_minus_alpha", "ρ(σ²(implied), 1 − α)")):
            c = r.implied.get(key)
            if c:
                L += ["", f"Spearman {what} = {c['rho']:.3f} ({_ci_words(c)})" + _spans(c)]
        if r.implied:
            L += ["", ("σ²(implied) = v_k (1 − A_kk) / A_kk (v_k = var(c_k/M) over the training labels) is the noise "
                      "LCEC's shrinkage implies under a diagonal prior; the learned σ² is identified only together "
                      "with Ω. σ̂² = var(s̃ − c/M) is the noise measured on the test answers.")]
        if share:
            L += ["", (f"Spearman ρ(1 − test reliability, 1 − α) = {share['rho']:.3f} ({_ci_words(share)})"
                       f"{_spans(share)}: test reliability "
                       "is the share of each concept score's variance that is signal on the test answers "
                       "(docs/training.md)")]
    return L


def _figure_lcec_trace_lines(r: Report) -> list[str]:
    """The reliability figures, LCEC, the decision traces, the rubric diagnostics and what is not shown."""
    L: list[str] = []
    for name, title in (("reliability.png", "reliability"), ("implied_noise.png", "implied vs measured noise"),
                        ("lcec_heatmaps.png", "LCEC correlations"),
                        ("intervention.png", "interventions")):
        if name in r.images:
            L += ["", f"![{title}]({name})"]
    if r.lcec:
        L += ["", f"Near-zero (|r| < {NEAR_ZERO}) off-diagonal share: labels {r.lcec.get('label_near_zero', 0):.0%}"
              + (f", learned partial correlations {r.lcec['partial_near_zero']:.0%}" if "partial_near_zero" in r.lcec
                 else "")
              + ("; strongest learned links: " + ", ".join(f"{a}–{b} ({v:+.2f})" for a, b, v in r.lcec["links"])
                 if r.lcec.get("links") else "")]
        if r.lcec.get("inert"):
            L += ["", (f"**LCEC is inert in this run:** {r.lcec['reason']}. Its learned links are not listed and the "
                      "rubric diagnostics do not use them.")]
    for t in r.traces:
        L += ["",
              f"### Decision trace {md_inline(t.id)}: grade {t.grade} (p = {t.grade_prob:.2f}), gold {t.gold_grade}",
              "", md_quote(t.response), "", f"![trace]({trace_file(t.id)})"]
        if t.why():
            L += ["", md_inline(t.why())]
    if r.diagnosis is not None:
        L += ["", "## Rubric diagnostics", ""] + [f"- {md_inline(s)}" for s in r.diagnosis.suggestions
                                                  or ["no suggestion"]]
        if r.diagnosis.ceiling is not None:
            L += [""] + [("#" + line) if line.startswith("##") else line
                         for line in ceiling_markdown(r.diagnosis.ceiling, r.diagnosis.pairs)]
    if r.unavailable:
        L += ["", "## Not shown", ""] + [f"- {md_inline(u)}" for u in r.unavailable]
    return L


def _provenance_lines(r: Report) -> list[str]:
    """Where the numbers came from, and the run's config as YAML."""
    L: list[str] = []
    p = r.provenance
    L += ["", "## Provenance", ""] + [f"- {k}: {md_inline(v)}" for k, v in p.items() if k != "config"]
    config = strip_controls(p["config"]).rstrip()
    fence = "`" * max([3] + [len(m) + 1 for m in re.findall("`{3,}", config)])  # longer than any run inside
    L += ["", f"{fence}yaml", config, fence, ""]
    return L
