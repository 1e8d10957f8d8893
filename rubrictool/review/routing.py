"""Routing: which items go to full review when the budget covers only some of them.

``review push --select uncertain|disagreement|random --budget N`` sends N items to the reviewers:

- ``uncertain``: the items the trained grader is least sure about (its per-item ``uncertainty``,
  :func:`rubrictool.review_queue.uncertainty_score`: mean level entropy, σ_k²-weighted with LCEC);
- ``disagreement``: the items where the pre-annotations (LLM models, the grader) disagree most —
  per concept, the share of models that did not give the most frequent level, summed over concepts;
- ``random``: a uniform sample, the baseline.

Ties (and ``random``) are broken by a permutation drawn from ``seed``, so a selection is the same
for the same inputs and seed. The rest of the items are labelled by the pre-annotations' consensus
in ``rubrictool adjudicate --pre-annotations`` (marked, and in no agreement figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rubrictool.errors import ReviewError

__all__ = ["SELECTIONS", "Routing", "disagreement_scores", "route", "uncertainty_scores"]

SELECTIONS = ("uncertain", "disagreement", "random")


def disagreement_scores(predictions: pd.DataFrame) -> pd.Series:
    """Per item: Σ over concepts of (1 − share of models giving the most frequent level).

    ``predictions`` is a PredictionTable's usable rows (``item, model, concept, level``). 0 when all
    models agree (or only one labelled the item); higher the more models are outvoted, on more concepts.
    """
    df = predictions[["item", "model", "concept", "level"]].astype({"item": str, "level": "int64"})
    counts = df.groupby(["item", "concept", "level"]).size()  # models per (item, concept, level)
    top = counts.groupby(level=["item", "concept"]).max()
    n = counts.groupby(level=["item", "concept"]).sum()
    per_concept = 1.0 - top / n
    return per_concept.groupby(level="item").sum().rename("disagreement")


def uncertainty_scores(predictions: pd.DataFrame) -> pd.Series:
    """Per item: the grader's ``uncertainty`` column (:func:`rubrictool.grade.grader_predictions`); the
    highest when several models carry one."""
    if "uncertainty" not in predictions.columns or predictions["uncertainty"].isna().all():
        raise ReviewError(
            "--select uncertain needs the grader's uncertainty, and no prediction carries one",
            hint="pass --run RUN (a trained run) so its level entropy ranks the items",
        )
    rows = predictions.dropna(subset=["uncertainty"]).astype({"item": str})
    return rows.groupby("item")["uncertainty"].max().rename("uncertainty")


@dataclass
class Routing:
    """One selection: the chosen items and, per item, its score and rank."""

    how: str
    budget: int
    seed: int
    table: pd.DataFrame  # item, score, rank (1 = first to review), selected

    @property
    def selected(self) -> list[str]:
        return [str(i) for i in self.table.loc[self.table["selected"], "item"]]


def route(
    items: Sequence[str], predictions: pd.DataFrame | None, how: str, budget: int, seed: int = 0
) -> Routing:
    """Pick ``budget`` of ``items`` for review by ``how`` (see the module doc); deterministic for ``seed``.

    Every item is ranked (the routing table keeps them all); an item with no score for the chosen
    signal (no prediction) ranks last under ``disagreement`` and is an error under ``uncertain``.
    """
    if how not in SELECTIONS:
        raise ReviewError(f"unknown selection {how!r}; use {', '.join(SELECTIONS)}")
    if budget < 1:
        raise ReviewError(f"the budget must be at least 1 item (got {budget})", hint="set --budget N")
    ids = pd.Index([str(i) for i in items], dtype=object)
    if ids.has_duplicates:
        raise ReviewError("routing: duplicate item ids")
    tiebreak = np.random.default_rng(seed).permutation(len(ids))  # (N,) a seeded order among equals
    if how == "random":
        score = np.zeros(len(ids))
    else:
        if predictions is None or len(predictions) == 0:
            raise ReviewError(f"--select {how} needs pre-annotations", hint="pass --predictions and/or --run")
        if how == "disagreement" and predictions["model"].nunique() < 2:
            raise ReviewError("--select disagreement needs two or more pre-annotation models to disagree",
                              hint="pass a prediction table with several models (--predictions) and/or --run")
        s = uncertainty_scores(predictions) if how == "uncertain" else disagreement_scores(predictions)
        got = s.reindex(ids)
        if how == "uncertain" and got.isna().any():
            missing = ids[got.isna().to_numpy()]
            raise ReviewError(f"no grader uncertainty for {len(missing)} item(s) (e.g. {missing[0]})",
                              hint="grade every pushed item: pass the same --items to --run")
        score = got.fillna(-1.0).to_numpy(dtype=float)
    order = np.lexsort((tiebreak, -score))  # by score descending, then the seeded permutation
    rank = np.empty(len(ids), dtype=np.int64)
    rank[order] = np.arange(1, len(ids) + 1)
    table = pd.DataFrame({"item": ids.to_numpy(dtype=object), "score": np.where(score < 0, np.nan, score),
                          "rank": rank, "selected": rank <= budget})
    return Routing(how, budget, seed, table.sort_values("rank").reset_index(drop=True))
