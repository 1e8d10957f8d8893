"""Named training recipes: the recommended one ("default"), the one before its concept reader ("plain") and the
paper's ("paper").

A recipe name stands for overrides on the configuration dataclasses' defaults (reccbm/config.py, the paper's
Appendix values). :func:`recipe` turns a name and the model's sizes into a :class:`reccbm.Recipe`; rubrictool's
``--preset`` reads the same :data:`PRESETS`, on top of its CPU epoch budgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from reccbm.config import JointConfig, ModelConfig, StageIConfig, StageIIConfig
from reccbm.errors import ReccbmError
from reccbm.fit import Recipe

__all__ = ["PRESETS", "SECTIONS", "contrast_concepts", "recipe"]

# Training recipes on top of the paper's dataclass defaults. "paper" is the paper's configuration (Eq. 12
# L_con summed, scalar head W μ_post, orthogonal queries, prior mean 0, Stage II on training outputs, no
# joint stage) with a CPU-sized Stage I budget. "plain" is what the 5-fold measurements chose first (docs/results.md,
# docs/design.md): a level head, rubric-initialised queries, LCEC conditioned on an expert's level and fitted on the
# dev answers' errors, and a joint stage trained with random interventions. "default" is "plain" with the concept
# reader that carries to new questions (lab/history/concept-reader-levers.md): the answer compared with its
# reference inside the concept heads (model.align, reccbm/align.py), soft concept targets from the reviewers' levels
# (stage1.soft_targets; trained on the adjudicated levels alone where none are kept), and LCEC set by its moments
# (stage2.lcec_fit "moments": the labels' covariance as its prior, so that an expert's correction moves the others),
# below stage1.frozen_below labelled answers a frozen encoder (stage1.encoder "auto": where no trained model learns
# the grade yet, one that trains in a fraction of the time and keeps no encoder of its own per fold), and examples
# across questions in Stage I (stage1.contrast, reccbm/contrast.py): the reference answer at the top level of the
# concepts the rubric marks reference_is_top, an answer to another question at the bottom of those it marks
# off_topic_is_bottom (:func:`contrast_concepts`; a rubric that marks none trains without them), three joint epochs
# instead of plain's four (so that the README's main job fits its budget on a 2-core CPU; joint.epochs 4 is the default
# before, lab/history/concept-reader-levers.md), the trained weights' moving average evaluated, selected and kept
# in the encoder stages (stage1.ema; 0 is the default before), and each answer read normalised (model.normalise,
# reccbm/normalise.py: whitespace, the final punctuation and one-letter slips, edits a teacher does not mark, so that
# they cannot move a mark; off is the default before, lab/history/low-levels.md).
_PLAIN: dict[str, dict[str, Any]] = {
    "model": {"head": "level", "query_init": "rubric", "center": True, "tau": 0.25, "condition": True},
    "stage1": {"epochs": 3, "concept_loss": "mean", "query_lr_multiplier": 10.0},
    "joint": {"epochs": 4, "lr": 5e-5, "intervention_p": 0.25, "select": "last"},
    "stage2": {"intervention_p": 0.25, "lcec_fit": "dev"},
}
_READER: dict[str, dict[str, Any]] = {
    "model": {"align": True, "normalise": True},
    "stage1": {"soft_targets": 0.5, "encoder": "auto", "contrast": 0.5, "contrast_per_batch": 2, "ema": 0.995},
    "joint": {"epochs": 3},
    "stage2": {"lcec_fit": "moments"},
}
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


def contrast_concepts(stage1: dict[str, Any], keys: Sequence[str], reference_is_top: Sequence[bool],
                      off_topic_is_bottom: Sequence[bool]) -> dict[str, Any]:
    """The Stage I section with the concepts of the examples across questions as positions: ``contrast_top`` and
    ``contrast_bottom`` as given (concept keys or 0-based positions), or, where a section does not name them, the
    rubric's marks (per concept, in ``keys`` order: the reference answer is at its top level; an answer to another
    question is at its bottom level); with ``contrast`` off, unnamed ones stay unset. Raises ReccbmError for a key the
    rubric does not have."""
    out = dict(stage1)
    for name, marks in (("contrast_top", reference_is_top), ("contrast_bottom", off_topic_is_bottom)):
        given = out.get(name)
        if given is None:
            if float(out.get("contrast") or 0) > 0:
                out[name] = [k for k, marked in enumerate(marks) if marked]
            continue
        positions = []
        for c in given:
            if isinstance(c, str) and not c.lstrip("-").isdigit():
                if c not in keys:
                    raise ReccbmError(f"stage1.{name}: no concept {c!r}; the rubric's concepts are {', '.join(keys)}")
                positions.append(list(keys).index(c))
            elif not 0 <= int(c) < len(keys):
                raise ReccbmError(f"stage1.{name}: position {c} is outside the rubric's {len(keys)} concepts (0-based)")
            else:
                positions.append(int(c))
        out[name] = positions
    return out
