"""Training runs: configuration, run directories and k-fold evaluation around :func:`reccbm.fit`.

:func:`train_model` is the library function behind ``rubrictool train``: it validates the table
against the rubric, maps concept levels to 0..M (level − scale.min) and grades to 0..S
(grade − grade.min), runs the recipe (:func:`reccbm.fit`: Stage I, joint stage, Stage II; or the PLM
baseline) for one or more seeds,
and writes a run directory::

    runs/<name>/config.yaml  split.json  metrics.json  reliability.csv  reliability.md
                train.log  test_predictions.csv  model.safetensors  model.json  backbone/
                profile.json (what the grade flags compare new responses with, rubrictool.flags)

Grading with a trained run lives in :mod:`rubrictool.grade`.
"""

from __future__ import annotations

import errno
import json
import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from accelerate import PartialState
from numpy.typing import NDArray
from scipy.stats import spearmanr

import reccbm
from reccbm import JointConfig, ModelConfig, Predictions, StageIConfig, StageIIConfig
from reccbm.config import config_from_dict, variant_flags, variant_name
from rubrictool.data import (
    kfold_splits,
    save_split,
)
from rubrictool.errors import DataError, TrainError
from rubrictool.evaluate import (
    calibration,
    expected_calibration_error,
    honest_metrics,
    inconclusive,
    lcec_activity,
    majority_baseline,
    oracle_concept_baseline,
    pooled_metrics,
    spearman_with_ci,
)
from rubrictool.flags import profile_from_table, save_profile
from rubrictool.grade import model_inputs
from rubrictool.grade import predictions_frame as _predictions_frame
from rubrictool.io import atomic_write_text, write_table
from rubrictool.progress import Progress, ProgressFn, truncation_message, warn
from rubrictool.provenance import git_revision
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.runs import (
    RECORD,
    TABLE_COPY_MAX_BYTES,
    building,
    describe_labels,
    label_source,
    run_is_complete,
    sha256_file,
    write_record,
)
from rubrictool.tables import validate_adjudicated
from rubrictool.textsafe import md_inline, md_quote
from rubrictool.votes import has_votes, soft_targets

__all__ = [
    "CPU_DEFAULTS",
    "FLAT_OPTIONS",
    "ResolvedTraining",
    "TrainResult",
    "encoder_choice",
    "encoder_epochs",
    "encoder_min_steps",
    "load_train_config",
    "parse_cfg",
    "prepare_table",
    "preset_config",
    "reliability_table",
    "resolve_training",
    "train_folds",
    "train_model",
]

log = logging.getLogger("rubrictool.train")

# Defaults of `rubrictool train` on a CPU: epoch budgets sized so that the Mohler main job (MiniLM,
# 2 cores) stays within the 15 minutes (docs/results.md has the timings). The paper's 50-epoch
# budget is one `--epochs 50` away (patience 3 still applies).
CPU_DEFAULTS: dict[str, dict[str, Any]] = {"model": {"max_len": 128}, "stage1": {"epochs": 6}, "stage2": {"epochs": 30}}

# Training recipes on top of the paper's dataclass defaults. "paper" is the paper's configuration (Eq. 12
# L_con summed, scalar head W μ_post, orthogonal queries, prior mean 0, Stage II on training outputs, no
# joint stage). "default" is what the 5-fold measurements chose (docs/results.md, docs/design.md).
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {"stage1": {"epochs": 6}},
    "default": {
        "model": {"head": "level", "query_init": "rubric", "center": True, "tau": 0.25, "condition": True},
        "stage1": {"epochs": 3, "concept_loss": "mean", "query_lr_multiplier": 10.0},
        "joint": {"epochs": 4, "lr": 5e-5, "intervention_p": 0.25, "select": "last"},
        "stage2": {"intervention_p": 0.25, "lcec_fit": "dev"},
    },
}
SECTIONS: dict[str, type[Any]] = {"model": ModelConfig, "stage1": StageIConfig, "joint": JointConfig,
                                  "stage2": StageIIConfig}
# Fields a run decides itself, so a config cannot set them (a value given would be silently replaced): what to use
# instead. They are still written to the run's config.yaml, as the run used them.
DECIDED_BY_THE_RUN: dict[tuple[str, str], str] = {
    ("model", "num_concepts"): "the rubric's concepts", ("model", "num_levels"): "the rubric's scale",
    ("model", "num_grades"): "the rubric's grade range",
    ("model", "race"): "--variant or --race/--no-race", ("model", "lcec"): "--variant or --lcec/--no-lcec",
    ("model", "plm"): "--variant plm",
    ("stage1", "seed"): "--seeds (seeds 0..N-1)", ("stage2", "seed"): "--seeds (seeds 0..N-1)",
}


def _refuse_decided(where: str, section: str, names: Any) -> None:
    """Refuse config fields the run decides itself (DECIDED_BY_THE_RUN), naming what sets them."""
    for name in sorted(names):
        by = DECIDED_BY_THE_RUN.get((section, name))
        if by:
            raise TrainError(f"{where}: {section}.{name} is not set by a config: it comes from {by}",
                             hint=f"remove {section}.{name}")



# ---------------------------------------------------------------------------- configuration
def load_train_config(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """A YAML config with optional sections ``model``, ``stage1``, ``joint``, ``stage2`` (field: value)."""
    if path is None:
        return {}
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TrainError(f"cannot read config {p}: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise TrainError(f"{p}: a training config is a mapping with sections model, stage1, joint, stage2")
    allowed = SECTIONS
    for section, values in doc.items():
        if section not in allowed or not isinstance(values, dict):
            raise TrainError(f"{p}: unknown section {section!r}; use model, stage1, joint or stage2 (each a mapping)")
        names = {f.name for f in fields(allowed[section])}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TrainError(f"{p}: unknown {section} field(s) {unknown}; known: {sorted(names)}")
        _refuse_decided(str(p), section, values)
    return {k: dict(v) for k, v in doc.items()}


def _merge(*layers: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for layer in layers:
        for section, values in (layer or {}).items():
            out.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    return out


def preset_config(preset: str) -> dict[str, dict[str, Any]]:
    """Every field of every section as ``--preset NAME`` sets it (the paper's dataclass defaults, CPU_DEFAULTS,
    then the preset), before a config file or command-line options; the model's sizes come from the rubric."""
    if preset not in PRESETS:
        raise TrainError(f"unknown preset {preset!r}; use {' or '.join(PRESETS)}")
    cfgs = _merge(CPU_DEFAULTS, PRESETS[preset])
    out: dict[str, dict[str, Any]] = {}
    for sec, cls in SECTIONS.items():
        out[sec] = {f.name: cfgs[sec][f.name] if f.name in cfgs[sec] else
                    f.default_factory() if f.default_factory is not MISSING else f.default
                    for f in fields(cls) if f.name in cfgs[sec] or f.default is not MISSING or f.default_factory is not MISSING}
    return out


def encoder_epochs(preset: str, overrides: dict[str, dict[str, Any]] | None = None) -> int:
    """Epochs the encoder trains in a concept model under ``preset`` + ``overrides``: Stage I plus the joint stage.
    The budget a fair PLM baseline gets (it trains its encoder in one stage)."""
    cfg = preset_config(preset)
    for section, values in (overrides or {}).items():
        cfg.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    return int(cfg["stage1"]["epochs"]) + int(cfg.get("joint", {}).get("epochs") or 0)


def encoder_min_steps(preset: str, overrides: dict[str, dict[str, Any]] | None = None) -> int:
    """The fewest optimiser steps the encoder takes in a concept model under ``preset`` + ``overrides`` (Stage I plus
    the joint stage, StageIConfig.min_steps): on a small table, the step budget a fair PLM baseline gets."""
    cfg = preset_config(preset)
    for section, values in (overrides or {}).items():
        cfg.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    return int(cfg["stage1"].get("min_steps") or 0) + int(cfg.get("joint", {}).get("min_steps") or 0)


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


def _encode(
    df: pd.DataFrame, rubric: Rubric, tokenizer: Any, max_len: int, concepts: bool, truncated: list[int] | None = None
) -> reccbm.EncodedItems:
    feats = model_inputs(tokenizer, df, max_len, truncated)
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
    """One text per concept for rubric-initialised queries: name, definition and the level anchors."""
    return [f"{c.name}. {c.definition} " + " ".join(f"{lv.anchor}." for lv in c.levels) for c in rubric.concepts]


def recipe_from(cfgs: dict[str, dict[str, Any]], mcfg: ModelConfig) -> reccbm.Recipe:
    """The :class:`reccbm.Recipe` of resolved config sections (model sizes already set)."""
    return reccbm.Recipe(mcfg, config_from_dict(StageIConfig, cfgs["stage1"]), config_from_dict(JointConfig, cfgs["joint"]),
                         config_from_dict(StageIIConfig, cfgs["stage2"]))


def _one_seed(
    seed: int,
    recipe: reccbm.Recipe,
    sets: dict[str, reccbm.EncodedItems],
    tokenizer: Any,
    callback: Callable[[reccbm.Event], None] | None,
    texts: list[str] | None = None,
) -> tuple[reccbm.RecCBM, dict[str, Any], Predictions]:
    """One seed: the recipe (:func:`reccbm.fit`), then the test split."""
    fitted = reccbm.fit(sets["train"], sets["dev"], recipe.seeded(seed), tokenizer, concept_texts=texts, callback=callback)
    model, mcfg = fitted.model, recipe.model
    info: dict[str, Any] = {"seed": seed, **fitted.as_dict(), "cache_seconds": 0.0, "train_seconds": fitted.seconds,
                            "dev_selection": fitted.dev}
    del info["dev"], info["seconds"]
    if fitted.crossfit_parts is None:
        del info["crossfit_parts"], info["crossfit_steps"]
    pad = tokenizer.pad_token_id
    preds = reccbm.predict(model, sets["test"], pad, recipe.stage1.eval_batch_size)
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
        m |= {f"oracle_{k}": v for k, v in reccbm.grade_metrics(test.grades, oracle.argmax(1)).items()
              if k in ("t_acc", "t_f1", "qwk")}
        if mcfg.race:
            info["attention"] = reccbm.attention_diagnostics(model, test, pad, recipe.stage1.eval_batch_size)
    info["test"] = m
    return model, info, preds


def _alpha(agreement: dict[str, Any] | None, key: str) -> tuple[float, float, float]:
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


def lcec_state(model: reccbm.RecCBM) -> dict[str, Any] | None:
    """Whether the learned LCEC does anything (:func:`rubrictool.evaluate.lcec_activity`); None without LCEC."""
    if model.lcec is None:
        return None
    rel = reccbm.reliability(model)
    return lcec_activity(np.diag(rel["A"]), reccbm.partial_correlations(rel["Omega"]))


def reliability_table(
    model: reccbm.RecCBM, rubric: Rubric, per_concept: dict[str, list[float]] | None, agreement: dict[str, Any] | None,
    train_levels: NDArray[Any] | None = None,
) -> tuple[pd.DataFrame, float | None]:
    """Per concept: α (inter-rater), learned σ_k², shrinkage A_kk, test C-Acc/C-F1, the test reliability of the
    concept score and its measured noise σ̂_k² = var(s̃ − c/M) on the test answers
    (:func:`reccbm.concept_score_reliability`); with ``train_levels`` (N, K levels 0..M) also v_k = var(c_k/M)
    over the training labels and the identified noise σ_k²(implied) = v_k (1 − A_kk) / A_kk (under a diagonal
    prior precision A_kk = v_k / (v_k + σ_k²); σ_k² itself is identified only together with Ω). And ρ(σ², 1 − α)."""
    rel = reccbm.reliability(model) if model.lcec is not None else None
    nan = float("nan")
    v = (np.asarray(train_levels, float) / rubric.M).var(0) if train_levels is not None and len(train_levels) > 1 \
        else np.full(rubric.K, nan)  # (K,)
    rows = []
    for k, c in enumerate(rubric.concepts):
        a, lo, hi = _alpha(agreement, c.key)
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
    verdict = " — inconclusive: the CI spans 0" if inconclusive(ci) else ""
    return f"{ci['rho']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]{verdict}"


def _reliability_md(df: pd.DataFrame, rho: float | None, notes: list[str]) -> str:
    def f(x: float, spec: str = ".3f") -> str:
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    lines = [("| concept | name | α | α 95% CI | σ² | A_kk | σ²(implied) | σ̂² (test) | test C-Acc | test C-F1 | "
             "test reliability |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.to_dict("records"):
        ci = f"[{f(r['alpha_lo'])}, {f(r['alpha_hi'])}]" if not math.isnan(r["alpha_lo"]) else "—"
        lines.append(f"| {md_inline(r['concept'])} | {md_inline(r['name'])} | {f(r['alpha'])} | {ci} | {f(r['sigma2'], '.4g')} | "
                     f"{f(r['A_kk'])} | {f(r['sigma2_implied'], '.4g')} | {f(r['score_sigma2'], '.4g')} | "
                     f"{f(r['test_c_acc'])} | {f(r['test_c_f1'])} | {f(r['test_reliability'])} |")
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


@dataclass(frozen=True)
class ResolvedTraining:
    """What a run trains with, resolved from the variant, preset and overrides before any data is read: the model and
    stage configs, and (once the number of labelled answers is known, :meth:`for_answers`) the encoder choice and the
    document written to the run's config.yaml (``config``)."""

    name: str  # variant name as runs record it (reccbm, vanilla, plm, or a component ablation)
    plm: bool
    preset: str
    rubric: str
    seeds: int
    cfgs: dict[str, dict[str, Any]]  # the merged sections, as given to the dataclasses
    mcfg: ModelConfig
    recipe: reccbm.Recipe
    encoder: dict[str, Any] = field(default_factory=dict)  # encoder_choice(), after for_answers

    def for_answers(self, n_labelled: int) -> ResolvedTraining:
        """The encoder choice for ``n_labelled`` answers (train + dev) and the stage I config that runs with it."""
        encoder = encoder_choice(self.recipe.stage1, n_labelled)
        recipe = replace(self.recipe, stage1=replace(self.recipe.stage1, encoder=encoder["used"]))  # what runs
        return replace(self, recipe=recipe, encoder=encoder)

    @property
    def config(self) -> dict[str, Any]:
        """The run's config.yaml (after :meth:`for_answers`)."""
        doc: dict[str, Any] = {"variant": self.name, "preset": self.preset, "rubric": self.rubric, "seeds": self.seeds,
                               "encoder": self.encoder, "model": asdict(self.mcfg)}
        doc |= {s: asdict(config_from_dict(c, self.cfgs[s])) for s, c in SECTIONS.items() if s != "model"}
        doc["stage1"] = asdict(self.recipe.stage1)
        return doc


def resolve_training(
    rubric: Rubric | str | Path,
    *,
    variant: str = "reccbm",
    race: bool | None = None,
    opcc: bool | None = None,
    lcec: bool | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    preset: str = "default",
    seeds: int = 1,
) -> ResolvedTraining:
    """What :func:`train_model` trains with these arguments, without reading a table or training; ``.for_answers(n)``
    adds the encoder choice for n labelled answers (train + dev), and its ``config`` is the config.yaml that run writes.
    Raises TrainError as train_model does for an unknown variant, preset or a bad configuration."""
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    for section, values in (overrides or {}).items():
        _refuse_decided("the training overrides", section, [k for k, v in values.items() if v is not None])
    try:
        plm, race_d, opcc_d, lcec_d = variant_flags(variant)
    except KeyError:
        raise TrainError(f"unknown variant {variant!r}; use reccbm, vanilla or plm") from None
    race_, opcc_, lcec_ = (d if v is None else v for v, d in ((race, race_d), (opcc, opcc_d), (lcec, lcec_d)))
    if plm and (race or opcc or lcec):
        raise TrainError("the plm baseline has no bottleneck to switch components of", hint="drop --race/--opcc/--lcec")
    if seeds < 1:
        raise TrainError(f"training needs at least one seed, got {seeds}", hint="set --seeds 1 or more")
    name = variant_name(plm, race_, opcc_, lcec_)
    if preset not in PRESETS:
        raise TrainError(f"unknown preset {preset!r}; use {' or '.join(PRESETS)}")
    cfgs = _merge(CPU_DEFAULTS, PRESETS[preset], overrides, {"model": {"race": race_, "lcec": lcec_, "plm": plm}})
    if not opcc_:
        cfgs["stage1"]["lambda_r"] = 0.0
    if plm and cfgs["joint"].get("epochs"):
        # a fair baseline: the black box fine-tunes its encoder as many epochs (unless an epoch count is given) and, on
        # a small table, as many steps as REC-CBM's encoder trains under the same preset (Stage I + the joint stage)
        if "epochs" not in (overrides or {}).get("stage1", {}):
            cfgs["stage1"]["epochs"] = int(cfgs["stage1"]["epochs"]) + int(cfgs["joint"]["epochs"])
        cfgs["stage1"]["min_steps"] = int(cfgs["stage1"].get("min_steps") or 0) + int(cfgs["joint"].get("min_steps") or 0)
    if plm:  # the black box trains its encoder in one stage: no joint stage, and its config says so
        cfgs["joint"]["epochs"] = 0
    cfgs["model"] |= {"num_concepts": rb.K, "num_levels": rb.M + 1, "num_grades": rb.S + 1}
    try:
        mcfg = config_from_dict(ModelConfig, cfgs["model"])
        recipe = recipe_from(cfgs, mcfg)
    except (TypeError, ValueError) as exc:
        raise TrainError(f"bad configuration: {exc}") from None
    return ResolvedTraining(name, plm, preset, rb.name, seeds, cfgs, mcfg, recipe)


def train_model(
    rubric: Rubric | str | Path,
    table: pd.DataFrame,
    split: dict[str, list[str]],
    run_dir: str | Path,
    *,
    variant: str = "reccbm",
    race: bool | None = None,
    opcc: bool | None = None,
    lcec: bool | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    preset: str = "default",
    seeds: int = 1,
    first_seed: int = 0,
    agreement: dict[str, Any] | str | Path | None = None,
    notes: list[str] | None = None,
    callback: Callable[[reccbm.Event], None] | None = None,
    progress: ProgressFn | None = None,
    table_source: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
) -> TrainResult:
    """Train a variant on ``table`` with ``split`` (ids per train/dev/test) and write ``run_dir``.

    variant: reccbm | vanilla | plm; race/opcc/lcec switch single components off (or on).
    overrides: {"model"|"stage1"|"joint"|"stage2": {field: value}} over the preset (PRESETS: "default" or
    "paper"), CPU_DEFAULTS and the paper's dataclass defaults.
    seeds: train with seeds first_seed..first_seed+seeds-1 and report mean ± std; the run keeps the seed with the best dev
    selection metric (T-F1). agreement: agreement.json contents or path, for the α column.
    table_source: where ``table`` came from ({"path": FILE} or {"benchmark": NAME}), recorded in run.json with the
    file's hash; labels: who made the labels (default: from agreement.json and the table's label_source column).
    The run is built aside and renamed into place when complete (:mod:`rubrictool.runs`).
    """
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    rs = resolve_training(rb, variant=variant, race=race, opcc=opcc, lcec=lcec, overrides=overrides, preset=preset, seeds=seeds)
    df = prepare_table(table, rb, need_concepts=not rs.plm)
    pos = _check_split(df, split)
    rs = rs.for_answers(len(pos["train"]) + len(pos["dev"]))
    name, plm, cfgs, mcfg, recipe, encoder, resolved = rs.name, rs.plm, rs.cfgs, rs.mcfg, rs.recipe, rs.encoder, rs.config
    if isinstance(agreement, (str, Path)):
        agreement = _read_agreement(Path(agreement))
    run = Path(run_dir)
    is_main = PartialState().is_main_process  # under `accelerate launch`, only rank 0 writes the run dir
    notes = list(notes or [])
    if encoder["asked"] == "auto":
        notes.append(f"encoder {encoder['used']}: --encoder auto freezes it below stage1.frozen_below = "
                     f"{encoder['frozen_below']} labelled answers (train + dev), and this run had {encoder['labelled_answers']}")
    if mcfg.lcec and not plm and not cfgs["stage2"].get("crossfit") and cfgs["stage2"].get("lcec_fit") != "dev":
        notes.append("σ² and A_kk are fitted on the outputs for the training answers themselves, where the encoder "
                     "errs less than on new answers; --crossfit 2 fits them on answers the encoder "
                     "never trained on, at a cost in training time (docs/training.md)")
    # the run is built in a staging folder beside run_dir and renamed into place when complete (rubrictool.runs)
    with building(run) if is_main else nullcontext(run) as stage:
        if is_main:
            save_split({k: list(v) for k, v in split.items()}, stage / "split.json")
            (stage / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True))
        labels_rec = label_source(table, agreement, labels)
        result = _train_into(run, stage, is_main, rb, df, pos, name, preset, mcfg, recipe, seeds, first_seed, agreement, notes,
                             callback, progress, plm, labels_rec, encoder)
        if is_main:
            write_record(stage, rubric=rb, table=_table_record(stage, table, table_source), labels=labels_rec)
    log.info("wrote %s", run)
    return replace(result, run_dir=run)


def encoder_choice(stage1: StageIConfig, n_labelled: int) -> dict[str, Any]:
    """What the pretrained encoder does in a run that learns from ``n_labelled`` answers (train + dev): asked
    (stage1.encoder: train, frozen or auto), used (train or frozen; auto: frozen below stage1.frozen_below), the count
    and the threshold. Written to the run's config.yaml and metrics.json as ``encoder``."""
    return {"asked": stage1.encoder, "used": stage1.resolved(n_labelled).encoder, "labelled_answers": n_labelled,
            "frozen_below": stage1.frozen_below}


def points_baselines(rb: Rubric, sets: dict[str, reccbm.EncodedItems], predicted_levels: Any) -> dict[str, Any]:
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
    table.to_csv(copy, index=False)
    if copy.stat().st_size > TABLE_COPY_MAX_BYTES:
        copy.unlink()
    else:
        rec["copy"] = copy.name
    return rec


def _train_into(
    target: Path, stage: Path, is_main: bool, rb: Rubric, df: pd.DataFrame, pos: dict[str, list[int]], name: str, preset: str,
    mcfg: ModelConfig, recipe: reccbm.Recipe, seeds: int, first_seed: int, agreement: dict[str, Any] | None,
    notes: list[str], callback: Callable[[reccbm.Event], None] | None, progress: ProgressFn | None, plm: bool,
    labels: dict[str, Any], encoder: dict[str, Any],
) -> TrainResult:
    """Train every seed and write the run's files into ``stage`` (the main process only)."""
    run = stage
    with _log_to(run / "train.log") if is_main else nullcontext():
        log.info("run %s (built in %s): variant %s, rubric %s, %d/%d/%d items", target, run.name, name, rb.name,
                 *(len(pos[s]) for s in pos))
        tokenizer = reccbm.load_tokenizer(mcfg.backbone or reccbm.default_backbone())
        cut: list[int] = []  # positions (within each split) of the inputs cut at max_len; only the count matters
        sets = {s: _encode(df.iloc[p], rb, tokenizer, mcfg.max_len, not plm, cut) for s, p in pos.items()}
        if cut:  # long essays: say how many lost text, in the run (notes) and to the user now
            msg = truncation_message(len(cut), sum(len(p) for p in pos.values()), mcfg.max_len)
            notes.append(msg)
            log.warning(msg)
            warn(progress, msg)
        best: tuple[float, reccbm.RecCBM, dict[str, Any], Predictions] | None = None
        infos = []
        for seed in range(first_seed, first_seed + seeds):
            model, info, preds = _one_seed(seed, recipe, sets, tokenizer, callback, concept_texts(rb))
            cal = calibration(preds.grade_probs, np.asarray(sets["test"].grades))
            info["test"] |= {"ece": cal["ece"], "nll": cal["nll"]}
            infos.append(info)
            log.info("seed %d: test %s", seed, json.dumps(info["test"]))
            if best is None or info["dev_selection"]["t_f1"] > best[0]:
                best = (info["dev_selection"]["t_f1"], model, info, preds)
        assert best is not None
        _, model, info, preds = best
        metrics = {"variant": name, "preset": preset, "rubric": rb.name, "git_revision": git_revision(),
                   "encoder": encoder, "seeds": infos, "selected_seed": info["seed"],
                   "summary": _summary(infos), "notes": notes, "labels": labels}
        y_test = np.asarray(sets["test"].grades)
        honest = honest_metrics(y_test, preds.grades, np.asarray(sets["train"].grades), grade_min=rb.grade.min)
        metrics |= {k: honest[k] for k in ("n_test", "majority", "ci", "vs_majority", "top_grade", "top_share")}
        metrics["calibration"] = calibration(preds.grade_probs, y_test)
        metrics["warnings"] = honest["warnings"]
        if sets["test"].concepts is not None and sets["train"].concepts is not None:
            metrics["points"] = points_baselines(rb, sets, None if plm else preds.levels)
        rel, rho = (reliability_table(model, rb, info.get("per_concept"), agreement, sets["train"].concepts)
                    if not plm else (pd.DataFrame(), None))
        metrics["spearman_sigma2_vs_1_minus_alpha"] = rho
        if len(rel) and rel["A_kk"].notna().any():
            metrics["spearman_ci"] = spearman_with_ci(rel["sigma2"], 1 - rel["alpha"])
            metrics["mean_A_kk"] = float(rel["A_kk"].mean())
            metrics["implied_noise"] = implied_noise_rhos(rel["sigma2_implied"], rel["score_sigma2"], rel["alpha"])
            metrics["lcec"] = lcec_state(model)
        if len(rel):
            metrics["spearman_noise_share"] = noise_share_rho(rel["test_reliability"], rel["alpha"])
        if not is_main:
            return TrainResult(run, name, metrics, rel, rho, notes)
        (run / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float) + "\n")
        if not plm:
            rel.to_csv(run / "reliability.csv", index=False)
            (run / "reliability.md").write_text(_reliability_md(rel, rho, notes))
        test_ids = df["id"].iloc[pos["test"]].tolist()
        frame = _predictions_frame(model, rb, preds, test_ids)
        test_c = sets["test"].concepts
        if preds.p_hat is not None and test_c is not None:  # every concept replaced by its adjudicated label
            oracle = reccbm.grades_from_levels(model, preds.p_hat, test_c, np.ones_like(test_c, dtype=bool))
            frame.insert(2, "grade_oracle", oracle.argmax(1) + rb.grade.min)
        frame.to_csv(run / "test_predictions.csv", index=False)
        meta = {"rubric": rb.name, "concept_keys": rb.keys, "concept_names": [c.name for c in rb.concepts],
                "scale": [rb.scale.min, rb.scale.max], "grade": [rb.grade.min, rb.grade.max],
                "variant": name, "seed": info["seed"], "selected_by": "dev t_f1", "notes": notes,
                "git_revision": metrics["git_revision"]}
        step = info["steps"]  # every stage that shaped the model: Stage I, the joint stage, Stage II
        try:
            reccbm.save_checkpoint(model, tokenizer, run, stage="plm" if plm else "stage2", step=step, meta=meta)
        except Exception as exc:  # safetensors reports a failed write (a full disk) as SafetensorError, not OSError
            if type(exc).__name__ != "SafetensorError":
                raise
            raise OSError(errno.EIO, str(exc).rsplit(": ", 1)[-1], str(run / "model.safetensors")) from None
        train_rows = df.iloc[pos["train"]]  # what `grade` flags compare new responses with (rubrictool.flags)
        save_profile(profile_from_table(train_rows, train_rows["id"].astype(str).tolist(), [] if plm else rb.keys,
                                        (rb.scale.min, rb.scale.max)), run)
    return TrainResult(run, name, metrics, rel, rho, notes)


def _read_agreement(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None
    return doc if isinstance(doc, dict) else None


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
    agreement: dict[str, Any] | str | Path | None = None,
    notes: list[str] | None = None,
    progress: ProgressFn | None = None,
    by: str | None = None,
    **kwargs: Any,
) -> TrainResult:
    """k-fold evaluation: one run per fold in ``run_dir/fold-<i>`` (every item tested exactly once; see
    :func:`rubrictool.data.kfold_splits`), then pooled metrics and the baselines (:mod:`rubrictool.evaluate`).

    Resumable per fold: a fold whose run finished (metrics.json written) is read back, not retrained.
    progress gets one task, "folds": folds done so far, and whether the next one trains or was read back."""
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    if isinstance(agreement, (str, Path)):
        agreement = _read_agreement(Path(agreement))
    run = Path(run_dir)
    splits = kfold_splits(prepare_table(table, rb, need_concepts=False), k=folds, seed=fold_seed, by=by)
    current = run
    try:  # before any training: a folder that cannot be written is one line, not minutes of training lost
        run.mkdir(parents=True, exist_ok=True)
        for i, sp in enumerate(splits):
            current = run / f"fold-{i}.split.json"
            save_split(sp, current, seed=fold_seed, meta={"fold": i, "folds": folds, "by": by})
    except OSError as exc:
        done = sum(_fold_done(run / f"fold-{i}") for i in range(folds)) if run.is_dir() else 0
        kept = f"the {done} fold(s) finished earlier in {run} are kept" if done else f"nothing was written to {run}"
        raise TrainError(f"{current}: cannot write it ({exc.strerror or exc}); nothing was trained; {kept}",
                         hint="pass --out a folder you can write (or free space), then train again") from None
    results: list[dict[str, Any]] = []
    for i, sp in enumerate(splits):
        fold_dir = run / f"fold-{i}"
        if _fold_done(fold_dir):
            if progress:
                progress(Progress("folds", i + 1, folds, f"fold {i + 1}: finished earlier, read back"))
        else:
            if progress:
                progress(Progress("folds", i, folds, f"fold {i + 1}: training"))
            train_model(rb, table, sp, fold_dir, agreement=agreement, notes=notes, progress=progress, **kwargs)
        results.append(json.loads((fold_dir / "metrics.json").read_text()))
    if progress:
        progress(Progress("folds", folds, folds, "all folds done: pooled"))
    plm = "plm" in results[0]["variant"]
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
        pred = pd.read_csv(run / f"fold-{i}" / "test_predictions.csv", dtype={"id": str})
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
    pooled = pd.concat(parts, ignore_index=True)
    write_table(pooled, run / "pooled_predictions.csv")  # atomic: what `compare` reads as a finished k-fold run
    keys = rb.keys if has_c and not plm else []
    summary = {
        "variant": results[0]["variant"], "preset": results[0].get("preset"), "rubric": rb.name, "folds": folds,
        "fold_seed": fold_seed, "by": by, "n_items": len(pooled), "notes": list(notes or []),
        "pooled": pooled_metrics(pooled, keys),
        "per_fold": [r["seeds"][0]["test"] | {"fold": i} for i, r in enumerate(results)],
        "baselines": {name: pooled_metrics(pooled.assign(grade=pooled[name]).drop(columns=["grade_oracle"], errors="ignore"), [])
                      for name in ("majority", "oracle_concepts") if name in pooled},
        "train_seconds": [r["summary"].get("train_seconds", 0.0) for r in results],
        "encoder": [(r.get("encoder") or {}).get("used", "train") for r in results],  # per fold (auto decides per fold)
        "grade_levels": rb.grade.max - rb.grade.min + 1,
        "labels": results[0].get("labels") or {},  # who made the labels (every fold trains on the same table)
    }
    honest = honest_metrics(pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy(), None,
                            y_majority=pooled["majority"].to_numpy())
    summary |= {k: honest[k] for k in ("majority", "ci", "vs_majority", "top_grade", "top_share")}
    summary["warnings"] = [w for w in honest["warnings"] if w["code"] != "small_test"]  # every answer was tested
    cal = expected_calibration_error(pooled["grade_prob"], pooled["grade"] == pooled["grade_true"])
    ns = [r.get("n_test") for r in results]
    nlls = [(r.get("calibration") or {}).get("nll") for r in results]
    nll = None  # the mean over all answers of the folds' per-answer NLL (runs written before it: none)
    if all(isinstance(n, int) for n in ns) and all(isinstance(v, float) for v in nlls):
        nll = float(np.average(np.asarray(nlls, float), weights=np.asarray(ns, float)))
    summary["calibration"] = cal | {"nll": nll}
    rels = [run / f"fold-{i}" / "reliability.csv" for i in range(folds)]
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
                                                 pooled[[f"{k}_true" for k in keys]].to_numpy(float) - rb.scale.min, rb.M)
        alpha = [_alpha(agreement, k)[0] for k in keys]
        summary["score_reliability"] = {"concepts": keys, "alpha": alpha, **score,
                                        "spearman_noise_share": noise_share_rho(score["reliability"], alpha)}
        if "reliability" in summary and all("sigma2_implied" in f for f in frames):
            implied = np.mean([f["sigma2_implied"].to_numpy(float) for f in frames], axis=0)  # (K,) mean over folds
            summary["reliability"]["sigma2_implied_mean"] = implied.tolist()
            summary["reliability"]["score_sigma2_pooled"] = score["sigma2"]
            summary["reliability"] |= implied_noise_rhos(implied, score["sigma2"], alpha)
    attn = [r["seeds"][0].get("attention") for r in results]
    if all(attn):
        summary["attention"] = {k: np.mean([a[k] for a in attn if a], axis=0).tolist() for k in attn[0] or {}}
    atomic_write_text(run / "folds.md", folds_markdown(summary))
    atomic_write_text(run / "folds.json", json.dumps(summary, indent=2, default=float) + "\n")  # last: ablate's "done"
    fold0 = run / "fold-0"
    rel = pd.read_csv(fold0 / "reliability.csv") if (fold0 / "reliability.csv").is_file() else pd.DataFrame()
    metrics = {"variant": summary["variant"], "encoder": results[0].get("encoder"),
               "summary": {k: {"mean": v, "std": 0.0} for k, v in summary["pooled"].items()},
               "folds": summary, "seeds": results[0]["seeds"],
               "spearman_noise_share": summary.get("score_reliability", {}).get("spearman_noise_share"),
               "n_test": len(pooled), "warnings": summary["warnings"], "labels": summary["labels"],
               **{k: summary[k] for k in ("majority", "ci", "vs_majority", "calibration")}}
    metrics["summary"] |= {f"{s}_seconds": float(np.mean([r["summary"].get(f"{s}_seconds", 0.0) for r in results]))
                           for s in ("stage1", "joint", "stage2", "train")}
    return TrainResult(run, summary["variant"], metrics, rel, results[0].get("spearman_sigma2_vs_1_minus_alpha"),
                       list(notes or []))


FOLD_COLUMNS = (("t_acc", "T-Acc"), ("t_f1", "T-F1"), ("qwk", "QWK"), ("pearson", "Pearson r"), ("rmse", "RMSE"),
                ("adjacent", "adjacent"), ("c_acc", "C-Acc"), ("c_f1", "C-F1"), ("oracle_t_acc", "oracle-interv. T-Acc"))


def folds_markdown(summary: dict[str, Any]) -> str:
    """folds.md: pooled metrics of the run and the baselines, then each fold."""
    def cell(m: dict[str, Any], k: str) -> str:
        v = m.get(k)
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

    # ±1 covers every pair of a two-grade scale: adjacent agreement says nothing there
    columns = [c for c in FOLD_COLUMNS if c[0] != "adjacent" or summary.get("grade_levels", 3) > 2]
    head = "| model | " + " | ".join(n for _, n in columns) + " |"
    sep = "|---" * (len(columns) + 1) + "|"
    rows = [f"| {summary['variant']} ({summary['preset']}) | " + " | ".join(cell(summary["pooled"], k) for k, _ in columns) + " |"]
    for name, m in summary["baselines"].items():
        rows.append(f"| {name.replace('_', ' ')} baseline | " + " | ".join(cell(m, k) for k, _ in columns) + " |")
    folds = [f"| fold {m['fold']} | " + " | ".join(cell(m, k) for k, _ in columns) + " |" for m in summary["per_fold"]]
    title = f"{summary['folds']}-fold evaluation, {summary['n_items']} items pooled (rubric {summary['rubric']})"
    who = describe_labels(summary.get("labels") or {})
    honest = [f"Labels: {who}.", ""] if who else []
    if "ci" in summary:
        ci, cal = summary["ci"], summary.get("calibration") or {}
        honest += [f"T-Acc {ci['t_acc']['value']:.3f} [95 % CI {ci['t_acc']['lo']:.3f}, {ci['t_acc']['hi']:.3f}], "
                  f"QWK {ci['qwk']['value']:.3f} [{ci['qwk']['lo']:.3f}, {ci['qwk']['hi']:.3f}]; majority class "
                  f"(grade {summary['majority']['grade']}) T-Acc {summary['majority']['t_acc']:.3f}; ECE "
                  f"{cal.get('ece', float('nan')):.3f} ({cal.get('ece_bins', '')})"
                  + (f", NLL {cal['nll']:.3f}" if cal.get("nll") is not None else ""), ""]
        honest += [f"**Warning:** {w['message']}" for w in summary.get("warnings", [])] + [""]
    return "\n".join([f"# {title}", "", *honest, head, sep, *rows, "", "Per fold:", "", head, sep, *folds, ""]
                     + [f"> {n}" for n in summary["notes"]]) + "\n"


# ---------------------------------------------------------------------------- CLI support
# flat CLI option -> config sections it sets (batch size is shared by both stages, as in the paper); every other field
# is set by --config YAML or --cfg SECTION.FIELD=VALUE (parse_cfg)
FLAT_OPTIONS: dict[str, list[tuple[str, str]]] = {
    "backbone": [("model", "backbone")],
    "max_len": [("model", "max_len")],
    "epochs": [("stage1", "epochs")],
    "lr": [("stage1", "lr")],
    "batch_size": [("stage1", "batch_size"), ("stage2", "batch_size")],
    "device": [("stage1", "device")],
    "crossfit": [("stage2", "crossfit")],
    "encoder": [("stage1", "encoder")],
}


def parse_cfg(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--cfg SECTION.FIELD=VALUE`` entries as config sections (values read as YAML scalars), checked like a
    --config file: an unknown section or field is refused, naming the known ones."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise TrainError(f"--cfg {item!r}: use SECTION.FIELD=VALUE, e.g. --cfg stage2.lambda_d=1")
        if section not in SECTIONS:
            raise TrainError(f"--cfg {item!r}: unknown section {section!r}; use {', '.join(SECTIONS)}")
        known = {f.name for f in fields(SECTIONS[section])}
        if name not in known:
            raise TrainError(f"--cfg {item!r}: unknown {section} field {name!r}; known: {', '.join(sorted(known))}")
        _refuse_decided(f"--cfg {item!r}", section, [name])
        try:
            out.setdefault(section, {})[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise TrainError(f"--cfg {item!r}: the value is not a number, word or true/false") from None
    return out
