"""Each answer's reviewers' levels beside the adjudicated one: soft concept targets (``stage1.soft_targets``).

An AdjudicatedTable may carry, after its own columns, one ``votes_<KEY>`` column per concept: the levels every
reviewer gave that answer's concept, space-separated (``"2 3 3"``). :func:`attach_votes` adds them from tidy labels
(``item, reviewer, concept, level``: what :func:`rubrictool.tables.read_wide_labels` and the benchmark passes give);
:func:`soft_targets` turns them into the share of reviewers per level, (N, K, M+1), what Stage I mixes into its
concept target. A cell left empty counts as the adjudicated level alone, and so does a concept whose decision was
resolved (the table's ``resolved_concepts``): the resolver's level replaces the reviewers' disagreement there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from rubrictool.errors import TrainError
from rubrictool.rubric import Rubric

__all__ = ["VOTES_PREFIX", "attach_votes", "has_votes", "soft_targets"]

VOTES_PREFIX = "votes_"


def attach_votes(table: pd.DataFrame, labels: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """``table`` with a ``votes_<KEY>`` column per concept from tidy ``labels`` (item, reviewer, concept, level)."""
    out = table.copy()
    lab = labels[labels["concept"].isin(rubric.keys) & labels["level"].notna()]
    lab = lab.assign(item=lab["item"].astype(str)).sort_values(["item", "concept", "reviewer"])
    joined = lab.groupby(["item", "concept"])["level"].agg(lambda s: " ".join(str(int(v)) for v in s))
    for key in rubric.keys:
        per_item = joined.xs(key, level="concept") if key in joined.index.get_level_values("concept") else pd.Series()
        out[f"{VOTES_PREFIX}{key}"] = out["id"].astype(str).map(per_item).fillna("")
    return out


def has_votes(df: pd.DataFrame, rubric: Rubric) -> bool:
    """Whether ``df`` carries a ``votes_<KEY>`` column for every concept."""
    return all(f"{VOTES_PREFIX}{k}" in df.columns for k in rubric.keys)


def soft_targets(df: pd.DataFrame, rubric: Rubric) -> NDArray[Any]:
    """(N, K, M+1) float32: per answer and concept the share of reviewers per level (0-based). ``df`` is a validated
    table (``_c_<KEY>`` columns: the adjudicated 0-based level, used where a cell is empty and where the concept is
    among the row's ``resolved_concepts``)."""
    lo, n_levels = rubric.scale.min, rubric.scale.max - rubric.scale.min + 1
    out = np.zeros((len(df), len(rubric.keys), n_levels), dtype=np.float32)
    resolved = _resolved(df)
    for k, key in enumerate(rubric.keys):
        col = f"{VOTES_PREFIX}{key}"
        cells = df[col].fillna("").astype(str).tolist()
        adjudicated = df[f"_c_{key}"].to_numpy()
        for i, cell in enumerate(cells):
            if key in resolved[i]:
                out[i, k, int(adjudicated[i])] = 1.0
                continue
            try:
                levels = [int(float(v)) - lo for v in cell.split()]
            except ValueError:
                raise TrainError(f"column {col}, row {i + 1}: {cell!r} is not space-separated levels",
                                 hint=f"write the reviewers' levels of {key} as e.g. '2 3 3'") from None
            bad = [v + lo for v in levels if not 0 <= v < n_levels]
            if bad:
                raise TrainError(f"column {col}, row {i + 1}: level {bad[0]} is outside the rubric's scale "
                                 f"{rubric.scale.min}..{rubric.scale.max}")
            for v in levels or [int(adjudicated[i])]:
                out[i, k, v] += 1
            out[i, k] /= out[i, k].sum()
    return out


def _resolved(df: pd.DataFrame) -> list[set[str]]:
    """Per row, the concepts whose decision a resolver set (``resolved_concepts``: comma-joined keys; none when the
    table has no such column)."""
    if "resolved_concepts" not in df.columns:
        return [set() for _ in range(len(df))]
    return [{k.strip() for k in str(v).split(",") if k.strip()} if isinstance(v, str) else set()
            for v in df["resolved_concepts"].tolist()]
