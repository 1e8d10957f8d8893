"""Adjudication: reviews in, one consensus level per item and concept out, with every figure of
agreement, a discussion queue of the contested cases and the training table the trainer reads.

Input is a tidy ReviewTable ``item, reviewer, concept, level`` (optional ``source`` = human|llm and
``model``; other columns are ignored) read from long CSV/JSONL/Parquet files, from one wide file
per reviewer (``id, FC, CC, ...``; reviewer = file stem unless given as ``NAME=PATH``), or both.

Consensus is :class:`MajorityVote` (the ordinal tie rule of
:func:`rubrictool.agreement.ordinal_vote`) or :class:`DawidSkeneVote` (crowd-kit's Dawid–Skene, one
model per concept). Expert decisions from a resolutions file override either, and are recorded.

When a review table holds both human reviews and LLM rows (``source`` = llm), the consensus is
built from the human reviews only and the LLM rows are compared with it like ``--predictions``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd

from rubrictool.agreement import (
    LEVELS_OF_MEASUREMENT,
    LabelCube,
    concept_agreement,
    grade_agreement,
    ordinal_vote,
    pairwise_agreement,
    predictions_vs_consensus,
    reviewer_vs_others,
    rubric_coverage,
)
from rubrictool.data import load_benchmark, load_concept_passes
from rubrictool.errors import AdjudicateError, DataError
from rubrictool.io import read_table, write_table
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import (
    ADJUDICATED_PROVENANCE,
    ITEM_COLUMNS,
    LLM_PASSES_NOTE,
    PREDICTION_COLUMNS,
    REVIEW_COLUMNS,
    read_predictions,
    read_wide_labels,
    validate_items,
    validate_reviews,
)

__all__ = [
    "FORMATS",
    "METHODS",
    "AdjudicationResult",
    "DawidSkeneVote",
    "DecisionGrid",
    "MajorityVote",
    "adjudicate",
    "adjudicate_benchmark_labels",
    "apply_resolutions",
    "discussion_queue",
    "llm_labels",
    "queue_markdown",
    "read_resolutions",
    "read_reviews",
    "run_adjudicate",
    "training_table",
    "write_outputs",
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


# -- reading and validating reviews --------------------------------------------------------------------------


def _split_spec(spec: str | Path) -> tuple[str | None, Path]:
    """``NAME=PATH`` → (NAME, PATH); a plain path → (None, path)."""
    text = str(spec)
    if "=" in text and not Path(text).exists():
        name, _, path = text.partition("=")
        if name.strip() and path.strip():
            return name.strip(), Path(path.strip())
    return None, Path(text)


def read_reviews(specs: Sequence[str | Path], source: str = "human") -> pd.DataFrame:
    """Read review files into one tidy ReviewTable (not yet validated against a rubric).

    A file with the columns ``item, reviewer, concept, level`` is long; a file with ``id`` (or
    ``item``) and one column per concept is one reviewer's wide export, the reviewer named by the
    file stem or by ``NAME=PATH``. ``source`` fills a missing ``source`` column.
    """
    if not specs:
        raise AdjudicateError("no reviews given; pass --reviews FILE (long or wide), or --benchmark mohler")
    frames = []
    for spec in specs:
        name, path = _split_spec(spec)
        if not path.is_file():
            raise AdjudicateError(
                f"reviews file {path}: no such file; check the path (wide files: NAME=PATH)"
            )
        df = read_table(path)
        if len(df) == 0:
            raise AdjudicateError(f"{path}: the reviews file is empty")
        if {"item", "reviewer", "concept", "level"} <= set(df.columns):
            if name is not None:
                raise AdjudicateError(
                    f"{spec}: NAME=PATH names the reviewer of a WIDE file; {path} is long (has a reviewer column)"
                )
            df = df.copy()
            df["_where"] = [f"{path}:row {i + 2 if path.suffix == '.csv' else i + 1}" for i in range(len(df))]
        elif "id" in df.columns or "item" in df.columns:
            if "concept" in df.columns or "level" in df.columns:
                missing = [c for c in REVIEW_COLUMNS if c not in df.columns]
                raise AdjudicateError(
                    f"{path}: missing column(s) {', '.join(missing)}; a long review table needs item, reviewer, "
                    f"concept, level (found {', '.join(map(str, df.columns))})"
                )
            df = read_wide_labels(path, reviewer=name or path.stem, source=source)
            df["_where"] = [f"{path}:item {i}" for i in df["item"]]
        else:
            raise AdjudicateError(
                f"{path}: neither a long review table (item, reviewer, concept, level) nor a wide one "
                f"(id, <concept>...); found columns {', '.join(map(str, df.columns))}"
            )
        if "source" not in df.columns:
            df["source"] = source
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def llm_labels(path: str | Path, rubric: Rubric) -> pd.DataFrame:
    """The usable rows of a PredictionTable (``raw_ok`` with a level) as ``item, model, concept, level``,
    checked like reviews (one label per item, model and concept), to compare with the consensus."""
    df = read_predictions(path, rubric, valid_only=True)
    if len(df) == 0:
        raise AdjudicateError(f"{path}: no usable predictions (every row failed or has no level)")
    out = validate_reviews(df.assign(reviewer=df["model"], source="llm"), rubric, str(path))
    return out.assign(model=out["reviewer"])[PREDICTION_COLUMNS[:4]]


def read_resolutions(path: str | Path, rubric: Rubric) -> pd.DataFrame:
    """Expert decisions: ``item, concept, level[, note, decided_by]``.

    A filled-in discussion queue works too: its rows with a value in ``resolution`` are read, the
    ``resolution`` column taken as the level.
    """
    p = Path(path)
    if not p.is_file():
        raise AdjudicateError(f"resolutions file {p}: no such file; check the path")
    df = read_table(p)
    if "resolution" in df.columns:
        df = df.loc[df["resolution"].notna() & df["resolution"].astype(str).str.strip().ne("")].copy()
        df["level"] = df["resolution"]
    missing = [c for c in ("item", "concept", "level") if c not in df.columns]
    if missing:
        raise AdjudicateError(
            f"{p}: missing column(s) {', '.join(missing)}; a resolutions file needs item, concept, level "
            f"(+ note, decided_by); found {', '.join(map(str, df.columns))}"
        )
    df = df.copy()
    df["_where"] = [f"{p}:row {i + 2 if p.suffix == '.csv' else i + 1}" for i in df.index]
    checked = validate_reviews(df.assign(reviewer="resolution"), rubric, str(p))
    out = checked[["item", "concept", "level"]].copy()
    for col in ("note", "decided_by"):
        vals = df[col] if col in df.columns else pd.Series([None] * len(df))
        out[col] = [None if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v) for v in vals]
    return out


# -- consensus -----------------------------------------------------------------------------------------------


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


# -- outputs -------------------------------------------------------------------------------------------------


def _joined_keys(mask: BoolArray, keys: Sequence[str]) -> npt.NDArray[np.object_]:
    """Per row of an (N, K) boolean mask, the comma-joined keys where it holds ("" when none)."""
    out: npt.NDArray[np.object_] = np.full(mask.shape[0], "", dtype=object)
    for k, key in enumerate(keys):
        out = np.asarray(np.where(mask[:, k], out + (key + ","), out), dtype=object)
    return np.asarray(pd.Series(out, dtype=object).str.rstrip(",").to_numpy(dtype=object))


def training_table(
    grid: DecisionGrid,
    rubric: Rubric,
    method: str,
    items: pd.DataFrame | None = None,
    label_source: str = "human",
) -> pd.DataFrame:
    """The AdjudicatedTable: ItemTable columns, one integer column per concept, grade, provenance.

    Provenance per item: ``n_reviewers`` (distinct reviewers of the item), ``unanimous`` (every
    concept unanimous), ``n_flagged`` / ``flagged_concepts``, ``n_resolved`` / ``resolved_concepts``,
    ``method`` and ``label_source`` (human, llm or mixed). Items without any review are left out;
    a concept nobody reviewed for an item is missing (<NA>).
    """
    cube = grid.cube
    keys = cube.concepts
    has = grid.n > 0
    body = pd.DataFrame({"id": cube.items.to_numpy(dtype=object).astype(str)})
    for k, key in enumerate(keys):
        body[key] = pd.array(np.where(has[:, k], grid.level[:, k], 0), dtype="Int64")
        if not has[:, k].all():
            body.loc[~has[:, k], key] = pd.NA
    body["n_reviewers"] = (~np.isnan(cube.levels)).any(axis=1).sum(axis=1).astype(np.int64)
    body["unanimous"] = np.asarray((grid.unanimous | ~has).all(axis=1))
    body["n_flagged"] = grid.flagged.sum(axis=1).astype(np.int64)
    body["flagged_concepts"] = _joined_keys(grid.flagged, keys)
    body["n_resolved"] = grid.resolved.sum(axis=1).astype(np.int64)
    body["resolved_concepts"] = _joined_keys(grid.resolved, keys)
    body["method"] = method
    body["label_source"] = label_source
    body = body.loc[np.asarray(has.any(axis=1))].reset_index(drop=True)
    prov = ADJUDICATED_PROVENANCE
    if items is None:
        for col in reversed(ITEM_COLUMNS[1:]):
            body.insert(1, col, None)
        return body
    it = items.copy()
    it["id"] = it["id"].astype(str)
    for col in ITEM_COLUMNS:
        if col not in it.columns:
            it[col] = None
    extra = [c for c in it.columns if c not in ITEM_COLUMNS and c not in body.columns]
    merged = it[ITEM_COLUMNS + extra].merge(body, on="id", how="inner")
    return merged[ITEM_COLUMNS + list(keys) + prov + extra].reset_index(drop=True)


def discussion_queue(grid: DecisionGrid, rubric: Rubric, items: pd.DataFrame | None = None) -> pd.DataFrame:
    """The flagged (item, concept) cases, one row each, with every reviewer's level and the anchors.

    Columns: item, concept, concept_name, status (open/resolved), level (decided), vote, rule,
    n_reviewers, one column per reviewer, anchors (of the levels given), question/response/reference
    when the items are known, and empty ``resolution`` plus ``note, decided_by`` for experts to fill
    in — the filled file is accepted by ``--resolutions``.
    """
    cube = grid.cube
    ii, kk = np.nonzero(grid.flagged | grid.resolved)
    given = cube.levels[ii, kk, :]  # (F, R)
    names = {c.key: c.name for c in rubric.concepts}
    concept = np.asarray(cube.concepts, dtype=object)[kk]
    q = pd.DataFrame(
        {
            "item": cube.items.to_numpy(dtype=object)[ii],
            "concept": concept,
            "concept_name": pd.Series(concept, dtype=object).map(names).to_numpy(),
            "status": np.where(grid.resolved[ii, kk], "resolved", "open"),
            "level": grid.level[ii, kk],
            "vote": grid.vote[ii, kk],
            "rule": grid.rule[ii, kk],
            "n_reviewers": grid.n[ii, kk],
        }
    )
    for r, name in enumerate(cube.reviewers):
        q[name] = pd.array(given[:, r], dtype="Float64").astype("Int64")
    # anchors of the levels given: look up (concept, set of levels given as a bit mask)
    dom = cube.domain
    V = len(dom)
    present = (given[:, :, None] == dom[None, None, :]).any(axis=1)  # (F, V)
    mask = present.astype(np.int64) @ (1 << np.arange(V, dtype=np.int64))  # (F,)
    lookup = np.empty(len(cube.concepts) << V, dtype=object)
    for k, key in enumerate(cube.concepts):
        c = rubric.concept(key)
        for m in range(1 << V):
            lookup[(k << V) + m] = " | ".join(
                f"{int(v)}: {c.anchor(int(v))}" for j, v in enumerate(dom) if m >> j & 1
            )
    q["anchors"] = lookup[(kk << V) + mask]
    if items is not None:
        text = items.assign(id=items["id"].astype(str)).set_index("id")
        for col in ("question", "response", "reference"):
            q[col] = text[col].reindex(q["item"]).to_numpy() if col in text.columns else None
    q["resolution"] = None
    q["note"] = grid.note[ii, kk]
    q["decided_by"] = grid.decided_by[ii, kk]
    return q


def queue_markdown(
    queue: pd.DataFrame, reviewers: Sequence[str], rubric: Rubric, note: str | None = None
) -> str:
    """A readable Markdown report of the discussion queue, one section per item (in queue order)."""
    n_open = int((queue["status"] == "open").sum()) if len(queue) else 0
    lines = [
        f"# Discussion queue — rubric {rubric.name}",
        "",
        (
            f"{len(queue)} flagged item × concept case(s) over {queue['item'].nunique() if len(queue) else 0} "
            f"item(s): {n_open} open, {len(queue) - n_open} resolved."
        ),
        (
            "Resolve a case by writing its level into the `resolution` column of `discussion_queue.csv` "
            "(or a file `item, concept, level, note, decided_by`) and re-running with `--resolutions FILE`."
        ),
        "",
    ]
    if note:
        lines += [f"> {note}", ""]
    if len(queue) == 0:
        return "\n".join(lines + ["Nothing to discuss: every label is unanimous."]) + "\n"

    def col(name: str) -> npt.NDArray[np.object_]:
        c = queue[name]
        if pd.api.types.is_integer_dtype(c.dtype) and not c.isna().any():
            return np.asarray(c.to_numpy(dtype=np.int64).astype(str), dtype=object)
        return np.asarray(c.astype(object).where(c.notna(), "").to_numpy(dtype=object))

    given = []
    for name in reviewers:
        lv = queue[name].to_numpy(dtype=float, na_value=np.nan)
        given.append(np.where(np.isnan(lv), "·", np.nan_to_num(lv).astype(np.int64).astype(str)))
    cells = [" | ".join(t) for t in zip(*given, strict=True)] if given else [""] * len(queue)
    anchors = [a.replace("|", "/") for a in col("anchors")]
    rows = [
        f"| {c} ({cn}) | {g} | {lv} | {ru} | {st} | {an} |"
        for c, cn, g, lv, ru, st, an in zip(
            col("concept"),
            col("concept_name"),
            cells,
            col("level"),
            col("rule"),
            col("status"),
            anchors,
            strict=True,
        )
    ]  # text rendering: one formatted line per flagged case
    texts = [
        col(name) if name in queue.columns else np.full(len(queue), "", dtype=object)
        for name in ("question", "reference", "response")
    ]
    header = (
        "| concept | "
        + " | ".join(reviewers)
        + " | decided | rule | status | anchors in question |\n|"
        + "---|" * (len(reviewers) + 5)
    )
    items = queue["item"].to_numpy(dtype=object)
    first = np.ones(len(items), dtype=bool)
    first[1:] = items[1:] != items[:-1]
    body: list[str] = []
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(items))
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        head = [f"\n## Item {items[a]}\n"]
        head += [
            f"**{lab}:** {t[a]}  "
            for lab, t in zip(("Question", "Reference", "Response"), texts, strict=True)
            if t[a]
        ]
        body.append("\n".join(head) + "\n\n" + header + "\n" + "\n".join(rows[a:b]))
    return "\n".join(lines) + "\n".join(body) + "\n"


# -- the whole run -------------------------------------------------------------------------------------------


@dataclass
class AdjudicationResult:
    """Everything one adjudication produced (and, after :func:`write_outputs`, where it went)."""

    table: pd.DataFrame
    decisions: pd.DataFrame
    queue: pd.DataFrame
    agreement: dict[str, Any]
    reviewers: list[str]
    markdown: str = ""
    paths: dict[str, Path] = field(default_factory=dict)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return None if math.isnan(float(obj)) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def _split_sources(reviews: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Human reviews and LLM rows when both exist; otherwise everything is a review."""
    src = reviews["source"]
    if (src == "human").any() and (src == "llm").any():
        llm = reviews.loc[src == "llm"].copy()
        llm["model"] = llm["model"].fillna(llm["reviewer"]) if "model" in llm.columns else llm["reviewer"]
        return reviews.loc[src == "human"].reset_index(drop=True), llm[PREDICTION_COLUMNS[:4]]
    return reviews, None


class _Clock:
    """Stage timings for the benchmark: ``lap(name)`` records the seconds since the previous lap."""

    def __init__(self, out: dict[str, float] | None) -> None:
        self.out, self.t = (
            out,
            time.process_time() if os.environ.get("RUBRICTOOL_CPU_CLOCK") else time.perf_counter(),
        )

    def lap(self, name: str) -> None:
        now = time.process_time() if os.environ.get("RUBRICTOOL_CPU_CLOCK") else time.perf_counter()
        if self.out is not None:
            self.out[name] = self.out.get(name, 0.0) + now - self.t
        self.t = now


def _grader_columns(items: pd.DataFrame) -> list[str]:
    cols = [c for c in items.columns if str(c).startswith("grade_")]
    return [c for c in cols if pd.to_numeric(items[c], errors="coerce").notna().any()]


def _concept_figures(
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


def _llm_figures(
    predictions: Sequence[pd.DataFrame], consensus: pd.DataFrame, domain: list[int], level: str
) -> dict[str, Any]:
    """``agreement.json``'s ``llm_vs_consensus``: per model and concept α, exact, confusion matrix."""
    llm: dict[str, Any] = {}
    for preds in predictions:
        for _, r in predictions_vs_consensus(preds, consensus, domain, level).iterrows():
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


def adjudicate(
    reviews: pd.DataFrame,
    rubric: Rubric,
    items: pd.DataFrame | None = None,
    predictions: pd.DataFrame | None = None,
    resolutions: pd.DataFrame | None = None,
    method: str = "majority",
    level: str = "ordinal",
    n_boot: int = 1000,
    seed: int = 0,
    expected_reviewers: int | None = None,
    coverage: bool = True,
    note: str | None = None,
    timings: dict[str, float] | None = None,
) -> AdjudicationResult:
    """Validate reviews, compute every agreement figure, decide each label, build the outputs.

    ``reviews`` is a ReviewTable (validated here against ``rubric``); ``items`` an ItemTable (review
    item ids must all be in it); ``predictions`` a PredictionTable of LLM labels to compare with the
    consensus; ``resolutions`` expert decisions that override the vote. ``timings``, when given,
    receives the seconds each stage took.
    """
    if method not in METHODS:
        raise AdjudicateError(f"unknown method {method!r}; use {' or '.join(METHODS)}")
    if level not in LEVELS_OF_MEASUREMENT:
        raise AdjudicateError(
            f"unknown level of measurement {level!r}; use {', '.join(LEVELS_OF_MEASUREMENT)}"
        )
    clock = _Clock(timings)
    reviews = validate_reviews(reviews, rubric)
    reviews, llm_rows = _split_sources(reviews)
    if items is not None:
        items = validate_items(items, "items")
        unknown = ~reviews["item"].isin(items["id"].astype(str))
        if unknown.any():
            ids = pd.unique(reviews.loc[unknown, "item"])
            shown = ", ".join(map(str, ids[:5])) + (" ..." if len(ids) > 5 else "")
            raise AdjudicateError(
                f"reviews mention {len(ids)} item id(s) not in the items table ({shown}); "
                "check that the reviews and --items come from the same data"
            )
    dom = rubric.scale.values
    order = items["id"].astype(str).to_numpy(dtype=object) if items is not None else None
    clock.lap("validate")
    cube = LabelCube.from_reviews(reviews, rubric.keys, dom, order)
    reviewed = cube.n_reviews().sum(axis=1) > 0
    if not reviewed.all():  # keep only reviewed items in the cube (items-table order)
        cube = LabelCube(
            cube.items[reviewed], cube.concepts, cube.reviewers, cube.domain, cube.levels[reviewed]
        )
    expected = expected_reviewers or len(cube.reviewers)

    clock.lap("cube")
    # 1) consensus
    changed: int | None = None
    if method == "majority":
        grid = MajorityVote(dom).fit_cube(cube).grid_
    else:
        ds = DawidSkeneVote(dom).fit_cube(cube)
        grid, changed = ds.grid_, ds.changed_
    if resolutions is not None and len(resolutions):
        grid = apply_resolutions(grid, resolutions)
    decisions = grid.frame()

    clock.lap("consensus")
    # 2) agreement
    per_concept = concept_agreement(cube, level, n_boot, seed)
    clock.lap("alpha+bootstrap")
    pairs = pairwise_agreement(cube, level)
    clock.lap("pairwise")
    loo = reviewer_vs_others(cube, level)
    clock.lap("leave-one-out")
    srcs = sorted(str(x) for x in reviews["source"].unique())
    label_source = srcs[0] if len(srcs) == 1 else "mixed"
    table = training_table(grid, rubric, method, items, label_source)
    n_rev_item = table["n_reviewers"].to_numpy()
    under = table.loc[n_rev_item < expected, "id"].astype(str).tolist()
    concepts = _concept_figures(rubric, grid, per_concept, pairs, loo, dawid_skene=changed is not None)
    clock.lap("table+summary")
    consensus = decisions[["item", "concept", "level"]]
    llm = _llm_figures(
        [p for p in (predictions, llm_rows) if p is not None and len(p)], consensus, dom, level
    )
    clock.lap("llm")
    grade: dict[str, Any] = {"available": False}
    if items is not None:
        cols = _grader_columns(table)
        if len(cols) >= 2:
            grade = {"available": True, **grade_agreement(table, cols, "interval", n_boot, seed)}
    clock.lap("grade")
    cov = (
        rubric_coverage(table, rubric.keys, dom, "grade", 5, seed)
        if coverage
        else {"available": False, "reason": "skipped"}
    )
    clock.lap("coverage")
    agreement = {
        "rubric": rubric.name,
        "level_of_measurement": level,
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
        "label_source": label_source,
        "reviewers": cube.reviewers,
        "n_items": len(cube.items),
        "n_labels": int(cube.n_reviews().sum()),
        "expected_reviewers": int(expected),
        "under_reviewed": {"n_items": len(under), "items": under[:100]},
        "items_without_reviews": int((~reviewed).sum()),
        "concepts": concepts,
        "adjudication": {
            "method": method,
            "n_decisions": len(decisions),
            "unanimous": int(decisions["unanimous"].sum()),
            "flagged": int(decisions["flagged"].sum()),
            "tied": int(decisions["tied"].sum()),
            "resolved": int(decisions["resolved"].astype(bool).sum()),
            "dawid_skene_changed": changed,
        },
        "llm_vs_consensus": llm,
        "grade": grade,
        "coverage": cov,
    }
    queue = discussion_queue(grid, rubric, items)
    clock.lap("queue")
    result = AdjudicationResult(table, decisions, queue, _nan_to_none(agreement), cube.reviewers)
    result.markdown = queue_markdown(queue, cube.reviewers, rubric, note)
    clock.lap("markdown")
    return result


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_outputs(result: AdjudicationResult, out: str | Path, fmt: str = "csv") -> dict[str, Path]:
    """Write ``adjudicated.<fmt>``, ``decisions.<fmt>``, ``discussion_queue.csv``, ``discussion_queue.md``
    and ``agreement.json`` into ``out`` (each atomically)."""
    if fmt not in FORMATS:
        raise AdjudicateError(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    d = Path(out)
    if d.exists() and not d.is_dir():
        raise AdjudicateError(f"--out {d}: exists and is not a folder; pass a folder for the outputs")
    paths = {
        "table": write_table(result.table, d / f"adjudicated.{fmt}"),
        "decisions": write_table(result.decisions, d / f"decisions.{fmt}"),
        "queue": write_table(result.queue, d / "discussion_queue.csv"),
    }
    _write_text(d / "discussion_queue.md", result.markdown)
    _write_text(d / "agreement.json", json.dumps(result.agreement, indent=1, ensure_ascii=False) + "\n")
    paths["markdown"] = d / "discussion_queue.md"
    paths["agreement"] = d / "agreement.json"
    result.paths = paths
    return paths


def _benchmark_inputs(
    benchmark: str, data_dir: str | Path | None, with_items: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The concept-label passes of a benchmark (from the data directory) and (unless ``with_items`` is false) its items."""
    if benchmark != "mohler":
        raise AdjudicateError(
            f"no bundled concept labels for benchmark {benchmark!r}; only mohler ships them"
        )
    return load_concept_passes(data_dir), load_benchmark(benchmark, data_dir) if with_items else None


def run_adjudicate(
    *,
    rubric: str | Path | Rubric | None = None,
    reviews: Sequence[str | Path] = (),
    benchmark: str | None = None,
    items: str | Path | None = None,
    data_dir: str | Path | None = None,
    predictions: str | Path | None = None,
    resolutions: str | Path | None = None,
    method: str = "majority",
    level: str = "ordinal",
    out: str | Path = "adjudicated",
    fmt: str = "csv",
    n_boot: int = 1000,
    seed: int = 0,
    expected_reviewers: int | None = None,
) -> AdjudicationResult:
    """Read the inputs (files and/or a benchmark), adjudicate, write the outputs to ``out``.

    ``--benchmark mohler`` supplies the Mohler items and, unless review files are given, the three
    LLM concept-label passes in ``<data dir>/mohler-concepts``.
    """
    if rubric is None and benchmark is None:
        raise AdjudicateError("no rubric; pass --rubric NAME|FILE (or --benchmark mohler)")
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric or str(benchmark))
    note = None
    item_table: pd.DataFrame | None = None
    if benchmark is not None:
        passes, item_table = _benchmark_inputs(benchmark, data_dir)
        if not reviews:
            review_table, note = passes, LLM_PASSES_NOTE
    if reviews:
        review_table = read_reviews(reviews)
    elif benchmark is None:
        raise AdjudicateError("no reviews; pass --reviews FILE (repeatable) or --benchmark mohler")
    if items is not None:
        try:
            item_table = read_table(items)
        except DataError as e:
            raise AdjudicateError(f"--items: {e}") from None
        item_table = validate_items(item_table, str(items))
    preds = llm_labels(predictions, rb) if predictions is not None else None
    res = read_resolutions(resolutions, rb) if resolutions is not None else None
    if note is None and (review_table["source"].astype(str) == "llm").all():
        note = "Every review in this run comes from an LLM (source=llm): the labels are not expert-validated."
    result = adjudicate(
        review_table, rb, item_table, preds, res, method, level, n_boot, seed, expected_reviewers, note=note
    )
    write_outputs(result, out, fmt)
    return result


def adjudicate_benchmark_labels(
    benchmark: str = "mohler", items: pd.DataFrame | None = None, data_dir: str | Path | None = None
) -> pd.DataFrame:
    """The adjudicated training table of a benchmark from its concept-label passes (data directory).

    For Mohler: majority vote (ordinal tie rule) over the three LLM annotation passes A, B, C —
    NOT expert-validated — joined to ``items`` (default: :func:`rubrictool.data.load_mohler`).
    Columns: ItemTable columns, one integer column per concept, provenance. No bootstrap or
    coverage is computed (use :func:`adjudicate` for those).
    """
    if items is None:
        passes, items = _benchmark_inputs(benchmark, data_dir)
    else:
        passes, _ = _benchmark_inputs(benchmark, data_dir, with_items=False)
    return adjudicate(
        passes, load_rubric(benchmark), items, n_boot=0, coverage=False, note=LLM_PASSES_NOTE
    ).table
