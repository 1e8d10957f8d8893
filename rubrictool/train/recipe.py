"""The training recipe: presets, config sections and files, the command line's flag tables, and what a run trains
with (:func:`resolve_training`) before any data is read.

A run's configuration is built in layers: the paper's dataclass defaults (:mod:`reccbm.config`), ``CPU_DEFAULTS``, the
preset (``PRESETS``), a ``--config`` YAML file, ``--cfg SECTION.FIELD=VALUE`` entries and the flat options
(``FLAT_OPTIONS``), each over the one before.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

import reccbm
from reccbm import JointConfig, ModelConfig, StageIConfig, StageIIConfig
from reccbm.config import SECTIONS, config_from_dict, variant_flags, variant_name
from reccbm.errors import ReccbmError
from reccbm.recipes import PRESETS, contrast_concepts
from rubrictool.errors import TrainError
from rubrictool.rubric import Rubric, load_rubric

__all__ = [
    "CPU_DEFAULTS",
    "DECIDED_BY_THE_RUN",
    "ENCODERS",
    "FLAT_OPTIONS",
    "PRESETS",
    "SECTIONS",
    "DataRecord",
    "ResolvedTraining",
    "TrainOptions",
    "encoder_budget",
    "encoder_choice",
    "encoder_epochs",
    "encoder_min_steps",
    "fair_plm_overrides",
    "load_train_config",
    "parse_cfg",
    "preset_config",
    "recipe_from",
    "resolve_training",
    "training_overrides",
]

# Defaults of `rubrictool train` on a CPU: epoch budgets sized so that the Mohler main job (MiniLM,
# 2 cores) stays within 15 minutes on an idle machine (docs/results.md has the timings). The paper's 50-epoch
# budget is one `--epochs 50` away (patience 3 still applies).
CPU_DEFAULTS: dict[str, dict[str, Any]] = {"model": {"max_len": 128}, "stage1": {"epochs": 6}, "stage2": {"epochs": 30}}

# The training recipes ("default", "plain", "paper") are reccbm's: reccbm.recipes.PRESETS, on top of CPU_DEFAULTS here.
# A variant name's suffix for the encoder choice (stage1.encoder): "reccbm-frozen" trains REC-CBM with the pretrained
# encoder frozen, "reccbm-train" fine-tunes it at every size, "plm-auto" lets stage1.frozen_below decide (learning-curve
# and ablate variants; without a suffix, the preset's choice: "auto" under the default preset)
ENCODERS = ("frozen", "train", "auto")
# Fields a run decides itself, so a config cannot set them (a value given would be silently replaced): what to use
# instead. They are still written to the run's config.yaml, as the run used them.
DECIDED_BY_THE_RUN: dict[tuple[str, str], str] = {
    ("model", "num_concepts"): "the rubric's concepts", ("model", "num_levels"): "the rubric's scale",
    ("model", "num_grades"): "the rubric's grade range",
    ("model", "race"): "--variant, or ablate --variants", ("model", "lcec"): "--variant, or ablate --variants",
    ("model", "plm"): "--variant plm",
    ("stage1", "seed"): "--seeds and --first-seed (seeds S..S+N-1)",
    ("stage2", "seed"): "--seeds and --first-seed (seeds S..S+N-1)",
    ("model", "rubric_ids"): "the rubric's concept texts (with model.rubric_input)",
    ("model", "rubric_spans"): "the rubric's concept texts (with model.rubric_input)",
    ("model", "lexicon"): "the training answers' words (with model.course_words)",
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
                    for f in fields(cls) if f.name in cfgs[sec] or f.default is not MISSING
                    or f.default_factory is not MISSING}
    return out


# ---------------------------------------------------------------------------- the PLM's fair budget
def _encoder_budget(cfgs: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """The one statement of a fair PLM baseline's budget: (epochs, fewest optimiser steps) the encoder trains in a
    concept model configured by ``cfgs`` — Stage I plus the joint stage. The PLM gets both in its one stage."""
    stage1, joint = cfgs["stage1"], cfgs.get("joint") or {}
    return (int(stage1["epochs"]) + int(joint.get("epochs") or 0),
            int(stage1.get("min_steps") or 0) + int(joint.get("min_steps") or 0))


def encoder_budget(preset: str, overrides: dict[str, dict[str, Any]] | None = None) -> tuple[int, int]:
    """(epochs, fewest optimiser steps, StageIConfig.min_steps) the encoder trains in a concept model under ``preset``
    + ``overrides``: Stage I plus the joint stage, the budget a fair PLM baseline gets."""
    return _encoder_budget(_merge(preset_config(preset), overrides))


def encoder_epochs(preset: str, overrides: dict[str, dict[str, Any]] | None = None) -> int:
    """Epochs the encoder trains in a concept model under ``preset`` + ``overrides`` (:func:`encoder_budget`)."""
    return encoder_budget(preset, overrides)[0]


def encoder_min_steps(preset: str, overrides: dict[str, dict[str, Any]] | None = None) -> int:
    """The fewest optimiser steps the encoder takes in a concept model under ``preset`` + ``overrides``
    (:func:`encoder_budget`): on a small table, the step budget a fair PLM baseline gets."""
    return encoder_budget(preset, overrides)[1]


def fair_plm_overrides(preset: str, overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """``overrides`` for a PLM baseline matched to the concept models trained with ``preset`` + ``overrides``: their
    encoder budget (:func:`encoder_budget`) in its one stage, the epochs given counting as the concept models' Stage I
    epochs; the joint stage's steps move into that stage (joint.min_steps 0), so they are not counted twice."""
    epochs, steps = encoder_budget(preset, overrides)
    out = copy.deepcopy(overrides or {})
    out.setdefault("stage1", {}).update(epochs=epochs, min_steps=steps)
    out.setdefault("joint", {})["min_steps"] = 0
    return out


def recipe_from(cfgs: dict[str, dict[str, Any]], mcfg: ModelConfig) -> reccbm.Recipe:
    """The :class:`reccbm.Recipe` of resolved config sections (model sizes already set)."""
    return reccbm.Recipe(mcfg, config_from_dict(StageIConfig, cfgs["stage1"]),
                         config_from_dict(JointConfig, cfgs["joint"]),
                         config_from_dict(StageIIConfig, cfgs["stage2"]))


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
    batch_scale: int = 1  # after for_answers: the preset's batches × this on the run's device (a GPU's gpu_batch_scale)

    def for_answers(self, n_labelled: int) -> ResolvedTraining:
        """The encoder choice for ``n_labelled`` answers (train + dev) and the stage configs that run with it on the
        run's device (on a GPU, the batches scaled by ``stage1.gpu_batch_scale``: :meth:`reccbm.Recipe.for_device`)."""
        encoder = encoder_choice(self.recipe.stage1, n_labelled)
        chosen = replace(self.recipe, stage1=replace(self.recipe.stage1, encoder=encoder["used"]))
        recipe = chosen.for_device()  # what runs
        scale = chosen.stage1.gpu_batch_scale if recipe is not chosen else 1
        return replace(self, recipe=recipe, encoder=encoder, batch_scale=scale)

    @property
    def config(self) -> dict[str, Any]:
        """The run's config.yaml (after :meth:`for_answers`)."""
        doc: dict[str, Any] = {"variant": self.name, "preset": self.preset, "rubric": self.rubric, "seeds": self.seeds,
                               "encoder": self.encoder, "model": asdict(self.mcfg)}
        doc |= {s: asdict(getattr(self.recipe, s)) for s in SECTIONS if s != "model"}  # as they run (for_answers)
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
        # a fair baseline (_encoder_budget): the black box fine-tunes its encoder as many epochs (unless an epoch count
        # is given) and, on a small table, as many steps as REC-CBM's encoder trains under the same preset
        epochs, steps = _encoder_budget(cfgs)
        if "epochs" not in (overrides or {}).get("stage1", {}):
            cfgs["stage1"]["epochs"] = epochs
        cfgs["stage1"]["min_steps"] = steps
    if plm:  # the black box trains its encoder in one stage: no joint stage, and its config says so
        cfgs["joint"]["epochs"] = 0
    cfgs["model"] |= {"num_concepts": rb.K, "num_levels": rb.M + 1, "num_grades": rb.S + 1}
    try:  # examples across questions: the concepts --cfg/--config names, or the rubric's marks
        cfgs["stage1"] = contrast_concepts(cfgs["stage1"], rb.keys, [c.reference_is_top for c in rb.concepts],
                                           [c.off_topic_is_bottom for c in rb.concepts])
    except ReccbmError as exc:
        raise TrainError(str(exc),
                         hint="name the rubric's concept keys, e.g. --cfg 'stage1.contrast_top=[FC]'") from None
    given = (overrides or {}).get("stage2", {})  # the decision rule's pass mark and costs: the rubric's, unless --cfg
    if rb.grade.pass_mark is not None and "decision_pass" not in given:
        cfgs["stage2"]["decision_pass"] = rb.grade.pass_mark - rb.grade.min
    if rb.grade.costs is not None:
        for field_, value in (("decision_fail_passed", rb.grade.costs.fail_passed),
                              ("decision_pass_failed", rb.grade.costs.pass_failed)):
            if field_ not in given:
                cfgs["stage2"][field_] = value
    try:
        mcfg = config_from_dict(ModelConfig, cfgs["model"])
        recipe = recipe_from(cfgs, mcfg)
    except (TypeError, ValueError) as exc:
        raise TrainError(f"bad configuration: {exc}") from None
    return ResolvedTraining(name, plm, preset, rb.name, seeds, cfgs, mcfg, recipe)


def encoder_choice(stage1: StageIConfig, n_labelled: int) -> dict[str, Any]:
    """What the pretrained encoder does in a run that learns from ``n_labelled`` answers (train + dev): asked
    (stage1.encoder: train, frozen or auto), used (train or frozen; auto: frozen below stage1.frozen_below), the count
    and the threshold. Written to the run's config.yaml and metrics.json as ``encoder``."""
    return {"asked": stage1.encoder, "used": stage1.resolved(n_labelled).encoder, "labelled_answers": n_labelled,
            "frozen_below": stage1.frozen_below}


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


def training_overrides(config: str | Path | None = None, cfg: Iterable[str] = (), flat: Mapping[str, Any] | None = None,
                       table: Mapping[str, list[tuple[str, str]]] = FLAT_OPTIONS) -> dict[str, dict[str, Any]]:
    """The config sections a command's options set: a ``--config`` YAML file, ``--cfg SECTION.FIELD=VALUE`` entries
    over it, and the flat options over both (``flat``: option name -> value, None when not given; ``table``: option
    name -> the fields it sets, FLAT_OPTIONS for ``train``)."""
    unknown = sorted(set(flat or {}) - set(table))
    if unknown:
        raise TrainError(f"unknown option(s) {unknown}; known: {sorted(table)}")
    out = load_train_config(config)
    for section, values in parse_cfg(list(cfg)).items():
        out.setdefault(section, {}).update(values)
    for name, value in (flat or {}).items():
        for section, key in table[name] if value is not None else []:
            out.setdefault(section, {})[key] = value
    return out


@dataclass(frozen=True)
class TrainOptions:
    """What a command trains with, built once from its options (:func:`training_overrides` for the sections) and
    passed down to every run it starts: ``train`` (one run or k folds), ``learning-curve`` (a run per cell, which sets
    the variant and seed per cell) and ``ablate`` (a run per combination, which sets the variant and switches)."""

    # PRESETS: "default" (what the fold measurements chose), "plain" (before its reader) or "paper"
    preset: str = "default"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # config sections over the preset
    variant: str = "reccbm"  # reccbm, vanilla (CBM) or plm (no bottleneck)
    race: bool | None = None  # RACE queries on or off over the variant's (None: the variant's)
    opcc: bool | None = None  # the OPCC ranking loss, likewise
    lcec: bool | None = None  # the LCEC correction, likewise
    seeds: int = 1  # a run trains this many seeds and keeps the best on dev
    first_seed: int = 0  # the seeds are first_seed .. first_seed + seeds - 1

    def resolve(self, rubric: Rubric | str | Path) -> ResolvedTraining:
        """What a run of these options trains with (:func:`resolve_training`; the first seed is the run's)."""
        return resolve_training(rubric, variant=self.variant, race=self.race, opcc=self.opcc, lcec=self.lcec,
                                overrides=self.overrides, preset=self.preset, seeds=self.seeds)


@dataclass(frozen=True)
class DataRecord:
    """What a run records about the table it trains on (run.json, its report), passed down with the table to
    every run a command starts (each fold, the final model, each cell of a curve)."""

    agreement: dict[str, Any] | str | Path | None = None  # agreement.json's contents or path: the α column
    notes: list[str] | None = None  # lines the run's report shows (e.g. the labels are not expert-validated)
    table_source: dict[str, Any] | None = None  # the table's origin: {"path": FILE} or {"benchmark": NAME}
    labels: dict[str, Any] | None = None  # who made the labels (None: from agreement.json and label_source)
