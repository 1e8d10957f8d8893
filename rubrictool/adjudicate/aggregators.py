"""Consensus per (item, concept): the decision grid, majority vote (ordinal tie rule), Dawid-Skene and resolutions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.agreement import (
    LabelCube,
    ordinal_vote,
)
from rubrictool.errors import AdjudicateError
from rubrictool.tables import (
    REVIEW_COLUMNS,
)

__all__ = [
    "FORMATS",
    "METHODS",
    "DawidSkeneVote",
    "DecisionGrid",
    "MajorityVote",
    "apply_resolutions",
]


METHODS = ("majority", "dawid-skene")
FORMATS = ("csv", "jsonl", "parquet")

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_DECISION_COLUMNS = [
    "item",
    "concept",
    "level",
    "vote",
    "n_reviewers",
    "unanimous",
    "tied",
    "flagged",
    "rule",
    "resolved",
    "note",
    "decided_by",
]




@dataclass
class DecisionGrid:
    """One decision per (item, concept) as ``(N, K)`` arrays aligned with a :class:`LabelCube`.

    ``level`` is the decided level, ``vote`` the majority vote, ``n`` the reviews behind it (0 = no
    decision: the other arrays are meaningless there), ``rule`` how it was reached (single,
    unanimous, majority, tie-lower, tie-median, tie-lower-median, dawid-skene, resolved).
    """

    cube: LabelCube
    level: IntArray
    vote: IntArray
    n: IntArray
    unanimous: BoolArray
    tied: BoolArray
    rule: npt.NDArray[np.object_]
    resolved: BoolArray
    note: npt.NDArray[np.object_]
    decided_by: npt.NDArray[np.object_]

    @property
    def flagged(self) -> BoolArray:
        """Every decision that was not unanimous (ties, majorities, single reviews) — resolved or not."""
        return np.asarray(~self.unanimous & (self.n > 0))

    @classmethod
    def build(
        cls, cube: LabelCube, counts: IntArray, level_idx: IntArray, method_rule: str | None = None
    ) -> DecisionGrid:
        """From value counts ``(N, K, V)`` and the chosen level index per (item, concept)."""
        n = counts.sum(axis=-1)
        top = counts.max(axis=-1)
        vote_idx, tied = ordinal_vote(counts)
        unanimous = (top == n) & (n >= 2)
        n_modes = (counts == top[..., None]).sum(axis=-1)
        rule = np.select(
            [n == 1, unanimous, ~tied, n_modes == 2, n_modes % 2 == 1],
            ["single", "unanimous", "majority", "tie-lower", "tie-median"],
            default="tie-lower-median",
        ).astype(object)
        dom = cube.domain
        level = dom[np.maximum(level_idx, 0)]
        vote = dom[np.maximum(vote_idx, 0)]
        if method_rule is not None:
            rule[level != vote] = method_rule
        empty = np.full(n.shape, None, dtype=object)
        return cls(cube, level, vote, n, unanimous, tied, rule, np.zeros(n.shape, bool), empty, empty.copy())

    def frame(self) -> pd.DataFrame:
        """The decisions table: one row per (item, concept) with at least one review."""
        ii, kk = np.nonzero(self.n > 0)
        cols: dict[str, Any] = {
            "item": self.cube.items.to_numpy(dtype=object)[ii],
            "concept": np.asarray(self.cube.concepts, dtype=object)[kk],
        }
        for col in _DECISION_COLUMNS[2:]:  # the grid's arrays, named as the table's columns
            cols[col] = getattr(self, "n" if col == "n_reviewers" else col)[ii, kk]
        return pd.DataFrame(cols)


def _check_columns(reviews: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in REVIEW_COLUMNS if c not in reviews.columns]
    if missing:
        raise AdjudicateError(
            f"reviews: missing column(s) {', '.join(missing)}; expected item, reviewer, concept, level"
        )
    if len(reviews) == 0:
        raise AdjudicateError("reviews: no reviews (empty input)")
    return reviews[REVIEW_COLUMNS]


@dataclass
class _Consensus:
    """What every consensus aggregator shares: tidy reviews in, ``decisions_``/``labels_`` out."""

    domain: Sequence[int] = (1, 2, 3)
    """The ordered level values of the rubric scale."""

    grid_: DecisionGrid = field(init=False)
    """The same decisions as arrays aligned with the label cube."""

    def fit(self, reviews: pd.DataFrame) -> Self:
        data = _check_columns(reviews)
        return self.fit_cube(LabelCube.from_reviews(data, list(pd.unique(data["concept"])), self.domain))

    def fit_cube(self, cube: LabelCube) -> Self:
        raise NotImplementedError

    @property
    def decisions_(self) -> pd.DataFrame:
        """One row per (item, concept): level, vote, n_reviewers, unanimous, tied, flagged, rule, ..."""
        return self.grid_.frame()

    @property
    def labels_(self) -> pd.Series:
        """Consensus level, indexed by (item, concept)."""
        return self.decisions_.set_index(["item", "concept"])["level"].rename("level")

    def fit_predict(self, reviews: pd.DataFrame) -> pd.Series:
        return self.fit(reviews).labels_


@dataclass
class MajorityVote(_Consensus):
    """Majority vote per item and concept with the ordinal tie rule of :func:`ordinal_vote`.

    Ties: the median of the tied most-frequent levels, the lower middle one when their number is
    even — three reviewers who all differ → the median; two who disagree → the lower level, the
    rubric's "choose the lower-supported level". Every non-unanimous case is flagged.
    """

    def fit_cube(self, cube: LabelCube) -> Self:
        counts = cube.counts()
        idx, _ = ordinal_vote(counts)
        self.grid_ = DecisionGrid.build(cube, counts, idx)
        return self


@dataclass
class DawidSkeneVote(_Consensus):
    """Dawid & Skene (1979) consensus, one model per concept, fitted by crowd-kit's ``DawidSkene``.

    Each reviewer gets a confusion matrix per concept, estimated by EM together with the true
    levels; the consensus is the most probable level. ``decisions_`` keeps the majority vote in
    ``vote`` and flags as :class:`MajorityVote` does; ``changed_`` counts labels that differ from
    it. A. P. Dawid, A. M. Skene, "Maximum Likelihood Estimation of Observer Error-Rates Using the
    EM Algorithm", JRSS C 28(1), 1979, doi:10.2307/2346806.
    """

    n_iter: int = 100
    """EM iterations at most (crowd-kit's default)."""
    tol: float = 1e-5
    """Stop when the log-likelihood improves less than this."""

    changed_: int = field(init=False)
    """How many (item, concept) labels differ from the majority vote."""

    def fit_cube(self, cube: LabelCube) -> Self:
        from crowdkit.aggregation import DawidSkene  # crowd-kit imports torch: loaded only for this method

        counts = cube.counts()
        idx, _ = ordinal_vote(counts)
        ds_idx = idx.copy()
        for k in range(len(cube.concepts)):
            ii, rr = np.nonzero(~np.isnan(cube.levels[:, k, :]))
            data = pd.DataFrame(
                {"task": ii, "worker": rr, "label": cube.levels[ii, k, rr].astype(np.int64)}
            )  # crowd-kit's tidy input: task, worker, label
            labels = DawidSkene(n_iter=self.n_iter, tol=self.tol).fit_predict(data)
            rows = labels.index.to_numpy(dtype=np.int64)
            ds_idx[rows, k] = np.searchsorted(cube.domain, labels.to_numpy(dtype=np.int64))
        self.grid_ = DecisionGrid.build(cube, counts, ds_idx, method_rule="dawid-skene")
        self.changed_ = int(((self.grid_.level != self.grid_.vote) & (self.grid_.n > 0)).sum())
        return self


def apply_resolutions(
    grid: DecisionGrid, resolutions: pd.DataFrame, source: str = "resolutions"
) -> DecisionGrid:
    """A copy of ``grid`` with expert resolutions (``item, concept, level, note, decided_by``) applied:
    their level replaces the decision, ``rule`` becomes ``resolved`` and note/decider are kept."""
    dup = resolutions.duplicated(["item", "concept"], keep=False)
    if dup.any():
        r = resolutions.loc[dup].iloc[0]
        raise AdjudicateError(
            f"{source}: item {r['item']} / {r['concept']} is resolved more than once; keep one decision"
        )
    ii = grid.cube.items.get_indexer(pd.Index(resolutions["item"].astype(str)))
    kk = pd.Index(grid.cube.concepts).get_indexer(pd.Index(resolutions["concept"]))
    ok = (ii >= 0) & (kk >= 0)
    ok[ok] = grid.n[ii[ok], kk[ok]] > 0
    if not ok.all():
        r = resolutions.loc[~ok].iloc[0]
        raise AdjudicateError(
            f"{source}: item {r['item']} / concept {r['concept']} has no reviews to resolve "
            f"({int((~ok).sum())} such row(s)); check the item id"
        )
    out = DecisionGrid(
        grid.cube,
        grid.level.copy(),
        grid.vote,
        grid.n,
        grid.unanimous,
        grid.tied,
        grid.rule.copy(),
        grid.resolved.copy(),
        grid.note.copy(),
        grid.decided_by.copy(),
    )
    out.level[ii, kk] = resolutions["level"].to_numpy(dtype=np.int64)
    out.rule[ii, kk] = "resolved"
    out.resolved[ii, kk] = True
    out.note[ii, kk] = resolutions["note"].to_numpy(dtype=object)
    out.decided_by[ii, kk] = resolutions["decided_by"].to_numpy(dtype=object)
    return out
