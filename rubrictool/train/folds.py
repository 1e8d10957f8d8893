"""k-fold evaluation: one run per fold (:func:`rubrictool.train.train_model`), then the pooled metrics, the baselines
and ``folds.md``/``folds.json`` (:func:`train_folds`)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from numpy.typing import NDArray

import reccbm
from rubrictool.data import kfold_splits, save_split
from rubrictool.errors import DataError, TrainError
from rubrictool.evaluate import (
    expected_calibration_error,
    honest_metrics,
    low_marks,
    low_marks_lines,
    majority_baseline,
    oracle_concept_baseline,
    pooled_metrics,
    spearman_with_ci,
)
from rubrictool.evaluate.reliability import (
    SIGMA2_MEANING,
    concept_alpha,
    folds_reliability,
    implied_noise_rhos,
    noise_share_rho,
    reliability_rows,
)
from rubrictool.io import atomic_write_text, read_table, write_table
from rubrictool.progress import Progress, ProgressFn
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.textsafe import md_table
from rubrictool.train.kfold import (
    SHARED_WEIGHTS,
    constant_text,
    fold_given,
    prune_shared_weights,
    training_text,
)
from rubrictool.train.labels import describe_labels
from rubrictool.train.recipe import DataRecord, TrainOptions
from rubrictool.train.resume import check_folds
from rubrictool.train.run import TrainResult, prepare_table, read_agreement, train_model
from rubrictool.train.runs import RECORD, run_is_complete

__all__ = ["FINAL_DIR", "FINAL_NOTE", "FOLD_COLUMNS", "folds_markdown", "train_folds"]

FINAL_DIR = "final"
"""The k-fold run's final model (``train --folds k --final``): one run trained on every labelled answer."""
FINAL_NOTE = ("final model: trained on every labelled answer (its dev and test parts are its training answers, so "
              "its own figures are in-sample); its quality card is the pooled figures of the folds beside it "
              "(folds.md)")


def _fold_done(fold_dir: Path) -> bool:
    """A fold to read back: a complete run (its files match run.json); a fold written before run records counts when
    its metrics, test predictions and model.json are all there."""
    if (fold_dir / RECORD).is_file():
        return run_is_complete(fold_dir)
    return all((fold_dir / f).is_file() for f in ("metrics.json", "test_predictions.csv", "model.json"))


def train_folds(
    rubric: Rubric | str | Path,
    table: pd.DataFrame,
    run_dir: str | Path,
    *,
    folds: int = 5,
    fold_seed: int = 0,
    by: str | None = None,
    options: TrainOptions = TrainOptions(),
    record: DataRecord = DataRecord(),
    progress: ProgressFn | None = None,
    jobs: int = 1,
    final: bool = False,
) -> TrainResult:
    """k-fold evaluation: one run per fold in ``run_dir/fold-<i>`` (every item tested exactly once; see
    :func:`rubrictool.data.kfold_splits`), then pooled metrics and the baselines (:mod:`rubrictool.evaluate`).
    options and record are each fold's :func:`rubrictool.train.train_model` arguments.
    jobs > 1: the folds not finished yet train in that many worker processes (:mod:`rubrictool.train.parallel`), each
    fold as the serial run trains it.

    final: then one more model on every labelled answer, ``run_dir/final`` (:data:`FINAL_DIR`), which ``rubrictool
    grade --run run_dir`` grades with, the pooled figures its quality card. Resumable: a fold whose run finished
    (metrics.json written) is read back, not retrained; so is the final model.
    progress gets one task, "folds": folds done so far, and whether the next one trains or was read back."""
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    agreement, notes = record.agreement, record.notes
    if isinstance(agreement, (str, Path)):
        agreement = read_agreement(Path(agreement))
    run = Path(run_dir)
    progress = _once(progress)  # each fold encodes the same table: its truncation warning is said once per run
    splits = kfold_splits(prepare_table(table, rb, need_concepts=False), k=folds, seed=fold_seed, by=by)
    rs = options.resolve(rb)
    check_folds(run, splits, table, lambda n: rs.for_answers(n).config, _fold_done)  # another config or table: refused
    _save_fold_splits(run, splits, fold_seed, by)
    # the folds keep their encoder weights once per distinct content in SHARED_WEIGHTS (a frozen encoder: once)
    fold_args: dict[str, Any] = {"options": options, "record": replace(record, agreement=agreement),
                                 "shared_weights": run / SHARED_WEIGHTS}
    if jobs > 1:  # the folds not finished yet, in worker processes; the loop below reads them back
        from rubrictool.train.parallel import run_in_workers

        run_in_workers(train_model, [(f"fold {i + 1}", {"rubric": rb, "table": table, "split": sp,
                                                        "run_dir": run / f"fold-{i}", **fold_args})
                                     for i, sp in enumerate(splits) if not _fold_done(run / f"fold-{i}")], jobs,
                       progress, "folds")
    results: list[dict[str, Any]] = []
    for i, sp in enumerate(splits):
        fold_dir = run / f"fold-{i}"
        if _fold_done(fold_dir):
            if progress:
                progress(Progress("folds", i + 1, folds, f"fold {i + 1}: finished earlier, read back"))
        else:
            if progress:
                progress(Progress("folds", i, folds, f"fold {i + 1}: training"))
            train_model(rb, table, sp, fold_dir, progress=progress, **fold_args)
        results.append(json.loads((fold_dir / "metrics.json").read_text()))
    prune_shared_weights(run, SHARED_WEIGHTS)  # encoder files of folds trained again, which no fold uses any more
    if progress:
        progress(Progress("folds", folds, folds, "all folds done: pooled"))
    pooled, has_c = _pooled_predictions(rb, table, run, splits, plm="plm" in results[0]["variant"])
    write_table(pooled, run / "pooled_predictions.csv")  # atomic: what `compare` reads as a finished k-fold run
    summary = _folds_summary(rb, run, results, pooled, has_c, agreement, notes, fold_seed, by)
    summary["route"] = _route(rb, pooled, table, agreement, summary)
    if final:
        summary["final"] = _train_final(rb, table, run, splits, fold_args, progress)
    atomic_write_text(run / "folds.md", folds_markdown(summary))
    atomic_write_text(run / "folds.json", json.dumps(summary, indent=2, default=float) + "\n")  # last: ablate's "done"
    fold0 = run / "fold-0"
    rel = pd.read_csv(fold0 / "reliability.csv") if (fold0 / "reliability.csv").is_file() else pd.DataFrame()
    return TrainResult(run, summary["variant"], _folds_metrics(summary, results, len(pooled)), rel,
                       results[0].get("spearman_sigma2_vs_1_minus_alpha"), list(notes or []))


def _once(progress: ProgressFn | None) -> ProgressFn | None:
    """``progress`` passing each distinct warning once (the folds train on one table and warn alike)."""
    if progress is None:
        return None
    seen: set[str] = set()
    inner: ProgressFn = progress

    def report(p: Progress) -> None:
        if p.kind == "warning":
            if p.info in seen:
                return
            seen.add(p.info)
        inner(p)
    return report


def _route(rb: Rubric, pooled: pd.DataFrame, table: pd.DataFrame, agreement: dict[str, Any] | None,
           summary: dict[str, Any]) -> dict[str, Any]:
    """folds.json ``route``: each route's figures (:func:`rubrictool.route.route_figures`) and the verdict in words."""
    from rubrictool.route import choose_route, route_figures, route_lines

    if "plm" in summary["variant"]:
        return {}
    figs = route_figures(pooled, rb, table=table, agreement=agreement, labels=summary.get("labels"),
                         sigma2=(summary.get("reliability") or {}).get("sigma2_mean"))
    return {"figures": figs, "choice": choose_route(figs), "lines": route_lines(figs)}


def _train_final(rb: Rubric, table: pd.DataFrame, run: Path, splits: list[dict[str, list[str]]],
                 fold_args: dict[str, Any], progress: ProgressFn | None) -> dict[str, Any]:
    """The final model in ``run/final``: every answer the folds tested (every labelled answer) as its training part,
    and as its dev and test parts too (the recipe selects on dev; there is nothing left out to measure on). Its own
    encoder weights (not the folds' shared folder, which is pruned to what the folds use). Read back when done."""
    ids = [i for sp in splits for i in sp["test"]]
    target = run / FINAL_DIR
    if _fold_done(target):
        if progress:
            progress(Progress("final", 1, 1, "final model: finished earlier, read back"))
    else:
        if progress:
            progress(Progress("final", 0, 1, f"final model: training on all {len(ids)} answers"))
        args = {k: v for k, v in fold_args.items() if k != "shared_weights"}
        args["record"] = replace(args["record"], notes=[*(args["record"].notes or []), FINAL_NOTE])
        train_model(rb, table, {"train": ids, "dev": ids, "test": ids}, target, progress=progress, **args)
    return {"dir": FINAL_DIR, "answers": len(ids)}


def _save_fold_splits(run: Path, splits: list[dict[str, list[str]]], fold_seed: int, by: str | None) -> None:
    """fold-<i>.split.json for every fold, before any training: a folder that cannot be written is one line, not minutes
    of training lost."""
    folds, current = len(splits), run
    try:
        run.mkdir(parents=True, exist_ok=True)
        for i, sp in enumerate(splits):
            current = run / f"fold-{i}.split.json"
            save_split(sp, current, seed=fold_seed, meta={"fold": i, "folds": folds, "by": by})
    except OSError as exc:
        done = sum(_fold_done(run / f"fold-{i}") for i in range(folds)) if run.is_dir() else 0
        kept = f"the {done} fold(s) finished earlier in {run} are kept" if done else f"nothing was written to {run}"
        raise TrainError(f"{current}: cannot write it ({exc.strerror or exc}); nothing was trained; {kept}",
                         hint="pass --out a folder you can write (or free space), then train again") from None


def _pooled_predictions(rb: Rubric, table: pd.DataFrame, run: Path, splits: list[dict[str, list[str]]],
                        plm: bool) -> tuple[pd.DataFrame, bool]:
    """Every fold's test predictions beside the true grade (and levels), with the fold's majority-class and
    oracle-concept baselines; and whether the table has the true levels."""
    # the true levels, when the table has them: the concept metrics (not for the PLM, which predicts none) and
    # the oracle-concept baseline (for every variant, so the PLM's table has it too)
    has_c = not plm or all(k in table.columns for k in rb.keys)
    try:
        df = prepare_table(table, rb, need_concepts=has_c)
    except DataError:
        if not plm:
            raise
        has_c, df = False, prepare_table(table, rb, need_concepts=False)
    truth = df.set_index("id")
    parts = []
    for i, sp in enumerate(splits):
        pred = read_table(run / f"fold-{i}" / "test_predictions.csv")  # neutralised cells back as they were
        pred.insert(1, "fold", i)
        pred.insert(2, "grade_true", truth.loc[pred["id"], "_y"].to_numpy() + rb.grade.min)
        if has_c:
            for k in rb.keys:
                pred[f"{k}_true"] = truth.loc[pred["id"], f"_c_{k}"].to_numpy() + rb.scale.min
        y: dict[str, NDArray[Any]] = {s: truth.loc[sp[s], "_y"].to_numpy() for s in ("train", "dev", "test")}
        b = pd.DataFrame({"id": sp["test"], "majority": majority_baseline(y["train"], len(sp["test"])) + rb.grade.min})
        if has_c:
            lv: dict[str, NDArray[Any]] = {s: truth.loc[sp[s], [f"_c_{k}" for k in rb.keys]].to_numpy()
                                           for s in ("train", "dev", "test")}
            b["oracle_concepts"] = oracle_concept_baseline(lv, y, rb.M + 1) + rb.grade.min
        parts.append(pred.merge(b, on="id"))
    return pd.concat(parts, ignore_index=True), has_c


def _folds_summary(rb: Rubric, run: Path, results: list[dict[str, Any]], pooled: pd.DataFrame, has_c: bool,
                   agreement: dict[str, Any] | None, notes: list[str] | None, fold_seed: int,
                   by: str | None) -> dict[str, Any]:
    """folds.json: the pooled metrics and baselines, each fold's, calibration, and the reliability over folds."""
    folds, plm = len(results), "plm" in results[0]["variant"]
    keys = rb.keys if has_c and not plm else []
    summary = {
        "variant": results[0]["variant"], "preset": results[0].get("preset"), "rubric": rb.name, "folds": folds,
        "fold_seed": fold_seed, "by": by, "n_items": len(pooled), "notes": list(notes or []),
        "pooled": pooled_metrics(pooled, keys),
        "per_fold": [r["seeds"][0]["test"] | {"fold": i} | fold_given(pooled, i) for i, r in enumerate(results)],
        "baselines": {name: pooled_metrics(pooled.assign(grade=pooled[name])
                                           .drop(columns=["grade_oracle"], errors="ignore"), [])
                      for name in ("majority", "oracle_concepts") if name in pooled},
        "train_seconds": [r["summary"].get("train_seconds", 0.0) for r in results],
        "encoder": [(r.get("encoder") or {}).get("used", "train") for r in results],  # per fold (auto decides per fold)
        "encoder_asked": (results[0].get("encoder") or {}).get("asked"),  # the same for every fold
        "grade_levels": rb.grade.max - rb.grade.min + 1,
        "labels": results[0].get("labels") or {},  # who made the labels (every fold trains on the same table)
    }
    fold0_config = run / "fold-0" / "config.yaml"
    summary["trained"] = training_text(summary, yaml.safe_load(fold0_config.read_text()) if fold0_config.is_file()
                                       else None)
    honest = honest_metrics(pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy(), None,
                            y_majority=pooled["majority"].to_numpy())
    summary |= {k: honest[k] for k in ("majority", "ci", "vs_majority", "top_grade", "top_share")}
    summary["warnings"] = [w for w in honest["warnings"] if w["code"] != "small_test"]  # every answer was tested
    cut = [n for n in results[0].get("notes") or [] if "were truncated" in str(n)]  # every fold encodes the same table
    summary["warnings"] += [{"code": "truncated", "message": str(cut[0])}] if cut else []
    summary["low_marks"] = low_marks(pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy(), rb.grade.values,
                                     rb.pass_mark)
    summary["pass_mark"] = {"pass_mark": rb.pass_mark, "costs": rb.costs.model_dump(),
                            "stated": rb.grade.pass_mark is not None}
    cal = expected_calibration_error(pooled["grade_prob"], pooled["grade"] == pooled["grade_true"])
    ns = [r.get("n_test") for r in results]
    nlls = [(r.get("calibration") or {}).get("nll") for r in results]
    nll = None  # the mean over all answers of the folds' per-answer NLL (runs written before it: none)
    if all(isinstance(n, int) for n in ns) and all(isinstance(v, float) for v in nlls):
        nll = float(np.average(np.asarray(nlls, float), weights=np.asarray(ns, float)))
    summary["calibration"] = cal | {"nll": nll}
    _add_reliability(summary, rb, run, pooled, keys, agreement)
    attn = [r["seeds"][0].get("attention") for r in results]
    if all(attn):
        summary["attention"] = {k: np.mean([a[k] for a in attn if a], axis=0).tolist() for k in attn[0] or {}}
    return summary


def _add_reliability(summary: dict[str, Any], rb: Rubric, run: Path, pooled: pd.DataFrame, keys: list[str],
                     agreement: dict[str, Any] | None) -> None:
    """The folds' reliability tables averaged (σ², A_kk, the identified noise) and the concept scores' noise measured
    on every answer (``summary["reliability"]``, ``summary["score_reliability"]``)."""
    rels = [run / f"fold-{i}" / "reliability.csv" for i in range(summary["folds"])]
    frames = [pd.read_csv(p) for p in rels] if all(p.is_file() for p in rels) else []
    if frames and frames[0]["A_kk"].notna().any():
        sigma2 = np.mean([f["sigma2"].to_numpy() for f in frames], axis=0)  # (K,) mean over folds
        summary["reliability"] = {
            "concepts": frames[0]["concept"].tolist(), "alpha": frames[0]["alpha"].tolist(),
            "sigma2_mean": sigma2.tolist(),
            "A_kk_mean": np.mean([f["A_kk"].to_numpy() for f in frames], axis=0).tolist(),
            "mean_A_kk": float(np.mean([f["A_kk"].mean() for f in frames])),
            "spearman": spearman_with_ci(sigma2, 1 - frames[0]["alpha"].to_numpy()),
        }
    if keys and all(f"{k}_expected" in pooled for k in keys):  # the concept scores' noise on new answers, all folds
        score = reccbm.concept_score_reliability(pooled[[f"{k}_expected" for k in keys]].to_numpy(float) - rb.scale.min,
                                                 pooled[[f"{k}_true" for k in keys]].to_numpy(float) - rb.scale.min,
                                                 rb.M)
        alpha = [concept_alpha(agreement, k)[0] for k in keys]
        summary["score_reliability"] = {"concepts": keys, "alpha": alpha, **score,
                                        "alpha_ci": [list(concept_alpha(agreement, k)[1:]) for k in keys],
                                        "c_acc": [float((pooled[f"{k}_level"] == pooled[f"{k}_true"]).mean())
                                                  if f"{k}_level" in pooled else float("nan") for k in keys],
                                        "spearman_noise_share": noise_share_rho(score["reliability"], alpha)}
        if "reliability" in summary and all("sigma2_implied" in f for f in frames):
            implied = np.mean([f["sigma2_implied"].to_numpy(float) for f in frames], axis=0)  # (K,) mean over folds
            summary["reliability"]["sigma2_implied_mean"] = implied.tolist()
            summary["reliability"]["score_sigma2_pooled"] = score["sigma2"]
            summary["reliability"] |= implied_noise_rhos(implied, score["sigma2"], alpha)


def _folds_metrics(summary: dict[str, Any], results: list[dict[str, Any]], n_items: int) -> dict[str, Any]:
    """The k-fold run's metrics as one run's (TrainResult.metrics): the pooled metrics as the summary, the first
    fold's seeds, and the folds' mean stage timings."""
    metrics = {"variant": summary["variant"], "encoder": results[0].get("encoder"),
               "summary": {k: {"mean": v, "std": 0.0} for k, v in summary["pooled"].items()},
               "folds": summary, "seeds": results[0]["seeds"],
               "spearman_noise_share": summary.get("score_reliability", {}).get("spearman_noise_share"),
               "n_test": n_items, "warnings": summary["warnings"], "labels": summary["labels"],
               "low_marks": summary["low_marks"], "route": summary.get("route") or {},
               **{k: summary[k] for k in ("majority", "ci", "vs_majority", "calibration")}}
    metrics["summary"] |= {f"{s}_seconds": float(np.mean([r["summary"].get(f"{s}_seconds", 0.0) for r in results]))
                           for s in ("stage1", "joint", "stage2", "train")}
    return metrics


FOLD_COLUMNS = (("t_acc", "T-Acc"), ("t_f1", "T-F1"), ("qwk", "QWK"), ("pearson", "Pearson r"), ("rmse", "RMSE"),
                ("adjacent", "adjacent"), ("c_acc", "C-Acc"), ("c_f1", "C-F1"),
                ("oracle_t_acc", "oracle-interv. T-Acc"))


def folds_markdown(summary: dict[str, Any]) -> str:
    """folds.md: pooled metrics of the run and the baselines, then each fold."""
    def cell(m: dict[str, Any], k: str) -> str:
        v = m.get(k)
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

    # ±1 covers every pair of a two-grade scale: adjacent agreement says nothing there
    columns = [c for c in FOLD_COLUMNS if c[0] != "adjacent" or summary.get("grade_levels", 3) > 2]
    head = "| model | " + " | ".join(n for _, n in columns) + " |"
    sep = "|---" * (len(columns) + 1) + "|"
    rows = [f"| {summary['variant']} ({summary['preset']}) | "
            + " | ".join(cell(summary["pooled"], k) for k, _ in columns) + " |"]
    for name, m in summary["baselines"].items():
        rows.append(f"| {name.replace('_', ' ')} baseline | " + " | ".join(cell(m, k) for k, _ in columns) + " |")
    folds = [f"| fold {m['fold']}{' (constant: grade ' + str(m['top_grade']) + ')' if m.get('constant') else ''} | "
             + " | ".join(cell(m, k) for k, _ in columns) + " |" for m in summary["per_fold"]]
    title = f"{summary['folds']}-fold evaluation, {summary['n_items']} items pooled (rubric {summary['rubric']})"
    who = describe_labels(summary.get("labels") or {})
    honest = [f"Labels: {who}.", ""] if who else ["Labels: not recorded (who made them is unknown).", ""]
    honest += [f"Trained: {summary['trained']}.", ""] if summary.get("trained") else []
    if summary.get("final"):
        fin = summary["final"]
        line = (f"Final model: `{fin['dir']}/`, trained on all {fin['answers']} labelled answers; `rubrictool grade "
                "--run` on this folder grades with it, and these pooled figures are its quality card.")
        honest += [line, ""]
    constant = constant_text(summary.get("per_fold") or [])
    honest += [f"**{constant}**", ""] if constant else []
    if "ci" in summary:
        ci, cal = summary["ci"], summary.get("calibration") or {}
        honest += [f"T-Acc {ci['t_acc']['value']:.3f} [95 % CI {ci['t_acc']['lo']:.3f}, {ci['t_acc']['hi']:.3f}], "
                  f"QWK {ci['qwk']['value']:.3f} [{ci['qwk']['lo']:.3f}, {ci['qwk']['hi']:.3f}]; majority class "
                  f"(grade {summary['majority']['grade']}) T-Acc {summary['majority']['t_acc']:.3f}; ECE "
                  f"{cal.get('ece', float('nan')):.3f} ({cal.get('ece_bins', '')})"
                  + (f", NLL {cal['nll']:.3f}" if cal.get("nll") is not None else ""), ""]
        honest += [f"**Warning:** {w['message']}" for w in summary.get("warnings", [])] + [""]
    return "\n".join([f"# {title}", "", *honest, *_route_md(summary), head, sep, *rows, "", "Per fold:", "", head, sep,
                      *folds, "", *_low_marks_md(summary), *_reliability_md(summary)]
                     + [f"> {n}" for n in summary["notes"]]) + "\n"


def _route_md(summary: dict[str, Any]) -> list[str]:
    """The verdict: the route this course's figures support and the figure that decided (folds.json ``route``)."""
    lines = (summary.get("route") or {}).get("lines") or []
    return ["## Verdict", "", *(f"- {line}" for line in lines), ""] if lines else []


def _low_marks_md(summary: dict[str, Any]) -> list[str]:
    """Per true mark the pooled answers' mean predicted mark and error, and the failing answers given a pass mark."""
    lm = summary.get("low_marks")
    if not lm:
        return []
    head, rows, text = low_marks_lines(lm)
    return ["## Low marks", "", f"**{text}**", "", *md_table(head, rows)]


def _reliability_md(summary: dict[str, Any]) -> list[str]:
    """The reliability table (α, σ², σ²(implied), C-Acc, test reliability) and what σ² measures."""
    df = folds_reliability(summary)
    if not len(df):
        return []
    head, rows = reliability_rows(df)
    return ["## Reliability", "", *md_table(head, rows), SIGMA2_MEANING, ""]
