"""Training runs around :func:`reccbm.fit`: the recipe, one run, k folds.

* :mod:`~rubrictool.train.recipe`: presets, config sections, ``--config`` files and ``--cfg`` entries, the command
  line's flag table, the options a command passes down (:class:`TrainOptions`), the PLM's fair budget, and
  :func:`resolve_training` (what a run trains with, before any data is read);
* :mod:`~rubrictool.train.run`: :func:`train_model`, one run directory (every seed, the test split, the run's files);
* :mod:`~rubrictool.train.folds`: :func:`train_folds`, one run per fold, then pooled metrics and ``folds.md``.

The statistics a run reports (the reliability table, the Spearman correlations) are in :mod:`rubrictool.evaluate`.
Grading with a trained run lives in :mod:`rubrictool.grade`.
"""

from __future__ import annotations

from rubrictool.train.folds import FOLD_COLUMNS, folds_markdown, train_folds
from rubrictool.train.recipe import (
    CPU_DEFAULTS,
    DECIDED_BY_THE_RUN,
    ENCODERS,
    FLAT_OPTIONS,
    PRESETS,
    SECTIONS,
    ResolvedTraining,
    TrainOptions,
    encoder_budget,
    encoder_choice,
    encoder_epochs,
    encoder_min_steps,
    fair_plm_overrides,
    load_train_config,
    parse_cfg,
    preset_config,
    recipe_from,
    resolve_training,
    training_overrides,
)
from rubrictool.train.run import (
    SUMMARY_METRICS,
    RunSpec,
    TrainResult,
    concept_texts,
    points_baselines,
    prepare_table,
    read_agreement,
    train_model,
)

__all__ = [
    "CPU_DEFAULTS",
    "DECIDED_BY_THE_RUN",
    "ENCODERS",
    "FLAT_OPTIONS",
    "FOLD_COLUMNS",
    "PRESETS",
    "SECTIONS",
    "SUMMARY_METRICS",
    "ResolvedTraining",
    "RunSpec",
    "TrainOptions",
    "TrainResult",
    "concept_texts",
    "encoder_budget",
    "encoder_choice",
    "encoder_epochs",
    "encoder_min_steps",
    "fair_plm_overrides",
    "folds_markdown",
    "load_train_config",
    "parse_cfg",
    "points_baselines",
    "prepare_table",
    "preset_config",
    "read_agreement",
    "recipe_from",
    "resolve_training",
    "train_folds",
    "train_model",
    "training_overrides",
]
