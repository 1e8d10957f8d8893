"""The figures of ``agreement.json``: per concept, per model, of the grades, of the decisions, and the document."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.adjudicate.aggregators import DecisionGrid
from rubrictool.adjudicate.outputs import QUEUE_RULES, parse_queue_rule
from rubrictool.agreement import LabelCube, grade_agreement, predictions_vs_consensus
from rubrictool.rubric import Rubric

__all__ = [
    "Figures",
    "agreement_json",
    "concept_figures",
    "decision_summary",
    "grade_figures",
    "grader_columns",
    "llm_figures",
    "nan_to_none",
]


def nan_to_none(obj: Any) -> Any:
    """``obj`` made JSON-ready: NumPy scalars as Python ones, NaN as None, keys as strings."""
    if isinstance(obj, dict):
        return {str(k): nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nan_to_none(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return None if math.isnan(float(obj)) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def grader_columns(items: pd.DataFrame) -> list[str]:
    """The ``grade_*`` columns of ``items`` that hold at least one number."""
    cols = [c for c in items.columns if str(c).startswith("grade_")]
    return [c for c in cols if pd.to_numeric(items[c], errors="coerce").notna().any()]


def concept_figures(
    rubric: Rubric,
    grid: DecisionGrid,
    per_concept: pd.DataFrame,
    pairs: pd.DataFrame,
    loo: pd.DataFrame,
    dawid_skene: bool = False,
) -> dict[str, Any]:
    """``agreement.json``'s ``concepts``: per concept α, CI, exact, counts, flags, pairs, reviewers."""
    concepts: dict[str, Any] = {}
    for key in rubric.keys:
        pc: dict[str, Any] = {str(c): v for c, v in per_concept.loc[key].items()}
        k = grid.cube.concepts.index(key)
        has = grid.n[:, k] > 0
        vs = loo.loc[loo["concept"] == key].set_index("reviewer")
        ranked = vs["alpha"].dropna().sort_values()
        distinct = len(ranked) >= 2 and ranked.iloc[0] != ranked.iloc[-1]
        concepts[key] = {
            "name": rubric.concept(key).name,
            "alpha": pc["alpha"],
            "alpha_ci": [pc["alpha_lo"], pc["alpha_hi"]],
            "exact": pc["exact"],
            "n_items": int(pc["n_items"]),
            "n_pairable": int(pc["n_pairable"]),
            "n_reviewers": int(pc["n_reviewers"]),
            "n_labels": int(pc["n_labels"]),
            "unanimous": pc["unanimous"],
            "flagged": int(grid.flagged[:, k].sum()),
            "tied": int((grid.tied[:, k] & has).sum()),
            "resolved": int(grid.resolved[:, k].sum()),
            "pairwise": pairs.loc[pairs["concept"] == key].drop(columns="concept").to_dict(orient="records"),
            "vs_others": {
                str(r): {"alpha": v["alpha"], "exact": v["exact"], "n_items": int(v["n_items"])}
                for r, v in vs.iterrows()
            },
            "best_reviewer": str(ranked.index[-1]) if distinct else None,
            "worst_reviewer": str(ranked.index[0]) if distinct else None,
        }
        if dawid_skene:
            concepts[key]["dawid_skene_changed"] = int(
                ((grid.level[:, k] != grid.vote[:, k]) & has & ~grid.resolved[:, k]).sum()
            )
    return concepts


def llm_figures(
    predictions: Sequence[pd.DataFrame], consensus: pd.DataFrame, domain: list[int], measurement: str
) -> dict[str, Any]:
    """``agreement.json``'s ``llm_vs_consensus``: per model and concept α, exact, confusion matrix."""
    llm: dict[str, Any] = {}
    for preds in predictions:
        for _, r in predictions_vs_consensus(preds, consensus, domain, measurement).iterrows():
            llm.setdefault(r["model"], {})[r["concept"]] = {
                "alpha": r["alpha"],
                "exact": r["exact"],
                "n_items": int(r["n_items"]),
                "confusion": {
                    "rows": "consensus level",
                    "columns": "predicted level",
                    "levels": domain,
                    "matrix": r["confusion"],
                },
            }
    return llm


def grade_figures(
    table: pd.DataFrame, items: pd.DataFrame | None, n_boot: int, seed: int
) -> dict[str, Any]:
    """``agreement.json``'s ``grade``: the agreement of the items table's grader columns, when two or more."""
    grade: dict[str, Any] = {"available": False}
    if items is not None:
        cols = grader_columns(table)
        if len(cols) >= 2:
            grade = {"available": True, **grade_agreement(table, cols, "interval", n_boot, seed)}
    return grade


def decision_summary(
    decisions: pd.DataFrame, method: str, changed: int | None, queue: str, queued: npt.NDArray[np.bool_]
) -> dict[str, Any]:
    """``agreement.json``'s ``adjudication``: decision counts and the discussion queue's rule and size."""
    return {
        "method": method,
        "n_decisions": len(decisions),
        "unanimous": int(decisions["unanimous"].sum()),
        "flagged": int(decisions["flagged"].sum()),
        "tied": int(decisions["tied"].sum()),
        "resolved": int(decisions["resolved"].astype(bool).sum()),
        "dawid_skene_changed": changed,
        "queue": {
            "rule": queue,
            "means": " or ".join(QUEUE_RULES[p] for p in parse_queue_rule(queue)) + " (and every resolved case)",
            "n_cases": int(queued.sum()),
            "n_items": int(queued.any(axis=1).sum()),
        },
    }


@dataclass
class Figures:
    """What ``agreement.json`` reports beside the run's settings (built by :func:`adjudicate`)."""

    cube: LabelCube
    reviewed: npt.NDArray[np.bool_]
    label_source: str
    reviewer_sources: dict[Any, str]
    unreviewed: dict[str, Any]
    expected: int
    under: list[str]
    unlabelled: list[str]
    concepts: dict[str, Any]
    adjudication: dict[str, Any]
    llm: dict[str, Any]
    grade: dict[str, Any]
    coverage: dict[str, Any]


def agreement_json(
    rubric: Rubric, measurement: str, method: str, n_boot: int, seed: int, note: str | None,
    skipped: dict[str, dict[str, int]] | None, items_given: bool, f: Figures,
) -> dict[str, Any]:
    """The ``agreement.json`` document (NaN not yet turned into null)."""
    return {
        "rubric": rubric.name,
        "level_of_measurement": measurement,
        "method": method,
        "bootstrap": {
            "n": n_boot,
            "seed": seed,
            "resampled": "items with >= 2 reviews of the concept",
            "ci": "percentile 95%",
        },
        "tie_rule": "median of the tied most-frequent levels; the lower middle one when their number is even "
        "(3 reviewers all different -> median; 2 disagreeing -> lower level)",
        "note": note,
        "label_source": f.label_source,
        "reviewers": f.cube.reviewers,
        "reviewer_sources": f.reviewer_sources,
        "skipped_predictions": skipped or {},
        "unreviewed": f.unreviewed,
        "n_items": len(f.cube.items),
        "n_labels": int(f.cube.n_reviews().sum()),
        "expected_reviewers": int(f.expected),
        "under_reviewed": {"n_items": len(f.under), "items": f.under[:100]},
        "items_without_reviews": int((~f.reviewed).sum()),
        "unlabelled": {
            "n_items": len(f.unlabelled),
            "items": f.unlabelled[:1000],
            "note": "items of --items without any valid label (no review, every model's reply failed): kept in the "
            "adjudicated table with empty concept columns and method 'unlabelled'; train skips them",
        },
        "items_given": items_given,
        "concepts": f.concepts,
        "adjudication": f.adjudication,
        "llm_vs_consensus": f.llm,
        "grade": f.grade,
        "coverage": f.coverage,
    }

