"""A k-fold run (``rubrictool train --folds k``) as a whole: each fold's model, and the pooled baselines with CIs.

A k-fold folder holds one run per fold (``fold-<i>/``), ``fold-<i>.split.json``, ``pooled_predictions.csv`` (each
answer's prediction from the one fold that tested it, beside its gold grade and levels, the majority class and the
oracle-concept baseline of its fold) and ``folds.json`` / ``folds.md``. Here:

* :func:`fold_given` / :func:`constant_text`: the grades each fold's model gives, and whether it is **constant**
  (gives every test answer one grade: it grades nothing);
* :func:`training_text`: what the folds trained with (variant, preset, encoder trained or frozen, backbone) and who
  made the labels.

Library code: returns data, prints nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["constant_text", "fold_given", "training_text"]


def fold_given(pooled: pd.DataFrame, fold: int) -> dict[str, Any]:
    """The grades fold ``fold``'s model gives its test answers (pooled_predictions.csv): ``grades_given``, ``constant``
    (one grade for every test answer: the model grades nothing) and ``top_grade``."""
    p = pooled.loc[pooled["fold"] == fold, "grade"].to_numpy()
    values, counts = np.unique(p, return_counts=True)
    return {"grades_given": [int(v) for v in values], "constant": len(values) == 1,
            "top_grade": int(values[np.argmax(counts)]) if len(values) else None}


def constant_text(per_fold: list[dict[str, Any]]) -> str | None:
    """One sentence naming the constant folds of folds.json's ``per_fold`` (None when there are none)."""
    constant = [f for f in per_fold if f.get("constant")]
    if not constant:
        return None
    which = ", ".join(f"{f['fold']} (grade {f['top_grade']})" for f in constant)
    return (f"Constant fold{'s' if len(constant) > 1 else ''}: in fold{'s' if len(constant) > 1 else ''} {which} the "
            "model gives every test answer one grade: it grades nothing there, and the pooled numbers mix "
            f"{'those folds' if len(constant) > 1 else 'that fold'} with the others.")


def training_text(summary: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """What the folds trained with, in words: variant, preset, encoder (trained or frozen, per fold when they
    differ) and backbone, from folds.json and a fold's config.yaml."""
    from rubrictool.runs import trained_with

    used = [str(e) for e in summary.get("encoder") or []]
    if used and len(set(used)) == 1:
        encoder = {"frozen": "encoder frozen in every fold (only the heads trained)",
                   "train": "encoder trained (fine-tuned) in every fold"}.get(used[0], f"encoder {used[0]}")
    elif used:
        encoder = "encoder " + ", ".join(f"fold {i}: {'frozen' if e == 'frozen' else 'trained'}" for i, e in enumerate(used))
    else:
        encoder = "encoder: not recorded"
    backbone = ((config or {}).get("model") or {}).get("backbone") or summary.get("backbone")
    recipe = trained_with(config) if config else f"{summary.get('preset') or 'custom'} preset"
    return (f"{summary.get('variant')}, {recipe}; {encoder}; backbone "
            f"{backbone or 'all-MiniLM-L6-v2 (the default)'}")
