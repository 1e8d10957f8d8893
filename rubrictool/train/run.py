"""One training run: :func:`train_model` validates the table against the rubric, maps concept levels to 0..M
(level − scale.min) and grades to 0..S (grade − grade.min), fits a :class:`reccbm.Grader` by the recipe (Stage I, joint
stage, Stage II; or the PLM baseline) for one or more seeds, and writes a run directory::

    runs/<name>/config.yaml  split.json  metrics.json  reliability.csv  reliability.md
                train.log  test_predictions.csv  model.safetensors  model.json  backbone/
                profile.json (what the grade flags compare new responses with, rubrictool.flags)

The run is built in a staging folder and renamed into place when complete (:mod:`rubrictool.train.runs`).
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from accelerate import PartialState

import reccbm
from reccbm import Predictions
from reccbm.decision import decide
from reccbm.device import describe_device
from rubrictool.data import save_split
from rubrictool.errors import TrainError
from rubrictool.evaluate import calibration, honest_metrics, low_marks, paired_bootstrap, spearman_with_ci
from rubrictool.evaluate.reliability import (
    implied_noise_rhos,
    lcec_state,
    noise_share_rho,
    reliability_markdown,
    reliability_table,
)
from rubrictool.flags import profile_from_table, save_profile
from rubrictool.io import people_csv
from rubrictool.progress import ProgressFn, note, training_events, truncation_message, warn
from rubrictool.provenance import git_revision
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import validate_adjudicated
from rubrictool.train.labels import label_source
from rubrictool.train.predictions import predictions_frame
from rubrictool.train.recipe import DataRecord, ResolvedTraining, TrainOptions
from rubrictool.train.runs import TABLE_COPY_MAX_BYTES, building, sha256_file, write_record
from rubrictool.votes import has_votes, soft_targets

__all__ = ["SUMMARY_METRICS", "RunSpec", "TrainResult", "concept_texts", "points_baselines", "prepare_table",
           "read_agreement",
           "train_model"]

log = logging.getLogger("rubrictool.train")


# ---------------------------------------------------------------------------- validation
# The AdjudicatedTable is validated where it is stated (rubrictool.tables); the name stays for callers.
prepare_table = validate_adjudicated


def _check_split(df: pd.DataFrame, split: dict[str, list[str]]) -> dict[str, list[int]]:
    pos = {i: n for n, i in enumerate(df["id"])}
    out: dict[str, list[int]] = {}
    for name in ("train", "dev", "test"):
        ids = [str(i) for i in split.get(name, [])]
        if not ids:
            raise TrainError(f"the {name} split is empty; every split needs items (check the ratios and the table)")
        unknown = [i for i in ids if i not in pos]
        if unknown:
            raise TrainError(f"the {name} split lists {len(unknown)} id(s) not in the table, e.g. {unknown[0]!r}")
        out[name] = [pos[i] for i in ids]
    return out


# ---------------------------------------------------------------------------- training
@dataclass
class TrainResult:
    """What :func:`train_model` produced; everything here is also written to ``run_dir``."""

    run_dir: Path
    variant: str
    metrics: dict[str, Any]  # per-seed test metrics, mean/std, timings
    reliability: pd.DataFrame  # one row per concept (empty for the PLM baseline)
    spearman: float | None  # ρ(σ_k², 1 − α_k) across concepts
    notes: list[str] = field(default_factory=list)


SOFT_TARGETS_OFF = ("soft concept targets off: the table keeps no reviewers' levels (votes_<KEY> columns, which "
                    "`rubrictool adjudicate` writes), so the concept heads trained on the adjudicated levels alone")

CONTRAST_OFF = ("examples across questions off: no concept is marked reference_is_top or off_topic_is_bottom in the "
                "rubric (or named in stage1.contrast_top/bottom), so Stage I learnt from the course's own answers "
                "alone (docs/your-course.md#what-holds-on-every-question)")


def _encode(
    df: pd.DataFrame, rubric: Rubric, tokenizer: Any, max_len: int, concepts: bool, truncated: list[int] | None = None,
    question: bool = True, normalise: bool = False, lexicon: tuple[str, ...] = (),
) -> reccbm.EncodedItems:
    feats = reccbm.encode_table(tokenizer, df, max_len, truncated, question=question, normalise=normalise,
                                lexicon=lexicon)
    c = df[[f"_c_{k}" for k in rubric.keys]].to_numpy(np.int64) if concepts else None
    y = df["_y"].to_numpy(np.int64) if "_y" in df.columns else None
    soft = soft_targets(df, rubric) if concepts and has_votes(df, rubric) else None  # the reviewers' levels, if kept
    return reccbm.EncodedItems(feats, c, y, soft)


@contextmanager
def _log_to(path: Path) -> Iterator[None]:
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger("reccbm"), log]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        handler.close()


def concept_texts(rubric: Rubric) -> list[str]:
    """One text per concept for rubric-initialised queries: name, definition and the level anchors
    (:meth:`reccbm.Concept.text`)."""
    return [c.text() for c in rubric.to_reccbm().concepts]


def fit_grader(spec: RunSpec, seed: int, callback: Callable[[reccbm.Event], None] | None = None) -> reccbm.Grader:
    """One seed's :class:`reccbm.Grader` by the run's recipe, fitted on the train split with the reviewers' levels
    where the table keeps them (:func:`rubrictool.votes.soft_targets`), selecting epochs on the dev split."""
    rows = spec.df.iloc[spec.pos["train"] + spec.pos["dev"]]
    votes = soft_targets(rows, spec.rubric) if not spec.training.plm and has_votes(rows, spec.rubric) else None
    grader = reccbm.Grader(spec.rubric.to_reccbm(), spec.training.recipe, seed=seed)
    return grader.fit(rows, votes=votes, dev=range(len(spec.pos["train"]), len(rows)), callback=callback)


def _one_seed(
    spec: RunSpec,
    seed: int,
    sets: dict[str, reccbm.EncodedItems],
    callback: Callable[[reccbm.Event], None] | None,
) -> Trained:
    """One seed: the grader (:func:`fit_grader`), then the test split."""
    grader = fit_grader(spec, seed, callback)
    recipe = spec.training.recipe
    model, mcfg, history = grader.model_, recipe.model, grader.history_
    info: dict[str, Any] = {"seed": seed, **history, "cache_seconds": 0.0, "train_seconds": history["seconds"],
                            "dev_selection": history["dev"]}
    del info["dev"], info["seconds"]
    if history["crossfit_parts"] is None:
        del info["crossfit_parts"], info["crossfit_steps"]
    pad = grader.tokenizer_.pad_token_id
    preds = grader.predictions(spec.df.iloc[spec.pos["test"]], batch_size=recipe.stage1.eval_batch_size,
                               device=recipe.stage1.device, precision=recipe.stage1.mixed_precision)
    test = sets["test"]
    assert test.grades is not None
    m = reccbm.grade_metrics(test.grades, preds.grades)
    if not mcfg.plm and test.concepts is not None:
        assert preds.p_hat is not None
        m |= reccbm.concept_metrics(test.concepts, preds.levels)
        info["per_concept"] = dict(zip(("acc", "f1"), reccbm.per_concept_metrics(test.concepts, preds.levels)))
        assert preds.c_hat is not None
        score = reccbm.concept_score_reliability(preds.c_hat, test.concepts, mcfg.M)  # noise on new answers
        info["per_concept"] |= {"score_sigma2": score["sigma2"], "score_reliability": score["reliability"]}
        oracle = reccbm.grades_from_levels(model, preds.p_hat, test.concepts, np.ones_like(test.concepts, bool))
        m |= {f"oracle_{k}": v for k, v in reccbm.grade_metrics(test.grades, decide(oracle, model.decision)).items()
              if k in ("t_acc", "t_f1", "qwk")}
        if mcfg.race:
            info["attention"] = reccbm.attention_diagnostics(model, test, pad, recipe.stage1.eval_batch_size)
    info["test"] = m
    return grader, info, preds


SUMMARY_METRICS = ("t_acc", "t_f1", "qwk", "pearson", "rmse", "adjacent", "c_acc", "c_f1", "oracle_t_acc")


def _summary(infos: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in SUMMARY_METRICS if k in infos[0]["test"]]
    out: dict[str, Any] = {}
    for k in keys:
        v = np.array([i["test"][k] for i in infos], dtype=float)
        out[k] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}
    for name, stage, key in (
        ("stage1_seconds", "stage1", "seconds"),
        ("stage1_step_seconds", "stage1", "step_seconds"),
        ("joint_seconds", "joint", "seconds"),
        ("stage2_seconds", "stage2", "seconds"),
        ("stage2_step_seconds", "stage2", "step_seconds"),
    ):
        out[name] = float(np.mean([(i.get(stage) or {}).get(key, 0.0) for i in infos]))
    out["cache_seconds"] = float(np.mean([i["cache_seconds"] for i in infos]))
    out["train_seconds"] = float(np.mean([i.get("train_seconds", 0.0) for i in infos]))
    return out


def train_model(
    rubric: Rubric | str | Path,
    table: pd.DataFrame,
    split: dict[str, list[str]],
    run_dir: str | Path,
    *,
    options: TrainOptions = TrainOptions(),
    record: DataRecord = DataRecord(),
    progress: ProgressFn | None = None,
    shared_weights: str | Path | None = None,
) -> TrainResult:
    """Train a variant on ``table`` with ``split`` (ids per train/dev/test) and write ``run_dir``.

    options (:class:`~rubrictool.train.recipe.TrainOptions`): the variant (reccbm | vanilla | plm;
    race/opcc/lcec switch single components off or on), the overrides ({"model"|"stage1"|"joint"|"stage2":
    {field: value}} over the preset (PRESETS: "default", "plain" or "paper"), CPU_DEFAULTS and the paper's
    dataclass defaults) and the seeds: train with seeds first_seed..first_seed+seeds-1 and report mean ± std;
    the run keeps the seed with the best dev selection metric (T-F1).
    record (:class:`~rubrictool.train.recipe.DataRecord`): agreement.json contents or path, for the α
    column; the notes; where ``table`` came from ({"path": FILE} or {"benchmark": NAME}), recorded in run.json
    with the file's hash; who made the labels (default: from agreement.json and the table's label_source
    column).
    progress: the training stages' steps and epochs (reccbm's events, :func:`rubrictool.progress.training_events`) and
    a warning when inputs are cut at max_len.
    shared_weights: a folder the run shares with others (the folds of a k-fold run) where its encoder's weights are
    kept once per distinct content (:func:`reccbm.save_checkpoint`'s shared_dir): a frozen encoder is stored once.
    The run is built aside and renamed into place when complete (:mod:`rubrictool.train.runs`).
    """
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    rs = options.resolve(rb)
    first_seed, seeds, agreement, labels = options.first_seed, options.seeds, record.agreement, record.labels
    if first_seed < 0:
        raise TrainError(f"the first seed is a whole number >= 0, got {first_seed}", hint="set --first-seed 0 or more")
    df = prepare_table(table, rb, need_concepts=not rs.plm)
    pos = _check_split(df, split)
    rs = rs.for_answers(len(pos["train"]) + len(pos["dev"]))
    if isinstance(agreement, (str, Path)):
        agreement = read_agreement(Path(agreement))
    run = Path(run_dir)
    is_main = PartialState().is_main_process  # under `accelerate launch`, only rank 0 writes the run dir
    device = describe_device(rs.recipe.stage1.device)  # every stage computes there (reccbm.device); run.json records it
    note(progress, device_line(device))
    if rs.batch_scale > 1:
        note(progress, batch_line(rs))
    # the run is built in a staging folder beside run_dir and renamed into place when complete (rubrictool.train.runs)
    with building(run) if is_main else nullcontext(run) as stage:
        if is_main:
            save_split({k: list(v) for k, v in split.items()}, stage / "split.json")
            (stage / "config.yaml").write_text(yaml.safe_dump(rs.config, sort_keys=False, allow_unicode=True))
        spec = RunSpec(run, stage, is_main, rb, df, pos, rs, range(first_seed, first_seed + seeds), agreement,
                       [*(record.notes or []), *_auto_notes(rs)],
                       label_source(table, agreement, labels, rb.keys),
                       Path(shared_weights) if shared_weights is not None else None)
        result = _train_into(spec, progress)
        if is_main:
            write_record(stage, rubric=rb, table=_table_record(stage, table, record.table_source),
                         labels=spec.labels, device=device)
    log.info("wrote %s", run)
    return replace(result, run_dir=run)


def device_line(device: dict[str, Any]) -> str:
    """The one line that says where a run trains (:func:`reccbm.device.describe_device`)."""
    if device.get("name") == "CPU":
        return (f"training on the CPU ({device.get('threads')} torch threads, {device.get('cores')} cores; "
                f"torch {device['torch']})")
    return (f"training on {device['device']} ({device.get('name')}, {device.get('memory_gib')} GiB; torch "
            f"{device['torch']}, CUDA {device.get('cuda')})")


def batch_line(rs: ResolvedTraining) -> str:
    """The one line that says a GPU run trains on larger batches than the preset's (stage1.gpu_batch_scale)."""
    s1 = rs.recipe.stage1
    return (f"batches of {s1.batch_size} on the GPU (stage1.gpu_batch_scale {rs.batch_scale}: {rs.batch_scale} times "
            f"the answers a step, every learning rate × {rs.batch_scale}, {rs.batch_scale} times fewer steps); "
            "--cfg stage1.gpu_batch_scale=1 trains the CPU's recipe")


def _auto_notes(rs: ResolvedTraining) -> list[str]:
    """What the run's notes say about how it was configured: the encoder --encoder auto chose, and where LCEC is
    fitted."""
    notes, encoder, cfgs = [], rs.encoder, rs.cfgs
    if encoder["asked"] == "auto":
        notes.append(f"encoder {encoder['used']}: --encoder auto freezes it below stage1.frozen_below = "
                     f"{encoder['frozen_below']} labelled answers (train + dev), and this run had "
                     f"{encoder['labelled_answers']}")
    if rs.batch_scale > 1:
        notes.append(batch_line(rs))
    if (rs.mcfg.lcec and not rs.plm and not cfgs["stage2"].get("crossfit")
            and cfgs["stage2"].get("lcec_fit") not in ("dev", "moments")):
        notes.append("σ² and A_kk are fitted on the outputs for the training answers themselves, where the encoder "
                     "errs less than on new answers; --crossfit 2 fits them on answers the encoder "
                     "never trained on, at a cost in training time (docs/training.md)")
    return notes


def points_baselines(rb: Rubric, sets: dict[str, reccbm.EncodedItems], predicted_levels: Any,
                     model_grades: Any = None) -> dict[str, Any]:
    """The zero-training points grader (rubrictool.points) on the test split, beside the majority class: the rubric's
    own points, or a table fitted on the training split's gold levels and grades when the rubric has none; graded
    from the gold levels (what the rubric's points can do) and from the run's predicted levels (a points grade
    built on this model's concepts)."""
    from rubrictool.points import fit_points, points_baseline

    tr, te = sets["train"], sets["test"]
    assert tr.concepts is not None and tr.grades is not None and te.concepts is not None and te.grades is not None
    has_points = all(lv.points is not None for c in rb.concepts for lv in c.levels)
    kw: dict[str, Any] = {}
    source = "the rubric's points"
    if not has_points:
        fp = fit_points(rb, tr.concepts, tr.grades + rb.grade.min)
        kw = {"points": fp.points, "grading": fp.grading}
        source = f"points fitted on the training split's gold levels (R² {fp.r2:.2f}): the rubric defines none"
    out: dict[str, Any] = {"source": source}
    for name, levels in (("gold_levels", te.concepts), ("predicted_levels", predicted_levels)):
        if levels is None:
            continue
        pred = points_baseline(rb, np.asarray(levels), grade_min=rb.grade.min, **kw)
        m = reccbm.grade_metrics(te.grades, np.clip(pred, 0, rb.S))
        out[name] = {k: m[k] for k in ("t_acc", "t_f1", "qwk")}
        if model_grades is not None:  # points − model on the same answers: a recommendation needs this CI
            out[name]["vs_model"] = paired_bootstrap(te.grades, model_grades, np.clip(pred, 0, rb.S), "qwk")
    return out


def _table_record(stage: Path, table: pd.DataFrame, source: dict[str, Any] | None) -> dict[str, Any]:
    """run.json's ``table``: where the training table came from (path and content hash, or benchmark) and, for a
    table under TABLE_COPY_MAX_BYTES, a copy in the run (table.csv) that readers use."""
    rec: dict[str, Any] = {"path": None, "sha256": None, "rows": len(table), "copy": None, "benchmark": None}
    rec |= {k: v for k, v in (source or {}).items() if k in rec}
    if rec["path"] and Path(rec["path"]).is_file():
        rec["path"] = str(Path(rec["path"]).resolve())
        rec["sha256"] = sha256_file(rec["path"])
    copy = stage / "table.csv"
    copy.write_bytes(people_csv(table))  # opened in spreadsheets; read_table gives the cells back verbatim
    if copy.stat().st_size > TABLE_COPY_MAX_BYTES:
        copy.unlink()
    else:
        rec["copy"] = copy.name
    return rec


@dataclass(frozen=True)
class RunSpec:
    """One run as :func:`train_model` resolved it, before training: where it is written, the rows of each split, what
    it trains with, and what its files record beside the metrics."""

    target: Path  # the run directory it becomes
    stage: Path  # where its files are written: the staging folder renamed to ``target`` when complete
    is_main: bool  # the main process (under `accelerate launch`, only rank 0 writes files)
    rubric: Rubric
    df: pd.DataFrame  # the validated table (levels and grades 0-based in _c_<key> and _y)
    pos: dict[str, list[int]]  # row positions in ``df`` of the train, dev and test splits
    training: ResolvedTraining  # variant, preset, model config and recipe, encoder choice
    seeds: range  # the seeds trained; the run keeps the one with the best dev T-F1
    agreement: dict[str, Any] | None  # agreement.json, for the α column
    notes: list[str]  # the caller's notes and the configuration's (the truncation note is added when known)
    labels: dict[str, Any]  # who made the labels (run.json, metrics.json)
    shared_weights: Path | None = None  # the k-fold run's folder of encoder weights kept once per content (or none)


def _train_into(spec: RunSpec, progress: ProgressFn | None) -> TrainResult:
    """Train every seed and write the run's files into ``spec.stage`` (the main process only)."""
    rs, rb = spec.training, spec.rubric
    with _log_to(spec.stage / "train.log") if spec.is_main else nullcontext():
        log.info("run %s (built in %s): variant %s, rubric %s, %d/%d/%d items", spec.target, spec.stage.name, rs.name,
                 rb.name, *(len(spec.pos[s]) for s in spec.pos))
        tokenizer = reccbm.load_tokenizer(rs.mcfg.backbone or reccbm.default_backbone())  # the splits' labels, cuts
        spec = _with_lexicon(spec, tokenizer)
        sets, cut = _encode_splits(spec, tokenizer)
        notes = list(spec.notes)
        if rs.recipe.stage1.soft_targets and not rs.plm and sets["train"].soft is None:
            notes.append(SOFT_TARGETS_OFF)
        s1 = rs.recipe.stage1
        if s1.contrast > 0 and not rs.plm and not (s1.contrast_top or s1.contrast_bottom) and "reference" in rb.fields:
            notes.append(CONTRAST_OFF)
        if (why := rs.recipe.calibration_skipped(len(sets["dev"]))) is not None:
            notes.append(f"level calibration (stage2.calibrate) not applied: {why}")
        if cut:  # long essays: say how many lost text, in the run (notes) and to the user now
            msg = truncation_message(cut, sum(len(p) for p in spec.pos.values()), rs.mcfg.max_len)
            notes.append(msg)
            log.warning(msg)
            warn(progress, msg)
        infos, (grader, info, preds) = _train_seeds(spec, sets, training_events(progress))
        metrics, rel, rho = _run_metrics(spec, sets, infos, grader.model_, info, preds, notes)
        if spec.is_main:
            _write_run(spec, sets, grader, info, preds, metrics, rel, rho, notes)
    return TrainResult(spec.stage, rs.name, metrics, rel, rho, notes)


def _encode_splits(spec: RunSpec, tokenizer: Any) -> tuple[dict[str, reccbm.EncodedItems], int]:
    """Each split tokenised, and how many inputs were cut at max_len."""
    cut: list[int] = []  # positions (within each split) of the inputs cut at max_len; only the count matters
    m = spec.training.mcfg
    sets = {s: _encode(spec.df.iloc[p], spec.rubric, tokenizer, m.max_len, not spec.training.plm, cut, m.question_input,
                    m.normalise, m.lexicon)
            for s, p in spec.pos.items()}
    return sets, len(cut)


def _with_lexicon(spec: RunSpec, tokenizer: Any) -> RunSpec:
    """The run with the course lexicon of its training and dev answers (``model.course_words`` with
    ``model.normalise``; :func:`reccbm.table_lexicon`), which the checkpoint keeps; unchanged otherwise."""
    rs = spec.training
    m = rs.mcfg
    if not (m.normalise and m.course_words > 0) or m.lexicon:
        return spec
    rows = spec.df.iloc[[*spec.pos["train"], *spec.pos.get("dev", [])]]
    mcfg = replace(m, lexicon=reccbm.table_lexicon(tokenizer, rows, m.course_words))
    return replace(spec, training=replace(rs, mcfg=mcfg, recipe=replace(rs.recipe, model=mcfg)))


# a seed's grader, its record in metrics.json, test predictions
Trained = tuple[reccbm.Grader, dict[str, Any], Predictions]


def _train_seeds(spec: RunSpec, sets: dict[str, reccbm.EncodedItems],
                 callback: Callable[[reccbm.Event], None] | None) -> tuple[list[dict[str, Any]], Trained]:
    """Every seed's record (test metrics with calibration), and the seed with the best dev T-F1."""
    best: tuple[float, reccbm.Grader, dict[str, Any], Predictions] | None = None
    infos = []
    for seed in spec.seeds:
        grader, info, preds = _one_seed(spec, seed, sets, callback)
        cal = calibration(preds.grade_probs, np.asarray(sets["test"].grades))
        info["test"] |= {"ece": cal["ece"], "nll": cal["nll"]}
        infos.append(info)
        log.info("seed %d: test %s", seed, json.dumps(info["test"]))
        if best is None or info["dev_selection"]["t_f1"] > best[0]:
            best = (info["dev_selection"]["t_f1"], grader, info, preds)
    assert best is not None
    return infos, best[1:]


def _run_metrics(spec: RunSpec, sets: dict[str, reccbm.EncodedItems], infos: list[dict[str, Any]], model: reccbm.Model,
                 info: dict[str, Any], preds: Predictions,
                 notes: list[str]) -> tuple[dict[str, Any], pd.DataFrame, float | None]:
    """metrics.json of the run (the kept seed ``info``), its reliability table and ρ(σ², 1 − α)."""
    rs, rb = spec.training, spec.rubric
    metrics = {"variant": rs.name, "preset": rs.preset, "rubric": rb.name, "git_revision": git_revision(),
               "encoder": rs.encoder, "seeds": infos, "selected_seed": info["seed"],
               "summary": _summary(infos), "notes": notes, "labels": spec.labels}
    y_test = np.asarray(sets["test"].grades)
    honest = honest_metrics(y_test, preds.grades, np.asarray(sets["train"].grades), grade_min=rb.grade.min)
    metrics |= {k: honest[k] for k in ("n_test", "majority", "ci", "vs_majority", "top_grade", "top_share")}
    metrics["calibration"] = calibration(preds.grade_probs, y_test)
    metrics["low_marks"] = low_marks(y_test + rb.grade.min, np.asarray(preds.grades) + rb.grade.min, rb.grade.values,
                                     rb.pass_mark)
    metrics["warnings"] = honest["warnings"]
    if sets["test"].concepts is not None and sets["train"].concepts is not None:
        metrics["points"] = points_baselines(rb, sets, None if rs.plm else preds.levels, preds.grades)
    rel, rho = (reliability_table(model, rb, info.get("per_concept"), spec.agreement, sets["train"].concepts)
                if not rs.plm else (pd.DataFrame(), None))
    metrics["spearman_sigma2_vs_1_minus_alpha"] = rho
    if len(rel) and rel["A_kk"].notna().any():
        metrics["spearman_ci"] = spearman_with_ci(rel["sigma2"], 1 - rel["alpha"])
        metrics["mean_A_kk"] = float(rel["A_kk"].mean())
        metrics["implied_noise"] = implied_noise_rhos(rel["sigma2_implied"], rel["score_sigma2"], rel["alpha"])
        metrics["lcec"] = lcec_state(model)
    if len(rel):
        metrics["spearman_noise_share"] = noise_share_rho(rel["test_reliability"], rel["alpha"])
    return metrics, rel, rho


def _write_run(spec: RunSpec, sets: dict[str, reccbm.EncodedItems], grader: reccbm.Grader, info: dict[str, Any],
               preds: Predictions, metrics: dict[str, Any], rel: pd.DataFrame, rho: float | None,
               notes: list[str]) -> None:
    """The run's files in ``spec.stage``: metrics, the reliability table, test predictions, the model, the profile."""
    run, rb, plm, name, model = spec.stage, spec.rubric, spec.training.plm, spec.training.name, grader.model_
    (run / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    if not plm:
        rel.to_csv(run / "reliability.csv", index=False)
        (run / "reliability.md").write_text(reliability_markdown(rel, rho, notes))
    test_ids = spec.df["id"].iloc[spec.pos["test"]].tolist()
    frame = predictions_frame(model, rb, preds, test_ids)
    test_c = sets["test"].concepts
    if preds.p_hat is not None and test_c is not None:  # every concept replaced by its adjudicated label
        oracle = reccbm.grades_from_levels(model, preds.p_hat, test_c, np.ones_like(test_c, dtype=bool))
        frame.insert(2, "grade_oracle", (decide(oracle, model.decision) + rb.grade.min).tolist())
    (run / "test_predictions.csv").write_bytes(people_csv(frame))  # formula cells neutralised (read_table restores)
    meta = {"rubric": rb.name, "concept_keys": rb.keys, "concept_names": [c.name for c in rb.concepts],
            "scale": [rb.scale.min, rb.scale.max], "grade": [rb.grade.min, rb.grade.max],
            "variant": name, "seed": info["seed"], "selected_by": "dev t_f1", "notes": notes,
            "git_revision": metrics["git_revision"]}
    try:  # the step saved: every stage that shaped the model (Stage I, the joint stage, Stage II)
        grader.save(run, meta=meta, shared_dir=spec.shared_weights)
    except Exception as exc:  # safetensors reports a failed write (a full disk) as SafetensorError, not OSError
        if type(exc).__name__ != "SafetensorError":
            raise
        raise OSError(errno.EIO, str(exc).rsplit(": ", 1)[-1], str(run / "model.safetensors")) from None
    train_rows = spec.df.iloc[spec.pos["train"]]  # what `grade` flags compare new responses with (rubrictool.flags)
    save_profile(profile_from_table(train_rows, train_rows["id"].astype(str).tolist(), [] if plm else rb.keys,
                                    (rb.scale.min, rb.scale.max)), run)


def read_agreement(path: Path) -> dict[str, Any] | None:
    """agreement.json's contents, or None when there is none or it cannot be read (logged)."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None
    return doc if isinstance(doc, dict) else None

