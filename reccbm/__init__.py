"""reccbm: REC-CBM, a rubric-aware error-correcting concept bottleneck model for grading.

RACE (rubric-aware concept encoder) -> OPCC (ordinal pairwise concept calibration) -> LCEC
(latent concept error correction) -> grade head. :func:`fit` runs the recipe: Stage I, then Stage II
(the paper's Algorithm 1), with an optional joint stage and a cross-fitted Stage II in between
(:class:`Recipe` says which; :func:`recipe` builds the named ones, "default" and "paper"). :func:`fit` takes
token ids and 0-based labels; :class:`Grader` is the estimator on raw text (fit, predict, save, load) that owns its
tokenizer and recipe. :class:`PLM` is the black-box baseline. Independent of rubrictool.
"""

from __future__ import annotations

import os

# Before torch loads OpenMP: idle threads sleep instead of spinning. Same speed on an idle machine, and
# much faster steps when other processes share the cores (docs/results.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from reccbm.checkpoint import load_checkpoint, read_meta, save_checkpoint
from reccbm.config import JointConfig, ModelConfig, StageIConfig, StageIIConfig, variant_flags, variant_name
from reccbm.data import EncodedItems, encode_inputs, load_tokenizer
from reccbm.errors import ReccbmError
from reccbm.estimator import Concept, Grader, Rubric
from reccbm.explain import (
    INTERVENTIONS,
    DecisionTrace,
    attention_diagnostics,
    concept_order,
    contributions_toward,
    decision_trace,
    grades_from_levels,
    intervention_levels,
    override,
    partial_correlations,
    reliability,
    shift_levels,
)
from reccbm.fit import Fitted, Recipe, fit
from reccbm.inference import Predictions, cache_concepts, encoder_states, predict, quantize_encoder
from reccbm.metrics import (
    concept_metrics,
    concept_score_reliability,
    grade_metrics,
    macro_f1,
    per_concept_metrics,
    task_metrics,
)
from reccbm.model import (
    PLM,
    LatentCorrection,
    Model,
    RecCBM,
    RecCBMOutput,
    TextEncoder,
    build_model,
    default_backbone,
    fit_level_tilt,
    tilted,
)
from reccbm.recipes import PRESETS, recipe
from reccbm.stage2 import fit_lcec, train_grader
from reccbm.stages import Event, StageResult, set_seed
from reccbm.train import init_rubric_queries, train_concepts, train_joint, train_plm

__all__ = [
    "INTERVENTIONS",
    "PLM",
    "PRESETS",
    "Concept",
    "DecisionTrace",
    "EncodedItems",
    "Event",
    "Fitted",
    "Grader",
    "JointConfig",
    "LatentCorrection",
    "Model",
    "ModelConfig",
    "Predictions",
    "RecCBM",
    "RecCBMOutput",
    "ReccbmError",
    "Recipe",
    "Rubric",
    "StageIConfig",
    "StageIIConfig",
    "StageResult",
    "TextEncoder",
    "attention_diagnostics",
    "build_model",
    "cache_concepts",
    "concept_metrics",
    "concept_order",
    "concept_score_reliability",
    "contributions_toward",
    "decision_trace",
    "default_backbone",
    "encode_inputs",
    "encoder_states",
    "fit",
    "fit_lcec",
    "fit_level_tilt",
    "grade_metrics",
    "grades_from_levels",
    "init_rubric_queries",
    "intervention_levels",
    "load_checkpoint",
    "load_tokenizer",
    "macro_f1",
    "override",
    "partial_correlations",
    "per_concept_metrics",
    "predict",
    "quantize_encoder",
    "read_meta",
    "recipe",
    "reliability",
    "save_checkpoint",
    "set_seed",
    "shift_levels",
    "task_metrics",
    "tilted",
    "train_concepts",
    "train_grader",
    "train_joint",
    "train_plm",
    "variant_flags",
    "variant_name",
]
