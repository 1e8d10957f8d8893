"""Named training recipes: the recommended one ("default"), the one before its concept reader ("plain") and the
paper's ("paper").

A recipe name stands for overrides on the configuration dataclasses' defaults (reccbm/config.py, the paper's
Appendix values). :func:`recipe` turns a name and the model's sizes into a :class:`reccbm.Recipe`; rubrictool's
``--preset`` reads the same :data:`PRESETS`, on top of its CPU epoch budgets.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from reccbm.config import JointConfig, ModelConfig, StageIConfig, StageIIConfig
from reccbm.errors import ReccbmError
from reccbm.fit import Recipe

__all__ = ["PRESETS", "SECTIONS", "recipe"]

# Training recipes on top of the paper's dataclass defaults. "paper" is the paper's configuration (Eq. 12
# L_con summed, scalar head W μ_post, orthogonal queries, prior mean 0, Stage II on training outputs, no
# joint stage) with a CPU-sized Stage I budget. "plain" is what the 5-fold measurements chose first (docs/results.md,
# docs/design.md): a level head, rubric-initialised queries, LCEC conditioned on an expert's level and fitted on the
# dev answers' errors, and a joint stage trained with random interventions. "default" is "plain" with the concept
# reader that carries to new questions (docs/history/concept-reader-levers.md): the answer compared with its
# reference inside the concept heads (model.align, reccbm/align.py), soft concept targets from the reviewers' levels
# (stage1.soft_targets; trained on the adjudicated levels alone where none are kept), and LCEC set by its moments
# (stage2.lcec_fit "moments": the labels' covariance as its prior, so that an expert's correction moves the others),
# and below stage1.frozen_below labelled answers a frozen encoder (stage1.encoder "auto": where no trained model learns
# the grade yet, one that trains in a fraction of the time and keeps no encoder of its own per fold).
_PLAIN: dict[str, dict[str, Any]] = {
    "model": {"head": "level", "query_init": "rubric", "center": True, "tau": 0.25, "condition": True},
    "stage1": {"epochs": 3, "concept_loss": "mean", "query_lr_multiplier": 10.0},
    "joint": {"epochs": 4, "lr": 5e-5, "intervention_p": 0.25, "select": "last"},
    "stage2": {"intervention_p": 0.25, "lcec_fit": "dev"},
}
_READER: dict[str, dict[str, Any]] = {"model": {"align": True}, "stage1": {"soft_targets": 0.5, "encoder": "auto"},
                                      "stage2": {"lcec_fit": "moments"}}
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {s: _PLAIN.get(s, {}) | _READER.get(s, {}) for s in _PLAIN},
    "plain": _PLAIN,
    "paper": {"stage1": {"epochs": 6}},
}

# The configuration dataclass of each section of a recipe.
SECTIONS: dict[str, type[Any]] = {"model": ModelConfig, "stage1": StageIConfig, "joint": JointConfig,
                                  "stage2": StageIIConfig}


def recipe(name: str, num_concepts: int, num_levels: int, num_grades: int,
           overrides: dict[str, dict[str, Any]] | None = None) -> Recipe:
    """The :class:`Recipe` ``name`` (a key of :data:`PRESETS`) for a model of K concepts, M + 1 levels and S + 1
    grades; ``overrides`` ({section: {field: value}}) go on top, for a field the recipe sets or not."""
    if name not in PRESETS:
        raise ReccbmError(f"unknown recipe {name!r}; use {' or '.join(PRESETS)}")
    sections: dict[str, dict[str, Any]] = {s: dict(PRESETS[name].get(s, {})) for s in SECTIONS}
    for section, values in (overrides or {}).items():
        if section not in SECTIONS:
            raise ReccbmError(f"unknown recipe section {section!r}; use {', '.join(SECTIONS)}")
        known = {f.name for f in fields(SECTIONS[section])}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ReccbmError(f"unknown {section} field(s) {unknown}; known: {sorted(known)}")
        sections[section].update(values)
    sizes = {"num_concepts": num_concepts, "num_levels": num_levels, "num_grades": num_grades}
    try:
        return Recipe(ModelConfig(**(sections["model"] | sizes)), StageIConfig(**sections["stage1"]),
                      JointConfig(**sections["joint"]), StageIIConfig(**sections["stage2"]))
    except ValueError as exc:
        raise ReccbmError(str(exc)) from None
