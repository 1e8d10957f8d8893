"""A k-fold run (``rubrictool train --folds k``) as a whole: each fold's model, and the pooled baselines with CIs.

A k-fold folder holds one run per fold (``fold-<i>/``), ``fold-<i>.split.json``, ``pooled_predictions.csv`` (each
answer's prediction from the one fold that tested it, beside its gold grade and levels, the majority class and the
oracle-concept baseline of its fold) and ``folds.json`` / ``folds.md``. Here:

* :func:`is_kfold_run` / :func:`fold_context`: is a folder a k-fold run, or one fold of one;
* :func:`fold_rows`: per fold, its test answers, the grades its model gives, whether it is **constant** (gives every
  test answer one grade: it grades nothing), T-Acc and QWK with bootstrap CIs beside its majority class;
* :func:`pooled_table`: per metric, the model and every baseline with bootstrap 95 % CIs, and the paired bootstrap
  difference model − baseline with its CI;
* :func:`training_text`: what the folds trained with (variant, preset, encoder trained or frozen, backbone) and who
  made the labels;
* :data:`SHARED_WEIGHTS` / :func:`prune_shared_weights`: the folder where the folds keep their encoder weights once
  per distinct content (a frozen encoder: once for all folds; :func:`reccbm.save_checkpoint`'s ``shared_dir``).

Library code: returns data, prints nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.evaluate import BOOTSTRAP_METRICS, bootstrap_ci, paired_bootstrap

__all__ = [
    "BASELINES",
    "SHARED_WEIGHTS",
    "constant_text",
    "fold_context",
    "fold_given",
    "fold_rows",
    "is_kfold_run",
    "pooled_table",
    "prune_shared_weights",
    "training_text",
]

# baseline column of the pooled table -> its name on the page
BASELINES = {"majority": "majority class", "points": "points grader", "oracle_concepts": "oracle concepts"}
_FOLD = re.compile(r"^fold-(\d+)$")
SHARED_WEIGHTS = "shared"  # the folder of a k-fold run where its folds keep their encoder weights, once per content


def prune_shared_weights(run: Path, shared: str = SHARED_WEIGHTS) -> list[Path]:
    """Delete the encoder files in ``run/shared`` that no finished fold's model.json names (left by folds trained
    again), once every fold is finished; returns what was deleted. One `train --folds` per folder at a time."""
    folder = run / shared
    if not folder.is_dir():
        return []
    used = set()
    for meta in run.glob("fold-*/model.json"):
        try:
            ref = (json.loads(meta.read_text()).get("encoder_weights") or {}).get("file")
        except (OSError, ValueError):
            return []  # a fold that cannot be read: keep everything
        if ref:
            used.add((meta.parent / ref).resolve())
    gone = [p for p in folder.glob("encoder-*.safetensors") if p.resolve() not in used]
    gone += list(folder.glob(".encoder-*"))  # a write killed before its rename
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def is_kfold_run(path: str | Path) -> bool:
    """A ``train --folds`` folder (not a run itself): fold runs inside, no model.json of its own."""
    p = Path(path)
    return not (p / "model.json").is_file() and ((p / "folds.json").is_file() or (p / "fold-0").is_dir())


def fold_context(run_dir: str | Path) -> dict[str, Any] | None:
    """{"parent", "fold", "folds"} when ``run_dir`` is one fold of a k-fold run (``PARENT/fold-<i>`` beside
    ``PARENT/fold-<i>.split.json``), else None."""
    p = Path(run_dir).resolve()
    m = _FOLD.match(p.name)
    if not m or not (p.parent / f"{p.name}.split.json").is_file():
        return None
    try:
        folds = int(json.loads((p.parent / f"{p.name}.split.json").read_text())["folds"])
    except (OSError, ValueError, TypeError, KeyError):
        folds = len(list(p.parent.glob("fold-*.split.json")))
    return {"parent": p.parent, "fold": int(m.group(1)), "folds": folds}


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


def fold_rows(pooled: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """Per fold of pooled_predictions.csv: ``n`` test answers, the ``grades`` its model gave, ``constant`` (one
    grade for every test answer), ``top_grade`` and ``top_share``, T-Acc and QWK with 95 % bootstrap CIs, and the
    fold's majority class (its grade, T-Acc and QWK with CIs)."""
    rows = []
    for fold, g in pooled.groupby("fold", sort=True):
        t, p = g["grade_true"].to_numpy(), g["grade"].to_numpy()
        values, counts = np.unique(p, return_counts=True)
        row: dict[str, Any] = {"fold": int(str(fold)), "n": len(g), "grades": [int(v) for v in values],
                               "constant": len(values) == 1, "top_grade": int(values[np.argmax(counts)]),
                               "top_share": float(counts.max() / len(p))}
        for m in ("t_acc", "qwk"):
            row[m] = bootstrap_ci(t, p, m, n_boot, seed)
        if "majority" in g:
            maj = g["majority"].to_numpy()
            row["majority_grade"] = int(np.bincount(maj - maj.min()).argmax() + maj.min())
            for m in ("t_acc", "qwk"):
                row[f"majority_{m}"] = bootstrap_ci(t, maj, m, n_boot, seed)
        rows.append(row)
    return rows


def pooled_table(pooled: pd.DataFrame, metrics: list[str], baselines: list[str], n_boot: int = 1000,
                 seed: int = 0) -> list[dict[str, Any]]:
    """Per metric (BOOTSTRAP_METRICS names): the model's value with its 95 % bootstrap CI (``model``), each baseline
    column's (``<name>``), and for each baseline the paired bootstrap difference model − baseline (``vs_<name>``:
    diff, lo, hi, p_not_better: :func:`rubrictool.evaluate.paired_bootstrap`) over the same answers."""
    t, p = pooled["grade_true"].to_numpy(), pooled["grade"].to_numpy()
    rows = []
    for m in metrics:
        if m not in BOOTSTRAP_METRICS:
            continue
        row: dict[str, Any] = {"metric": m, "model": bootstrap_ci(t, p, m, n_boot, seed)}
        for b in baselines:
            bp = pooled[b].to_numpy()
            row[b] = bootstrap_ci(t, bp, m, n_boot, seed)
            row[f"vs_{b}"] = paired_bootstrap(t, bp, p, m, n_boot, seed)  # model − baseline
        rows.append(row)
    return rows


def training_text(summary: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """What the folds trained with, in words: variant, preset, encoder (trained or frozen, per fold when they
    differ) and backbone, from folds.json and a fold's config.yaml."""
    from rubrictool.train.runs import trained_with

    used = [str(e) for e in summary.get("encoder") or []]
    if used and len(set(used)) == 1:
        encoder = {"frozen": "encoder frozen in every fold (only the heads trained)",
                   "train": "encoder trained (fine-tuned) in every fold"}.get(used[0], f"encoder {used[0]}")
    elif used:
        encoder = "encoder " + ", ".join(f"fold {i}: {'frozen' if e == 'frozen' else 'trained'}"
                                         for i, e in enumerate(used))
    else:
        encoder = "encoder: not recorded"
    backbone = ((config or {}).get("model") or {}).get("backbone") or summary.get("backbone")
    recipe = trained_with(config) if config else f"{summary.get('preset') or 'custom'} preset"
    return (f"{summary.get('variant')}, {recipe}; {encoder}; backbone "
            f"{backbone or 'all-MiniLM-L6-v2 (the default)'}")
