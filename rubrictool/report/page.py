"""``rubrictool report``: everything about a trained run on one self-contained page (HTML and Markdown).

:func:`build_report` gathers the numbers and figures (grade metrics, machine–human beside human–human
agreement, concept metrics and reliability, LCEC correlations, intervention curves, two decision traces,
rubric diagnostics, provenance); :func:`render_html` / :func:`render_markdown` lay them out, and
:func:`rubrictool.report.write.write_report` writes the page, its PNGs and CSVs. Images are embedded as data: URIs, so
the HTML file opens offline anywhere.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from numpy.typing import NDArray

import reccbm
from reccbm.decision import decide
from rubrictool.atomic import atomic_write_bytes, atomic_write_text
from rubrictool.errors import DataError
from rubrictool.io import people_csv, writable_dir
from rubrictool.report import figures
from rubrictool.report.audit_section import audit_html, audit_verdict, load_audit
from rubrictool.report.diagnose import Diagnosis, diagnose
from rubrictool.report.explain import SYMBOLS, ItemTrace, explain_items
from rubrictool.report.honest import calibration_png, implied_noise_png, verdict
from rubrictool.report.intervene import intervention_curves
from rubrictool.report.run import Run, bundled_labels, git_revision, predict_with_attention, split_rows
from rubrictool.report.scores import pair_agreement, smd
from rubrictool.textsafe import strip_controls
from rubrictool.train.kfold import fold_context
from rubrictool.train.labels import describe_labels

__all__ = ["GRADE_METRICS", "NEAR_ZERO", "Report", "build_report", "curve_lines", "render_explain_html", "render_html",
           "template_env",
           "trace_file",
           "trace_png", "write_explain"]

NEAR_ZERO = 0.1  # |r| below this counts as a near-zero correlation (the paper's appendix threshold)
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
GRADE_METRICS = (("t_acc", "T-Acc (exact agreement)"), ("t_f1", "T-F1"), ("qwk", "QWK"), ("pearson", "Pearson r"),
                 ("rmse", "RMSE"), ("adjacent", "adjacent agreement (±1)"), ("smd", "SMD (model − human)"),
                 ("c_acc", "C-Acc"), ("c_f1", "C-F1"))


@dataclass
class Report:
    """The data of a report page; ``images`` maps a file name to PNG bytes, ``tables`` to DataFrames."""

    title: str
    run: str
    variant: str
    n_test: int
    metrics: dict[str, float]  # grade (and concept) metrics on the test split; as in metrics.json
    metrics_source: str
    provenance: dict[str, Any]
    agreement: pd.DataFrame = field(default_factory=pd.DataFrame)  # machine–human and human–human rows
    concepts: pd.DataFrame = field(default_factory=pd.DataFrame)  # per concept C-Acc, C-F1, α, CI, σ², A_kk
    spearman: float | None = None
    spearman_ci: dict[str, float] | None = None  # {"rho", "lo", "hi", "n"}: bootstrap over concepts
    noise_share: dict[str, float] | None = None  # ρ(1 − test reliability, 1 − α) with its CI, when the run has it
    lcec: dict[str, Any] = field(default_factory=dict)  # near-zero shares, the strongest links, inert + reason
    implied: dict[str, Any] = field(default_factory=dict)  # ρ(σ²(implied), σ̂²), ρ(σ²(implied), 1 − α) with CIs
    # n_test, majority class, CIs (rubrictool.evaluate.honest_metrics)
    honest: dict[str, Any] = field(default_factory=dict)
    warnings: list[dict[str, str]] = field(default_factory=list)  # [{code, message}], as metrics.json "warnings"
    calibration: dict[str, Any] = field(default_factory=dict)  # ECE, NLL, bins (rubrictool.evaluate.calibration)
    verdict: list[str] = field(default_factory=list)  # the page's conclusions in words, shown first
    grade_levels: int = 0  # number of grades on the rubric's scale (adjacent agreement only when > 2)
    traces: list[ItemTrace] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    curve: dict[str, Any] = field(default_factory=dict)  # where the run's size sits on a learning curve (--curve)
    fold: dict[str, Any] | None = None  # the run is one fold of a k-fold run (rubrictool.train.kfold.fold_context)
    points: dict[str, Any] = field(default_factory=dict)  # the points grader beside the majority class (metrics.json)
    # per true mark, failing answers (rubrictool.evaluate.low_marks)
    low_marks: dict[str, Any] = field(default_factory=dict)
    # low_marks in words (evaluate.low_marks_lines)
    low_marks_table: tuple[list[str], list[list[str]], str] | None = None
    pass_mark: str = ""  # the course's pass mark and error costs, in words
    sigma2_meaning: str = ""  # what σ² measures on this project's data (evaluate.reliability.SIGMA2_MEANING)
    unavailable: list[str] = field(default_factory=list)  # one line per section a run cannot show
    audit: dict[str, Any] = field(default_factory=dict)  # what rubrictool audit wrote in RUN/audit (audit_section)
    notes: list[str] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def _selected_test_metrics(run: Run) -> tuple[dict[str, Any], str]:
    seeds = run.metrics.get("seeds") or []
    sel = run.metrics.get("selected_seed")
    for s in seeds:
        if s.get("seed") == sel and isinstance(s.get("test"), dict):
            return dict(s["test"]), f"metrics.json (seed {sel}, the run's saved model)"
    return {}, "recomputed (metrics.json has no per-seed test metrics)"


def _off_diagonal(m: NDArray[Any]) -> NDArray[Any]:
    return np.asarray(m[~np.eye(len(m), dtype=bool)])


def build_report(
    run: Run, *, reviews: pd.DataFrame | None = None, random_repeats: int = 5, seed: int = 0,
    curve: str | Path | None = None, on_progress: Callable[[str], None] | None = None,
) -> Report:
    """Everything the report page shows, computed on the run's test split, section by section. ``curve``: a
    learning curve's curve.csv (``rubrictool learning-curve``) to show where the run's training size sits on it."""
    say = on_progress or (lambda _msg: None)
    test = split_rows(run, "test")
    gold = test["_y"].to_numpy(np.int64)
    say(f"predicting {len(test)} test answers")
    preds = predict_with_attention(run, test).preds
    pred = preds.grades
    has_c = preds.p_hat is not None and all(f"_c_{k}" in test for k in run.keys)
    gold_c = test[[f"_c_{k}" for k in run.keys]].to_numpy(np.int64) if has_c else None
    saved, source = _selected_test_metrics(run)
    computed = reccbm.grade_metrics(gold, pred) | (reccbm.concept_metrics(gold_c, preds.levels)
                                                     if gold_c is not None else {})
    G = run.model.config.num_grades
    metrics = {k: float(saved.get(k, computed.get(k, float("nan")))) for k, _ in GRADE_METRICS
               if k != "smd" and (k in saved or k in computed) and (k != "adjacent" or G > 2)}
    metrics["smd"] = smd(gold, pred)
    title = f"rubrictool report — {run.meta.get('rubric')} · {run.meta.get('variant')} · {run.path.name}"
    r = Report(title, str(run.path), str(run.meta.get("variant")), len(test), metrics, source,
               provenance(run, len(test)), notes=list(run.notes))
    off = [k for k in computed if k in saved and abs(float(saved[k]) - computed[k]) > 1e-6]
    if off:
        r.notes.append(f"recomputing the test predictions gives different {', '.join(off)} than metrics.json "
                       "(was the model or the table changed after training?)")
    r.grade_levels = G
    r.points = dict(run.metrics.get("points") or {})
    _low_marks_section(r, run, gold, pred)
    r.audit = load_audit(run.path)
    _honest_section(r, run, gold, preds.grade_probs)
    r.fold = fold_context(run.path)
    if r.fold:  # a fold's few test answers: the pooled page is the one to read, not "train with --folds 5"
        for w in r.warnings:
            if w.get("code") == "small_test":
                w["message"] = (f"only {r.n_test} test answers: this is fold {r.fold['fold']} of a "
                                f"{r.fold['folds']}-fold run; its pooled page covers every answer: rubrictool report "
                                f"--run {r.fold['parent']}")
    r.warnings += [{"code": "run", "message": w} for w in run.warnings]  # e.g. its training table changed since
    if curve is not None:
        _curve_section(r, run, curve)
    cm = np.zeros((G, G), dtype=np.int64)
    np.add.at(cm, (gold, pred), 1)
    r.images["confusion.png"] = figures.confusion_png(cm, list(range(run.grade_min, run.grade_min + G)))
    _agreement_section(r, run, test, pred)
    if run.plm:
        r.unavailable.append("PLM run: it grades without concepts, so it has no concept metrics, reliability, LCEC "
                             "correlations, interventions or decision traces")
        r.verdict = _verdict(r, run, pred + run.grade_min)
        return r
    assert preds.p_hat is not None
    _concept_section(r, run, preds, gold_c)
    partial = _lcec_section(r, run, test)
    r.verdict = _verdict(r, run, pred + run.grade_min)
    if gold_c is None:
        r.unavailable.append("interventions and rubric diagnostics: the table has no adjudicated concept labels "
                             "for the test answers")
        return r
    say("simulating interventions")
    curves = intervention_curves(run, preds.p_hat, gold_c, gold, random_repeats=random_repeats, seed=seed)
    r.tables["intervention.csv"] = curves
    r.images["intervention.png"] = figures.intervention_png(curves)
    # two decision traces: the most confident correct grade and the most confident wrong one
    conf = preds.grade_probs.max(1)
    picks = [int(np.argmax(np.where(want, conf, -1))) for want in (pred == gold, pred != gold) if want.any()]
    say("tracing two decisions")
    r.traces = explain_items(run, test.iloc[picks])
    for t in r.traces:
        r.images[trace_file(t.id)] = trace_png(t)
    say("diagnosing the rubric")
    _diagnosis_section(r, run, reviews, partial)
    return r


def _low_marks_section(r: Report, run: Run, gold: NDArray[Any], pred: NDArray[Any]) -> None:
    """Per true mark the test answers' mean predicted mark and error with CIs, and the failing answers given a pass
    mark, under the pass mark the run's rubric states (or its midpoint)."""
    from rubrictool.evaluate import low_marks, low_marks_lines
    from rubrictool.evaluate.reliability import SIGMA2_MEANING

    rb, g0 = run.rubric, run.grade_min
    r.low_marks = low_marks(gold + g0, pred + g0, list(range(g0, g0 + r.grade_levels)), rb.pass_mark)
    r.low_marks_table = low_marks_lines(r.low_marks)
    stated = ("the rubric states it" if rb.grade.pass_mark is not None
              else "the scale's midpoint: the rubric states none")
    r.pass_mark = (f"pass mark {rb.pass_mark} ({stated}); cost of a failing answer passed {rb.costs.fail_passed:g}, "
                   f"of a passing answer failed {rb.costs.pass_failed:g}")
    r.sigma2_meaning = SIGMA2_MEANING


def _honest_section(r: Report, run: Run, gold: NDArray[Any], probs: NDArray[Any]) -> None:
    """Test size, majority class, bootstrap CIs, warnings and calibration, recomputed from the page's predictions
    (the same numbers as metrics.json; the majority class is the one the run recorded)."""
    from rubrictool.evaluate import calibration, honest_metrics

    saved = (run.metrics.get("majority") or {}).get("grade")
    majority = None if saved is None else np.full(len(gold), int(saved) - run.grade_min)
    try:
        train = split_rows(run, "train")["_y"].to_numpy(np.int64) if majority is None else None
    except (DataError, KeyError):  # a table without the training answers (or their grades)
        train = None
    if train is None and majority is None:
        r.unavailable.append("the majority-class baseline and the run's warnings: the table has no graded "
                             "training answers")
    else:
        r.honest = honest_metrics(gold, decide(probs, run.model.decision), train, grade_min=run.grade_min,
                                  y_majority=majority)
        r.warnings = list(r.honest["warnings"])
    r.calibration = calibration(probs, gold)
    r.images["calibration.png"] = calibration_png(r.calibration)


def _curve_section(r: Report, run: Run, curve: str | Path) -> None:
    """Where the run's labelled answers (train + dev) sit on a learning curve of the run's variant (or, on a curve of
    the points route alone, on that route's curve, beside the run): the curve's expected QWK and T-Acc at that size
    beside the run's own, the full-data point, and the size that reaches 90 % of the full-data QWK while beating the
    majority class. A curve without the run's variant or points is reported as not shown, not as an error."""
    n_train = len(run.split.get("train", [])) + len(run.split.get("dev", []))
    recorded = run.config.get("encoder")
    enc: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    variant = curve_variant(str(run.meta.get("variant")), run.config.get("preset"), enc.get("asked"),
                            [enc.get("used") or (run.config.get("stage1") or {}).get("encoder") or "train"])
    beats = not {w.get("code") for w in r.warnings} & {"constant_predictions", "not_above_majority"}
    pos = curve_position(curve, n_train, variant, r.unavailable)
    if pos is not None:
        r.curve = pos | {"run_qwk": r.metrics.get("qwk"), "run_t_acc": r.metrics.get("t_acc"),
                         "run_beats_majority": beats,
                         "run_variant": variant}


def curve_variant(variant: str, preset: str | None, asked: str | None, used: list[str]) -> str:
    """The learning-curve variant a run (or a k-fold run's folds) reads: its variant, with "-frozen"/"-train"/"-auto"
    when the run asked for an encoder that its preset does not choose by itself (a curve variant without a suffix
    trains as the preset does: under the default preset, frozen below stage1.frozen_below answers). A run that does
    not record what it asked: "-frozen" when every model froze."""
    from reccbm.recipes import PRESETS

    if asked is None:
        return variant + ("-frozen" if used and all(u == "frozen" for u in used) else "")
    own = (PRESETS.get(preset or "default") or {}).get("stage1", {}).get("encoder", "train")
    return variant if asked == own else f"{variant}-{asked}"


def curve_position(curve: str | Path, n_train: float, variant: str, unavailable: list[str]) -> dict[str, Any] | None:
    """:func:`rubrictool.curve.position_on_curve` for ``variant``, or for the points route when the curve has no cells
    of the variant but has points cells (a points-only curve: the small-course route); None, with a line added to
    ``unavailable``, when it has neither or is not a curve."""
    from rubrictool.curve.figure import POINTS, position_on_curve
    from rubrictool.io import read_table

    try:
        variants = set(read_table(Path(curve))["variant"].astype(str))
    except Exception:  # noqa: BLE001 - not a table, or no variant column: position_on_curve says what is wrong
        variants = {variant}
    use = variant if variant in variants or POINTS not in variants else POINTS
    try:
        return position_on_curve(curve, n_train, use)
    except DataError as e:
        unavailable.append(f"position on the learning curve: {e}")
        return None


def curve_lines(c: dict[str, Any]) -> list[str]:
    """The learning-curve section in words (the same sentences on the HTML page and in Markdown). Only advice that can
    be followed: no "add all" when all is on the curve, no "past the 90 % point" for a run that grades no better
    than the majority class, no 90 % point for a curve that does not beat the majority class."""
    lo, hi, full = c.get("lower"), c.get("upper"), c.get("full")
    own = c.get("own") or f"this run has QWK {c['run_qwk']:.3f} and T-Acc {c['run_t_acc']:.3f} on its own test split."
    who = c.get("subject") or "This run"  # a k-fold page: "Each fold"
    them, are, beats = ("the folds", "are", "do not beat") if c.get("subject") else ("this run", "is", "does not beat")

    def sd(pt: dict[str, Any] | None, m: str) -> str:  # the spread over the size's folds × repeats, when measured
        return f" ± {pt[m + '_sd']:.3f}" if pt and pt.get(m + "_sd") is not None else ""
    route = c["variant"]
    if c["variant"] == "points" and c.get("run_variant", "points") != "points":
        route = "the points route: a points table fitted to that many graded answers, grading the concept levels"
    if c["within"]:
        if lo and hi and lo["n_train"] != hi["n_train"]:
            where = (f"interpolated between {lo['n_train']:.0f} and {hi['n_train']:.0f} answers, whose QWK is "
                     f"{lo['qwk']:.3f}{sd(lo, 'qwk')} and {hi['qwk']:.3f}{sd(hi, 'qwk')}, ± 1 s.d. over folds × "
                     "repeats")
            qwk, t_acc = f"{c['qwk']:.3f}", f"{c['t_acc']:.3f}"
        else:
            where = "at a measured size; ± 1 s.d. over folds × repeats"
            qwk, t_acc = f"{c['qwk']:.3f}{sd(lo or hi, 'qwk')}", f"{c['t_acc']:.3f}{sd(lo or hi, 't_acc')}"
        out = [(f"{who} trained on {c['n_train']:.0f} labelled answers (train + dev). On the curve ({route}), "
                f"that many answers give QWK {qwk} and T-Acc {t_acc} ({where}); {own}")]
    else:  # outside the measured sizes the curve cannot say where the run sits: say so, give the nearest size
        near, side = (lo, "largest") if lo else (hi, "smallest")
        assert near is not None
        if lo and lo["size"] == "all":
            fix = ("The curve's full-data point is a fold's whole training part, so a run trained on more answers "
                   "lies beyond it: compare the run with the pooled folds of `train --folds` instead.")
        elif lo:
            fix = "Add 'all' to the curve's sizes to place the run on it."
        else:
            fix = f"Add a size of {max(10, int(c['n_train']))} or fewer answers to the curve to place the run on it."
        out = [(f"{who} trained on {c['n_train']:.0f} labelled answers (train + dev), outside the curve's sizes: its "
                f"{side} size, {near['n_train']:.0f} answers, gives QWK {near['qwk']:.3f}{sd(near, 'qwk')} and T-Acc "
                f"{near['t_acc']:.3f}{sd(near, 't_acc')} ({route}; ± 1 s.d. over folds × repeats); {own} {fix}")]
    reach, reading = c.get("reach_90"), c.get("reading") or {}
    if full:
        majority = (reading.get("full") or {}).get("majority_t_acc")
        out.append(f"With all {full['n_train']:.0f} answers of the curve's folds: QWK "
                   f"{full['qwk']:.3f}{sd(full, 'qwk')}, T-Acc {full['t_acc']:.3f}{sd(full, 't_acc')}"
                   + (f" (the majority class's T-Acc there: {majority:.3f}; its QWK is 0)." if majority is not None
                      else "."))
    if reach:
        more = reach["n_estimate"] > c["n_train"]
        tail = (": grading more answers by hand should still help." if more else
                f": {them} {are} past it, more labels bring little." if c.get("run_beats_majority", True) else
                f", but {them} {beats} the majority class (see the verdict): the number of answers is not what "
                "holds it back.")
        out.append(f"90 % of the full-data QWK ({reach['target']:.3f}) is reached at about {reach['n_estimate']} "
                   "answers, above the majority class" + tail)
    elif reading.get("sentence"):
        out.append(f"On the curve, {reading['sentence']}.")
    return out


def _verdict(r: Report, run: Run, predicted: NDArray[Any]) -> list[str]:
    correlations: dict[str, dict[str, float] | None] = {
        "ρ(σ², 1 − α)": r.spearman_ci, "ρ(σ²(implied), σ̂²)": r.implied.get("implied_vs_measured"),
        "ρ(σ²(implied), 1 − α)": r.implied.get("implied_vs_1_minus_alpha"),
                                                        "ρ(1 − test reliability, 1 − α)": r.noise_share}
    grades = list(range(run.grade_min, run.grade_min + r.grade_levels))
    low = [r.low_marks_table[2]] if r.low_marks_table else []
    return low + verdict(grades=grades, predicted=sorted({int(g) for g in predicted}), honest=r.honest,
                   concepts=r.concepts, correlations=correlations, lcec=r.lcec, points=r.points,
                   qwk=r.metrics.get("qwk"), fold=r.fold,
                         levels=(run.labels or {}).get("levels")) + audit_verdict(r.audit)


def _graders(test: pd.DataFrame) -> list[str]:
    """The table's human grader columns, named as they are: grade_<who> with numbers (Mohler: grade_me,
    grade_other), not the adjudicated grade itself or the model's outputs."""
    skip = {"grade", "grade_prob", "grade_logit", "grade_bias", "grade_oracle", "grade_true"}
    return [c for c in test.columns if str(c).startswith("grade_") and c not in skip
            and pd.to_numeric(test[c], errors="coerce").notna().any()]


def _agreement_section(r: Report, run: Run, test: pd.DataFrame, pred: NDArray[Any]) -> None:
    """Machine–human beside human–human (RSMTool's layout): the model against the gold grade and each
    grader column the table has (grade_<who>, named as they are), the graders against each other."""
    g0 = run.grade_min
    rows = [{"pair": "model vs gold grade", **pair_agreement(test["_y"] + g0, pred + g0)}]
    graders = _graders(test)
    for c in graders:
        rows.append({"pair": f"model vs {c}", **pair_agreement(pd.to_numeric(test[c], errors="coerce"), pred + g0)})
    for i, a in enumerate(graders):
        for b in graders[i + 1:]:
            rows.append({"pair": f"{a} vs {b} (human–human)",
                         **pair_agreement(pd.to_numeric(test[a], errors="coerce"),
                                          pd.to_numeric(test[b], errors="coerce"))})
    if len(graders) < 2:
        r.unavailable.append("human–human agreement: the table has no two grader columns (grade_<who>, one per "
                             "human grader)")
    df = pd.DataFrame(rows)
    if r.grade_levels and r.grade_levels <= 2:  # ±1 covers every pair of a two-grade scale
        df = df.drop(columns=["adjacent"])
    r.agreement = r.tables["agreement.csv"] = df


def _concept_section(r: Report, run: Run, preds: reccbm.Predictions, gold_c: NDArray[Any] | None) -> None:
    """Per-concept C-Acc/C-F1 beside the reliability table (α, CI, σ², A_kk) and the σ² vs 1 − α scatter."""
    rel_path = run.path / "reliability.csv"
    rel = pd.read_csv(rel_path) if rel_path.is_file() else pd.DataFrame({"concept": run.keys})
    per = (next((s.get("per_concept") for s in run.metrics.get("seeds", [])
                 if s.get("seed") == run.metrics.get("selected_seed")), None) or {})
    if gold_c is not None:
        acc, f1 = reccbm.per_concept_metrics(gold_c, preds.levels)
        per = {"acc": per.get("acc", acc), "f1": per.get("f1", f1)}
    nan = [np.nan] * len(run.keys)
    concepts = pd.DataFrame({"concept": run.keys, "name": run.names, "c_acc": per.get("acc", nan),
                             "c_f1": per.get("f1", nan)})
    concepts = concepts.merge(rel.drop(columns=[c for c in ("name", "test_c_acc", "test_c_f1") if c in rel]),
                              on="concept", how="left")
    r.concepts = r.tables["concepts.csv"] = concepts
    r.spearman = run.metrics.get("spearman_sigma2_vs_1_minus_alpha")
    r.noise_share = run.metrics.get("spearman_noise_share")
    if run.metrics.get("implied_noise"):
        r.implied = dict(run.metrics["implied_noise"])
    elif {"sigma2_implied", "score_sigma2"} <= set(concepts.columns):
        from rubrictool.evaluate.reliability import implied_noise_rhos

        r.implied = implied_noise_rhos(concepts["sigma2_implied"], concepts["score_sigma2"],
                                       concepts.get("alpha", pd.Series(np.nan, index=concepts.index)))
    if {"sigma2_implied", "score_sigma2"} <= set(concepts.columns):
        pts = concepts.dropna(subset=["sigma2_implied", "score_sigma2"])
        if len(pts):
            r.images["implied_noise.png"] = implied_noise_png(pts, r.implied.get("implied_vs_measured"))
    if not run.has_lcec:
        r.unavailable.append("no LCEC layer in this run: no learned σ², A or Ω, so no reliability scatter and no "
                             "partial correlations")
    elif "alpha" in concepts and concepts["alpha"].notna().any():
        from rubrictool.evaluate import spearman_with_ci

        r.spearman_ci = run.metrics.get("spearman_ci") or spearman_with_ci(concepts["sigma2"], 1 - concepts["alpha"])
        r.images["reliability.png"] = figures.reliability_png(concepts.dropna(subset=["alpha", "sigma2"]), r.spearman)
    else:
        r.unavailable.append("no inter-rater α for the concepts (agreement.json was not found at training time): "
                             "no reliability scatter")


def _lcec_section(r: Report, run: Run, test: pd.DataFrame) -> NDArray[Any] | None:
    """Label correlation (training split) beside the learned partial correlations; returns the latter."""
    train = split_rows(run, "train") if run.split.get("train") else test
    cols = [f"_c_{k}" for k in run.keys]
    if not all(c in train for c in cols):
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        emp = np.nan_to_num(np.corrcoef(train[cols].to_numpy(float).T))
    np.fill_diagonal(emp, 1.0)
    panels = [("adjudicated label correlation (train)", emp)]
    r.lcec["label_near_zero"] = float(np.mean(np.abs(_off_diagonal(emp)) < NEAR_ZERO))
    r.tables["label_correlations.csv"] = pd.DataFrame(emp, index=run.keys, columns=run.keys)
    partial = None
    if run.has_lcec:
        from rubrictool.evaluate import lcec_activity

        rel = reccbm.reliability(run.model)
        partial = reccbm.partial_correlations(rel["Omega"])
        panels.append(("LCEC's partial correlation −Ω_ij/√(Ω_ii Ω_jj)", partial))
        r.lcec["partial_near_zero"] = float(np.mean(np.abs(_off_diagonal(partial)) < NEAR_ZERO))
        r.lcec |= lcec_activity(np.diag(rel["A"]), partial)
        r.tables["partial_correlations.csv"] = pd.DataFrame(partial, index=run.keys, columns=run.keys)
        if r.lcec["inert"]:  # links at ±0.00 say nothing: neither listed here nor in the rubric diagnostics
            partial = None
        else:
            iu = np.triu_indices(len(run.keys), 1)
            top = np.argsort(-np.abs(partial[iu]))[:3]
            r.lcec["links"] = [(run.keys[iu[0][t]], run.keys[iu[1][t]], float(partial[iu][t])) for t in top]
    r.images["lcec_heatmaps.png"] = figures.heatmaps_png(run.keys, panels)
    return partial


def _diagnosis_section(r: Report, run: Run, reviews: pd.DataFrame | None, partial: NDArray[Any] | None) -> None:
    """Rubric diagnostics on the run's whole table, with the learned partial correlations."""
    assert run.table is not None
    rb = run.rubric  # the run's copy of its rubric
    alpha = {"concepts": {c["concept"]: {"alpha": _num(c.get("alpha")),
                                         "alpha_ci": [_num(c.get("alpha_lo")), _num(c.get("alpha_hi"))]}
                          for c in r.concepts.to_dict("records")}}
    if reviews is None and run.meta.get("rubric") == "mohler" and bundled_labels(run):
        from rubrictool.data import load_concept_passes

        reviews = load_concept_passes(run.data_dir)
    r.diagnosis = diagnose(rb, run.table, alpha, reviews, partial)


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(v) else v


def _safe(s: str) -> str:
    """A file-name part for an answer id: its safe characters (at most 40) and a short hash of the whole id,
    so ids that differ only in unsafe characters (``a/b``, ``a_b``, ``a:b``) get different files."""
    slug = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in s)[:40]
    return f"{slug}-{hashlib.sha256(s.encode('utf-8')).hexdigest()[:8]}"


def provenance(run: Run, n_test: int) -> dict[str, Any]:
    split_doc = run.split
    return {
        "rubric": run.meta.get("rubric"),
        "rubric_version": run.rubric_version(),
        "data": run.source,
        "labels": describe_labels(run.labels) or "unknown (the run does not record who made its labels)",
        "notes": "; ".join(run.notes) or "—",
        "variant": run.meta.get("variant"),
        "backbone": (run.config.get("model") or {}).get("backbone") or "all-MiniLM-L6-v2 (default)",
        "preset": run.config.get("preset"),
        "seed": "—" if run.meta.get("seed") is None else run.meta["seed"],
        "selected_by": run.meta.get("selected_by"),
        "split": " · ".join(f"{s} {len(split_doc.get(s, []))}" for s in ("train", "dev", "test"))
                 + f" answers (split.json; {n_test} test answers reported here)",
        "split_seed": "—" if split_doc.get("seed") is None else split_doc["seed"],
        "rubrictool revision of the run": run.record.get("git_revision") or "— (not trained from a git checkout)",
        "rubrictool revision of this report": git_revision() or "—",
        "config": yaml.safe_dump(run.config, sort_keys=False, allow_unicode=True) if run.config else "",
    }


def trace_file(item_id: str) -> str:
    """The PNG name of an answer's decision trace: ``trace-<safe id>-<hash>.png`` (unique per id, safe on
    every file system)."""
    return f"trace-{_safe(item_id)}.png"


def trace_png(t: ItemTrace) -> bytes:
    after = [c.contribution_after or 0.0 for c in t.concepts] if t.grade_after is not None else None
    title = (f"{strip_controls(t.id, '').replace('$', chr(92) + '$')}: grade {t.grade} (p = {t.grade_prob:.2f}), logit "
             f"{t.logit:+.2f}"
             + (f", gold {t.gold_grade}" if t.gold_grade is not None else ""))
    other = None
    if t.other_grade is not None and t.other_bias is not None:
        other = (f"toward the {t.other_kind} grade {t.other_grade}",
                 [c.contribution_other or 0.0 for c in t.concepts], t.other_bias)
    return figures.contributions_png([c.key for c in t.concepts], [c.contribution for c in t.concepts], t.bias, title,
                                     after, f"after override → grade {t.grade_after}", other,
                                     f"toward the predicted grade {t.grade}")


# ---------------------------------------------------------------------------- rendering
def template_env() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["f3"] = lambda x: "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3f}"
    env.filters["pct"] = lambda x: "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f} %"
    env.filters["uri"] = figures.data_uri
    env.filters["raw"] = lambda x: "" if x is None or (isinstance(x, float) and np.isnan(x)) else repr(float(x))
    return env


def highlighted(t: ItemTrace, k: int) -> str:
    """The response as HTML with concept k's attention as the background of each token."""
    if t.alpha is None or not t.spans:
        return html.escape(t.response)
    a = np.asarray(t.alpha[k], dtype=float)
    top = a.max() if a.size and a.max() > 0 else 1.0
    out, pos = [], 0
    for (s, e), v in zip(t.spans, a):
        out.append(html.escape(t.response[pos:s]))
        w = v / top
        ink = "; color: #fff" if w > 0.6 else ""
        out.append(f'<span class="tok" style="background: rgba(31,119,180,{w:.2f}){ink}" title="α = {v:.3f}">'
                   f"{html.escape(t.response[s:e])}</span>")
        pos = e
    out.append(html.escape(t.response[pos:]))
    return "".join(out)


def _trace_view(t: ItemTrace, image: bytes) -> dict[str, Any]:
    return {"t": t, "image": image, "highlights": [highlighted(t, k) for k in range(len(t.concepts))]}


def render_html(r: Report) -> str:
    views = [_trace_view(t, r.images[trace_file(t.id)]) for t in r.traces]
    from rubrictool.report.diagnose import reviewer_confusion

    pairs = (reviewer_confusion(r.diagnosis.confusions, list(r.diagnosis.concepts["concept"]))
             if r.diagnosis is not None else pd.DataFrame())
    return str(template_env().get_template("report.html.j2").render(r=r, metric_names=GRADE_METRICS, traces=views,
                                                            near_zero=NEAR_ZERO, pairs=pairs,
                                                            curve_lines=curve_lines(r.curve) if r.curve else [],
                                                            audit_html=audit_html(r.audit)))


def render_explain_html(traces: list[ItemTrace], run_name: str, images: dict[str, bytes]) -> str:
    views = [_trace_view(t, images[trace_file(t.id)]) for t in traces]
    return str(template_env().get_template("explain.html.j2").render(traces=views, run=run_name, symbols=SYMBOLS))


def write_explain(traces: list[ItemTrace], out: str | Path, title: str) -> dict[str, Path]:
    """explain.html, explain.csv and trace-<id>.png into `out`; returns their paths."""
    from rubrictool.report.explain import traces_frame

    d = writable_dir(out)
    images = {trace_file(t.id): trace_png(t) for t in traces}
    paths = {}
    for name, png in images.items():
        paths[name] = atomic_write_bytes(d / name, png)
    atomic_write_text(d / "explain.html", render_explain_html(traces, title, images))
    frame = traces_frame(traces)
    atomic_write_bytes(d / "explain.csv", people_csv(frame))  # opened in spreadsheets: formulas neutralised
    return {"explain.html": d / "explain.html", "explain.csv": d / "explain.csv"} | paths
