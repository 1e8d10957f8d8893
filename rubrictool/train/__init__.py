"""Training runs around :func:`reccbm.fit`: the recipe, one run, k folds.

* :mod:`~rubrictool.train.recipe`: presets, config sections, ``--config`` files and ``--cfg`` entries, the command
  line's flag table, the options a command passes down (:class:`TrainOptions`), what a run records about its
  table (:class:`DataRecord`), the PLM's fair budget, and
  :func:`resolve_training` (what a run trains with, before any data is read);
* :mod:`~rubrictool.train.run`: :func:`train_model`, one run directory (every seed, the test split, the run's files);
* :mod:`~rubrictool.train.folds`: :func:`train_folds`, one run per fold, then pooled metrics and ``folds.md``.

The statistics a run reports (the reliability table, the Spearman correlations) are in :mod:`rubrictool.evaluate`.
Grading with a trained run lives in :mod:`rubrictool.grade`.

:mod:`~rubrictool.train.runs` (a run folder: its files, its checks, opening it), :mod:`~rubrictool.train.resume`
(continuing a stopped run), :mod:`~rubrictool.train.kfold` (fold splits and pooling) and
:mod:`~rubrictool.train.parallel` (runs in worker processes) complete a run's life. The names below are imported on
first use, so reading a run (``runs``) does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rubrictool.lazy import lazy_names

if TYPE_CHECKING:
    from rubrictool.train.folds import (
        FOLD_COLUMNS,
        folds_markdown,
        train_folds,
    )
    from rubrictool.train.recipe import (
        CPU_DEFAULTS,
        DECIDED_BY_THE_RUN,
        ENCODERS,
        FLAT_OPTIONS,
        PRESETS,
        SECTIONS,
        DataRecord,
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

_HOME: dict[str, str] = {
    "CPU_DEFAULTS": "rubrictool.train.recipe",
    "DECIDED_BY_THE_RUN": "rubrictool.train.recipe",
    "DataRecord": "rubrictool.train.recipe",
    "ENCODERS": "rubrictool.train.recipe",
    "FLAT_OPTIONS": "rubrictool.train.recipe",
    "FOLD_COLUMNS": "rubrictool.train.folds",
    "PRESETS": "rubrictool.train.recipe",
    "ResolvedTraining": "rubrictool.train.recipe",
    "RunSpec": "rubrictool.train.run",
    "SECTIONS": "rubrictool.train.recipe",
    "SUMMARY_METRICS": "rubrictool.train.run",
    "TrainOptions": "rubrictool.train.recipe",
    "TrainResult": "rubrictool.train.run",
    "concept_texts": "rubrictool.train.run",
    "encoder_budget": "rubrictool.train.recipe",
    "encoder_choice": "rubrictool.train.recipe",
    "encoder_epochs": "rubrictool.train.recipe",
    "encoder_min_steps": "rubrictool.train.recipe",
    "fair_plm_overrides": "rubrictool.train.recipe",
    "folds_markdown": "rubrictool.train.folds",
    "load_train_config": "rubrictool.train.recipe",
    "parse_cfg": "rubrictool.train.recipe",
    "points_baselines": "rubrictool.train.run",
    "prepare_table": "rubrictool.train.run",
    "preset_config": "rubrictool.train.recipe",
    "read_agreement": "rubrictool.train.run",
    "recipe_from": "rubrictool.train.recipe",
    "resolve_training": "rubrictool.train.recipe",
    "train_folds": "rubrictool.train.folds",
    "train_model": "rubrictool.train.run",
    "training_overrides": "rubrictool.train.recipe",
}

__all__ = [
    "CPU_DEFAULTS",
    "DECIDED_BY_THE_RUN",
    "ENCODERS",
    "FLAT_OPTIONS",
    "FOLD_COLUMNS",
    "PRESETS",
    "SECTIONS",
    "SUMMARY_METRICS",
    "DataRecord",
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


__getattr__ = lazy_names(__name__, _HOME)
