"""A run's predictions as a table: one row per answer, the layout of ``graded.csv`` (``rubrictool grade``) and a run's
``test_predictions.csv`` (``rubrictool train``), written by both from the one function here."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

import reccbm
from reccbm import Predictions
from rubrictool.rubric import Rubric

__all__ = ["predictions_frame"]


def predictions_frame(
    model: reccbm.Model, rb_or_meta: Rubric | dict[str, Any], preds: Predictions, ids: list[str]
) -> pd.DataFrame:
    """One row per item: grade, its probability and, with a bottleneck, per concept the level, each level's
    probability (``<key>_p<level>``), the expected score, μ_post and contribution (the layout of ``graded.csv`` and a
    run's ``test_predictions.csv``)."""
    if isinstance(rb_or_meta, Rubric):
        keys, smin, gmin = rb_or_meta.keys, rb_or_meta.scale.min, rb_or_meta.grade.min
    else:
        keys, smin, gmin = rb_or_meta["concept_keys"], rb_or_meta["scale"][0], rb_or_meta["grade"][0]
    out = pd.DataFrame({"id": ids, "grade": preds.grades + gmin})
    out["grade_prob"] = preds.grade_probs[np.arange(len(ids)), preds.grades]
    if preds.p_hat is None:
        return out
    if preds.grade_logits is not None:
        out["grade_logit"] = preds.grade_logits[np.arange(len(ids)), preds.grades]
    tr = reccbm.decision_trace(model, preds)
    cols: dict[str, Any] = {}
    for k, key in enumerate(keys):
        cols[f"{key}_level"] = tr.levels[:, k] + smin
        for j in range(preds.p_hat.shape[2]):  # P(level = smin + j), the concept head's softmax
            cols[f"{key}_p{smin + j}"] = preds.p_hat[:, k, j]
        cols[f"{key}_expected"] = tr.expected[:, k] + smin
        cols[f"{key}_mu_post"] = tr.mu_post[:, k]
        cols[f"{key}_contribution"] = tr.contributions[:, k]
    cols["grade_bias"] = tr.bias
    return pd.concat([out, pd.DataFrame(cols)], axis=1)
