"""reccbm: REC-CBM, a rubric-aware error-correcting concept bottleneck model for grading.

RACE (rubric-aware concept encoder) -> OPCC (ordinal pairwise concept calibration) -> LCEC
(latent concept error correction) -> grade head. :class:`Grader` is the estimator on raw text (fit on a table or
arrays, predict, save, load; scikit-learn's get_params/set_params) that owns its tokenizer and recipe, and the one
way rubrictool trains and grades. Below it, :func:`fit` runs a :class:`Recipe` on token ids and 0-based labels:
Stage I, then Stage II (the paper's Algorithm 1), with an optional joint stage and a cross-fitted Stage II in between
(:func:`recipe` builds the named ones, :data:`PRESETS`); :func:`predict` runs a model on encoded items,
:func:`predict_texts` on answers as the model reads them.
Independent of rubrictool.

``__all__`` is that public surface. The building blocks (the stages, the model classes, metrics, explanations) are
importable from here as before and from their modules (reccbm.train, reccbm.model, reccbm.metrics, reccbm.explain,
…), which are the places to read them.

Importing reccbm sets no environment variable. OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep instead of spinning,
which keeps training steps fast when other processes share the cores) is set by rubrictool when it is imported, before
torch loads; a script that trains with reccbm alone on a shared machine sets it the same way, before importing torch
(``os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")``).
"""

from __future__ import annotations

from reccbm.checkpoint import load_checkpoint, save_checkpoint

# The building blocks: importable from reccbm as before; their modules are where to read them.
from reccbm.checkpoint import read_meta as read_meta
from reccbm.config import (
    JointConfig as JointConfig,
)
from reccbm.config import (
    ModelConfig as ModelConfig,
)
from reccbm.config import (
    StageIConfig as StageIConfig,
)
from reccbm.config import (
    StageIIConfig as StageIIConfig,
)
from reccbm.config import (
    variant_flags as variant_flags,
)
from reccbm.config import (
    variant_name as variant_name,
)
from reccbm.data import (
    TEXT_COLUMNS as TEXT_COLUMNS,
)
from reccbm.data import EncodedItems
from reccbm.data import (
    encode_inputs as encode_inputs,
)
from reccbm.data import (
    encode_table as encode_table,
)
from reccbm.data import (
    load_tokenizer as load_tokenizer,
)
from reccbm.data import (
    responses_as_read as responses_as_read,
)
from reccbm.data import (
    table_lexicon as table_lexicon,
)
from reccbm.errors import ReccbmError
from reccbm.estimator import Concept, Grader, Rubric
from reccbm.explain import (
    INTERVENTIONS as INTERVENTIONS,
)
from reccbm.explain import (
    DecisionTrace as DecisionTrace,
)
from reccbm.explain import (
    attention_diagnostics as attention_diagnostics,
)
from reccbm.explain import (
    concept_order as concept_order,
)
from reccbm.explain import (
    contributions_toward as contributions_toward,
)
from reccbm.explain import (
    decision_trace as decision_trace,
)
from reccbm.explain import (
    grades_from_levels as grades_from_levels,
)
from reccbm.explain import (
    intervention_levels as intervention_levels,
)
from reccbm.explain import (
    override as override,
)
from reccbm.explain import (
    partial_correlations as partial_correlations,
)
from reccbm.explain import (
    reliability as reliability,
)
from reccbm.explain import (
    shift_levels as shift_levels,
)
from reccbm.fit import Fitted as Fitted
from reccbm.fit import Recipe, fit
from reccbm.inference import Predictions, predict, predict_texts
from reccbm.inference import (
    cache_concepts as cache_concepts,
)
from reccbm.inference import (
    encoder_states as encoder_states,
)
from reccbm.inference import (
    quantize_encoder as quantize_encoder,
)
from reccbm.metrics import (
    concept_metrics as concept_metrics,
)
from reccbm.metrics import (
    concept_score_reliability as concept_score_reliability,
)
from reccbm.metrics import (
    grade_metrics as grade_metrics,
)
from reccbm.metrics import (
    macro_f1 as macro_f1,
)
from reccbm.metrics import (
    per_concept_metrics as per_concept_metrics,
)
from reccbm.metrics import (
    task_metrics as task_metrics,
)
from reccbm.model import (
    PLM as PLM,
)
from reccbm.model import (
    LatentCorrection as LatentCorrection,
)
from reccbm.model import (
    Model as Model,
)
from reccbm.model import (
    RecCBM as RecCBM,
)
from reccbm.model import (
    RecCBMOutput as RecCBMOutput,
)
from reccbm.model import (
    TextEncoder as TextEncoder,
)
from reccbm.model import (
    build_model as build_model,
)
from reccbm.model import (
    default_backbone as default_backbone,
)
from reccbm.model import (
    fit_level_tilt as fit_level_tilt,
)
from reccbm.model import (
    tilted as tilted,
)
from reccbm.recipes import PRESETS, recipe
from reccbm.stage2 import fit_lcec as fit_lcec
from reccbm.stage2 import train_grader as train_grader
from reccbm.stages import Event
from reccbm.stages import StageResult as StageResult
from reccbm.stages import set_seed as set_seed
from reccbm.train import (
    init_rubric_queries as init_rubric_queries,
)
from reccbm.train import (
    train_concepts as train_concepts,
)
from reccbm.train import (
    train_joint as train_joint,
)
from reccbm.train import (
    train_plm as train_plm,
)
from reccbm.views import (
    encode_views as encode_views,
)

__all__ = [
    "PRESETS",
    "Concept",
    "EncodedItems",
    "Event",
    "Grader",
    "Predictions",
    "ReccbmError",
    "Recipe",
    "Rubric",
    "fit",
    "load_checkpoint",
    "predict",
    "predict_texts",
    "recipe",
    "save_checkpoint",
]
