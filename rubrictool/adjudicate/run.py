"""The whole run: validate, agreement figures, decisions, outputs (:func:`adjudicate`, :func:`run_adjudicate`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import yaml

from rubrictool.adjudicate.aggregators import (
    FORMATS,
    METHODS,
    DawidSkeneVote,
    DecisionGrid,
    MajorityVote,
    apply_resolutions,
)
from rubrictool.adjudicate.figures import (
    Figures,
    agreement_json,
    concept_figures,
    decision_summary,
    grade_figures,
    llm_figures,
    nan_to_none,
)
from rubrictool.adjudicate.inputs import (
    llm_labels,
    pre_annotation_labels,
    read_resolutions,
    read_review_files,
)
from rubrictool.adjudicate.outputs import (
    DEFAULT_QUEUE,
    discussion_queue,
    fill_unreviewed,
    keep_unlabelled,
    parse_queue_rule,
    queue_markdown,
    queue_mask,
    training_table,
)
from rubrictool.agreement import (
    LEVELS_OF_MEASUREMENT,
    LabelCube,
    concept_agreement,
    pairwise_agreement,
    reviewer_vs_others,
    rubric_coverage,
)
from rubrictool.data import load_benchmark, load_concept_passes
from rubrictool.errors import AdjudicateError, DataError
from rubrictool.io import atomic_write_text, read_table, write_table
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import (
    LLM_PASSES_NOTE,
    PREDICTION_COLUMNS,
    validate_items,
    validate_reviews,
)
from rubrictool.votes import attach_votes

__all__ = [
    "AdjudicationOptions",
    "AdjudicationResult",
    "adjudicate",
    "adjudicate_benchmark_labels",
    "run_adjudicate",
    "write_outputs",
]


@dataclass(frozen=True)
class AdjudicationOptions:
    """How the labels are decided and the agreement measured: a command's adjudication options, built once."""

    method: str = "majority"  # METHODS: majority vote (the ordinal tie rule) or Dawid-Skene
    measurement: str = "ordinal"  # Krippendorff's α level of measurement (LEVELS_OF_MEASUREMENT)
    n_boot: int = 1000  # bootstrap replicates of each CI (0: no CI)
    seed: int = 0  # the bootstrap's seed
    expected_reviewers: int | None = None  # reviewers each item should have (None: as many as there are)
    coverage: bool = True  # the rubric coverage figure (a small grade model per fold): False skips it
    queue: str = DEFAULT_QUEUE  # which decisions go to the discussion queue (QUEUE_RULES, comma-joined)


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
    disagreements: pd.DataFrame | None = None
    """Every non-unanimous decision in the queue's layout (``--queue all``), whatever ``queue`` selects:
    the reviewers' level pairs that ``rubric diagnose`` counts."""
    rubric: Rubric | None = None
    """The rubric the labels follow: written beside them as ``rubric.yaml`` (``rubric diagnose`` and ``train``
    find it there)."""


def _split_sources(reviews: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Human reviews, and the LLM / model rows when both exist (those are compared with the human
    consensus); otherwise everything is a review (e.g. a panel of LLMs as the reviewers)."""
    src = reviews["source"]
    human = src == "human"
    if human.any() and (~human).any():
        llm = reviews.loc[~human].copy()
        llm["model"] = llm["model"].fillna(llm["reviewer"]) if "model" in llm.columns else llm["reviewer"]
        return reviews.loc[human].reset_index(drop=True), llm[PREDICTION_COLUMNS[:4]]
    return reviews, None


def _one_source(values: Sequence[str]) -> str:
    srcs = sorted({str(x) for x in values})
    return srcs[0] if len(srcs) == 1 else "mixed"


def _pre_annotation_grid(
    pre: pd.DataFrame, reviewed: pd.DataFrame, rubric: Rubric, order: npt.NDArray[np.object_] | None
) -> tuple[DecisionGrid, str] | None:
    """Majority vote (ordinal tie rule) of the pre-annotations over the (item, concept) pairs no reviewer
    labelled — of the items table when given, else of the items the pre-annotations cover."""
    seen = pd.MultiIndex.from_frame(reviewed[["item", "concept"]].astype(str))
    keys = pd.MultiIndex.from_frame(pre[["item", "concept"]].astype(str))
    todo = pre.loc[~keys.isin(seen)]
    if order is not None:
        todo = todo.loc[todo["item"].astype(str).isin(set(order.tolist()))]
    if len(todo) == 0:
        return None
    rows = todo.rename(columns={"model": "reviewer"})
    present = set(rows["item"].astype(str))
    ids = [i for i in order.tolist() if i in present] if order is not None else None
    cube = LabelCube.from_reviews(rows.astype({"item": str}), rubric.keys, rubric.scale.values, ids)
    return MajorityVote(rubric.scale.values).fit_cube(cube).grid_, _one_source(rows["source"].tolist())


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


def _check_options(queue: str, method: str, measurement: str) -> None:
    """Fail on a bad queue rule, method or level of measurement before any work."""
    parse_queue_rule(queue)
    if method not in METHODS:
        raise AdjudicateError(f"unknown method {method!r}; use {' or '.join(METHODS)}")
    if measurement not in LEVELS_OF_MEASUREMENT:
        raise AdjudicateError(
            f"unknown level of measurement {measurement!r}; use {', '.join(LEVELS_OF_MEASUREMENT)}"
        )


def _check_items(reviews: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """The validated items table; fails when a review names an item it lacks."""
    items = validate_items(items, "items")
    unknown = ~reviews["item"].isin(items["id"].astype(str))
    if unknown.any():
        ids = pd.unique(reviews.loc[unknown, "item"])
        shown = ", ".join(map(str, ids[:5])) + (" ..." if len(ids) > 5 else "")
        raise AdjudicateError(
            f"reviews mention {len(ids)} item id(s) not in the items table ({shown}); "
            "check that the reviews and --items come from the same data"
        )
    return items


def _reviewed_cube(
    reviews: pd.DataFrame, rubric: Rubric, order: npt.NDArray[np.object_] | None
) -> tuple[LabelCube, npt.NDArray[np.bool_]]:
    """The label cube of the reviewed items only (items-table order), and which items of the order were reviewed."""
    cube = LabelCube.from_reviews(reviews, rubric.keys, rubric.scale.values, order)
    reviewed = cube.n_reviews().sum(axis=1) > 0
    if not reviewed.all():
        cube = LabelCube(
            cube.items[reviewed], cube.concepts, cube.reviewers, cube.domain, cube.levels[reviewed]
        )
    return cube, reviewed


def _consensus(
    cube: LabelCube, dom: list[int], method: str, resolutions: pd.DataFrame | None
) -> tuple[DecisionGrid, int | None]:
    """The decision grid of ``method`` with the expert resolutions applied, and Dawid-Skene's changed count."""
    changed: int | None = None
    if method == "majority":
        grid = MajorityVote(dom).fit_cube(cube).grid_
    else:
        ds = DawidSkeneVote(dom).fit_cube(cube)
        grid, changed = ds.grid_, ds.changed_
    if resolutions is not None and len(resolutions):
        grid = apply_resolutions(grid, resolutions)
    return grid, changed


def _fill_unreviewed_labels(
    table: pd.DataFrame,
    decisions: pd.DataFrame,
    pre_annotations: pd.DataFrame | None,
    reviews: pd.DataFrame,
    rubric: Rubric,
    order: npt.NDArray[np.object_] | None,
    items: pd.DataFrame | None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Label what no reviewer labelled by the pre-annotations' vote: the table, decisions and their summary."""
    unreviewed: dict[str, Any] = {"n_items": 0, "n_labels": 0, "models": [], "source": None}
    if pre_annotations is not None and len(pre_annotations):
        filled = _pre_annotation_grid(pre_annotations, reviews, rubric, order)
        if filled is not None:
            pre_grid, pre_source = filled
            table = fill_unreviewed(table, pre_grid, rubric, pre_source, items)
            extra = pre_grid.frame().assign(source=pre_source, reviewed=False,
                                            rule="pre-annotation " + pre_grid.frame()["rule"])
            decisions = pd.concat([decisions, extra], ignore_index=True)
            unreviewed = {
                "n_items": int((table["n_reviewers"] == 0).sum()),
                "n_labels": len(extra),
                "models": sorted(str(m) for m in pre_annotations["model"].unique()),
                "source": pre_source,
            }
    unreviewed["note"] = (
        "labels no reviewer saw: the majority vote of the pre-annotations; they are in no agreement figure"
    )
    return table, decisions, unreviewed


def _reviewer_agreement(
    cube: LabelCube, measurement: str, n_boot: int, seed: int, clock: _Clock
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per concept α with its bootstrap, every pair of reviewers, and each reviewer against the others (timed)."""
    per_concept = concept_agreement(cube, measurement, n_boot, seed)
    clock.lap("alpha+bootstrap")
    pairs = pairwise_agreement(cube, measurement)
    clock.lap("pairwise")
    loo = reviewer_vs_others(cube, measurement)
    clock.lap("leave-one-out")
    return per_concept, pairs, loo


def _unlabelled_and_under(
    table: pd.DataFrame, items: pd.DataFrame | None, rubric: Rubric, expected: int
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The table with the items of ``items`` no label reached kept (unlabelled), those items, and the items with
    fewer than ``expected`` reviewers."""
    unlabelled: list[str] = []
    if items is not None:  # an item without any label (every reply failed) stays, unlabelled, and is listed
        table, unlabelled = keep_unlabelled(table, items, rubric)
    under = table.loc[table["n_reviewers"].to_numpy() < expected, "id"].astype(str).tolist()
    return table, unlabelled, under


def adjudicate(
    reviews: pd.DataFrame,
    rubric: Rubric,
    items: pd.DataFrame | None = None,
    predictions: pd.DataFrame | None = None,
    resolutions: pd.DataFrame | None = None,
    options: AdjudicationOptions = AdjudicationOptions(),
    *,
    note: str | None = None,
    timings: dict[str, float] | None = None,
    pre_annotations: pd.DataFrame | None = None,
    skipped: dict[str, dict[str, int]] | None = None,
) -> AdjudicationResult:
    """Validate reviews, compute every agreement figure, decide each label, build the outputs.

    ``reviews`` is a ReviewTable (validated here against ``rubric``); ``items`` an ItemTable (review
    item ids must all be in it); ``predictions`` a PredictionTable of LLM labels to compare with the
    consensus; ``resolutions`` expert decisions that override the vote. ``pre_annotations``
    (``item, model, concept, level, source``, see :func:`pre_annotation_labels`) label what no reviewer
    labelled — every item of ``items`` — by their majority vote; those labels are marked (decisions
    ``reviewed`` false, ``source``; the table's ``unreviewed_concepts``) and never enter an α. ``skipped``
    counts the failed labels of prediction tables read as reviewers (reported in agreement.json).
    ``timings``, when given, receives the seconds each stage took. ``options``: the method, the agreement
    figures' settings and the discussion queue's rule (:class:`AdjudicationOptions`).
    """
    o = options
    method, measurement, n_boot, seed, queue = o.method, o.measurement, o.n_boot, o.seed, o.queue
    _check_options(queue, method, measurement)
    clock = _Clock(timings)
    reviews = validate_reviews(reviews, rubric)
    reviewer_sources = reviews.drop_duplicates("reviewer").set_index("reviewer")["source"].astype(str).to_dict()
    reviews, llm_rows = _split_sources(reviews)
    if items is not None:
        items = _check_items(reviews, items)
    dom = rubric.scale.values
    order = items["id"].astype(str).to_numpy(dtype=object) if items is not None else None
    clock.lap("validate")
    cube, reviewed = _reviewed_cube(reviews, rubric, order)
    expected = o.expected_reviewers or len(cube.reviewers)
    clock.lap("cube")
    grid, changed = _consensus(cube, dom, method, resolutions)
    decisions = grid.frame()
    clock.lap("consensus")
    per_concept, pairs, loo = _reviewer_agreement(cube, measurement, n_boot, seed, clock)
    label_source = _one_source(reviews["source"].unique().tolist())
    table = training_table(grid, rubric, method, items, label_source)
    decisions = decisions.assign(source=label_source, reviewed=True)
    table, decisions, unreviewed = _fill_unreviewed_labels(table, decisions, pre_annotations, reviews, rubric, order,
                                                           items)
    table, unlabelled, under = _unlabelled_and_under(table, items, rubric, expected)
    table = attach_votes(table, reviews, rubric)  # each reviewer's level beside the decision: soft targets
    concepts = concept_figures(rubric, grid, per_concept, pairs, loo, dawid_skene=changed is not None)
    queued = queue_mask(grid, queue)
    for k, key in enumerate(cube.concepts):
        concepts[key]["queued"] = int(queued[:, k].sum())
    clock.lap("table+summary")
    consensus = decisions.loc[decisions["reviewed"], ["item", "concept", "level"]]
    llm = llm_figures(
        [p for p in (predictions, llm_rows) if p is not None and len(p)], consensus, dom, measurement
    )
    clock.lap("llm")
    grade = grade_figures(table, items, n_boot, seed)
    clock.lap("grade")
    cov = (rubric_coverage(table, rubric.keys, dom, "grade", 5, seed) if o.coverage
           else {"available": False, "reason": "skipped"})
    clock.lap("coverage")
    figures = Figures(cube, reviewed, label_source, reviewer_sources, unreviewed, expected, under, unlabelled,
                       concepts, decision_summary(decisions, method, changed, queue, queued), llm, grade, cov)
    agreement = agreement_json(rubric, measurement, method, n_boot, seed, note, skipped, items is not None, figures)
    queue_table = discussion_queue(grid, rubric, items, queue)
    clock.lap("queue")
    result = AdjudicationResult(table, decisions, queue_table, nan_to_none(agreement), cube.reviewers)
    result.rubric = rubric
    result.markdown = queue_markdown(queue_table, cube.reviewers, rubric, note, queue)
    result.disagreements = queue_table if queue == "all" else discussion_queue(grid, rubric, items, "all")
    clock.lap("markdown")
    return result


def write_outputs(result: AdjudicationResult, out: str | Path, fmt: str = "csv") -> dict[str, Path]:
    """Write ``adjudicated.<fmt>``, ``decisions.<fmt>``, ``discussion_queue.csv``, ``discussion_queue.md``,
    ``disagreements.csv`` (every non-unanimous case, for ``rubric diagnose``) and ``agreement.json`` into
    ``out`` (each atomically)."""
    if fmt not in FORMATS:
        raise AdjudicateError(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    d = Path(out)
    if d.exists() and not d.is_dir():
        raise AdjudicateError(f"{d}: exists and is not a folder", hint="pass a folder for the outputs to --out")
    paths: dict[str, Path] = {}
    current = d
    try:  # each file atomically: a failed write leaves that file as it was (absent or the previous run's)
        d.mkdir(parents=True, exist_ok=True)
        for key, frame, name in (("table", result.table, f"adjudicated.{fmt}"),
                                 ("decisions", result.decisions, f"decisions.{fmt}"),
                                 ("queue", result.queue, "discussion_queue.csv"),
                                 ("disagreements", result.disagreements, "disagreements.csv")):
            if frame is not None:
                current = d / name
                paths[key] = write_table(frame, current, for_people=True)  # opened in spreadsheets
        if result.rubric is not None:  # the rubric the labels follow, as written, so the folder needs no --rubric later
            current = d / "rubric.yaml"
            atomic_write_text(current, result.rubric.source_text or yaml.safe_dump(
                result.rubric.model_dump(mode="json", exclude_none=True), sort_keys=False, allow_unicode=True))
            paths["rubric"] = current
        current = d / "discussion_queue.md"
        atomic_write_text(current, result.markdown)
        current = d / "agreement.json"
        atomic_write_text(current, json.dumps(result.agreement, indent=1, ensure_ascii=False) + "\n")
    except OSError as e:
        done = ", ".join(p.name for p in paths.values()) or "nothing"
        raise AdjudicateError(f"{current}: cannot write it ({e.strerror or e}); written before it: {done} (the rest "
                              "is as it was)", hint="free space or pass another folder to --out, then re-run") from None
    paths["markdown"] = d / "discussion_queue.md"
    paths["agreement"] = d / "agreement.json"
    result.paths = paths
    return paths


def _benchmark_inputs(
    benchmark: str, data_dir: str | Path | None, with_items: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The concept-label passes of a benchmark (from the data directory) and (unless ``with_items`` is false) its
    items."""
    if benchmark != "mohler":
        raise AdjudicateError(
            f"no bundled concept labels for benchmark {benchmark!r}; only mohler ships them",
            hint=f"pass the reviewers' files with --reviews (or --from-label-studio) to adjudicate {benchmark}",
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
    out: str | Path = "adjudicated",
    fmt: str = "csv",
    pre_annotations: Sequence[str | Path] = (),
    options: AdjudicationOptions = AdjudicationOptions(),
) -> AdjudicationResult:
    """Read the inputs (files and/or a benchmark), adjudicate, write the outputs to ``out``.

    ``--benchmark NAME`` supplies the benchmark's items (mohler, asap2, mocha) for the review files;
    for Mohler without review files, the three LLM concept-label passes in ``<data dir>/mohler-concepts``
    are the reviews.
    A prediction table among ``reviews`` is a panel (each model a reviewer). ``pre_annotations``
    (prediction tables) label, by their majority vote, every item and concept no reviewer labelled
    (see :func:`adjudicate`); ``options`` as :func:`adjudicate`'s.
    """
    if rubric is None and benchmark is None:
        raise AdjudicateError("no rubric", hint="pass --rubric NAME|FILE (or --benchmark mohler)")
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric or str(benchmark))
    note = None
    item_table: pd.DataFrame | None = None
    if benchmark is not None and reviews:  # the reviewers' labels, the benchmark's items (any benchmark)
        item_table = load_benchmark(benchmark, data_dir)
    elif benchmark is not None:  # Mohler's bundled concept-label passes stand in for the reviews
        passes, item_table = _benchmark_inputs(benchmark, data_dir)
        review_table, note = passes, LLM_PASSES_NOTE
    skipped: dict[str, dict[str, int]] = {}
    if reviews:
        read = read_review_files(reviews)
        review_table, skipped = read.table, read.skipped
    elif benchmark is None:
        raise AdjudicateError("no reviews", hint="pass --reviews FILE (repeatable) or --benchmark mohler")
    if items is not None:
        try:
            item_table = read_table(items)
        except DataError as e:
            raise AdjudicateError(f"item table: {e}", hint="check --items") from None
        item_table = validate_items(item_table, str(items))
    preds = llm_labels(predictions, rb) if predictions is not None else None
    res = read_resolutions(resolutions, rb) if resolutions is not None else None
    pre = pre_annotation_labels(pre_annotations, rb) if pre_annotations else None
    if note is None and (review_table["source"].astype(str).str.lower() != "human").all():
        note = ("Every review in this run comes from an LLM or a trained model (source llm/model): the labels are "
                "not expert-validated.")
    result = adjudicate(review_table, rb, item_table, preds, res, options, note=note, pre_annotations=pre,
                        skipped=skipped)
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
        passes, load_rubric(benchmark), items, options=AdjudicationOptions(n_boot=0, coverage=False),
        note=LLM_PASSES_NOTE,
    ).table
