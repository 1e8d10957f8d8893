"""Runs that span stages: a benchmark's concept-label passes adjudicated and trained on, the one rule for what a
command trains on (:func:`resolve_data`: a benchmark, or an adjudicated table with its rubric and agreement), and the
``rubrictool train`` entry point that picks a split or k folds.

The training stage (:mod:`rubrictool.train`) takes an adjudicated table; the adjudication stage
(:mod:`rubrictool.adjudicate`) makes one. This module sits above both, so neither imports the other.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.adjudicate import AdjudicationOptions, adjudicate
from rubrictool.adjudicate.outputs import trainable_rows
from rubrictool.data import group_split_items, load_benchmark, load_concept_passes, load_split, split_items
from rubrictool.errors import TrainError
from rubrictool.io import read_table
from rubrictool.locks import writer_lock
from rubrictool.outputs import check_output
from rubrictool.progress import ProgressFn, warn
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import LLM_PASSES_NOTE, check_ids
from rubrictool.train import DataRecord, TrainOptions, TrainResult, train_folds, train_model

__all__ = ["DataSource", "SplitPlan", "benchmark_provenance", "benchmark_table", "resolve_data", "run_train",
           "train_on"]


def benchmark_table(benchmark: str, data_dir: str | Path | None = None) -> tuple[Rubric, pd.DataFrame, dict[str, Any]]:
    """(rubric, adjudicated table, agreement) of a benchmark with concept-label passes (Mohler): the items
    from the data directory, concept labels by majority vote over the three LLM annotation passes, each pass's level
    kept in the table's ``votes_<KEY>`` columns (soft targets, :mod:`rubrictool.votes`)."""
    if benchmark != "mohler":
        raise TrainError(f"no concept-label passes for benchmark {benchmark!r}",
                         hint="pass an adjudicated table with --table and its rubric with --rubric")
    rb = load_rubric(benchmark)
    items = load_benchmark(benchmark, data_dir)
    # α's bootstrap CI for the reliability table and the report: 200 resamples take about 0.2 s on Mohler's 2,273 items
    adj = adjudicate(load_concept_passes(data_dir), rb, items,
                     options=AdjudicationOptions(n_boot=200, coverage=False), note=LLM_PASSES_NOTE)
    return rb, adj.table, adj.agreement


def benchmark_provenance(benchmark: str) -> dict[str, Any]:
    """train_model's ``table_source`` and ``labels`` for a benchmark trained on its bundled concept-label passes."""
    return {"table_source": {"benchmark": benchmark},
            "labels": {"source": "llm", "expert_validated": False, "benchmark": benchmark, "passes": ["A", "B", "C"],
                       "detail": LLM_PASSES_NOTE}}


@dataclass(frozen=True)
class DataSource:
    """The data a command trains on, resolved once from its options (:func:`resolve_data`)."""

    name: str  # the benchmark, or the table file's stem (a run's default folder is runs/<name>-<variant>)
    rubric: Rubric
    table: pd.DataFrame  # the adjudicated table, unlabelled rows left out
    agreement: dict[str, Any] | Path | None  # a benchmark's agreement, or agreement.json (given, or beside the table)
    notes: list[str]  # what every run on it records: the benchmark's label passes, the rows left out
    # run.json's record of where the table came from: {"benchmark": NAME} or {"path": FILE}
    table_source: dict[str, Any]
    labels: dict[str, Any] | None = None  # who made the labels (None: each run reads agreement.json and the table)
    path: Path | None = None  # the table file (None for a benchmark)

    def record(self) -> DataRecord:
        """What every run on this data records about it (:class:`rubrictool.train.DataRecord`)."""
        return DataRecord(self.agreement, self.notes, self.table_source, self.labels)


@dataclass(frozen=True)
class SplitPlan:
    """How ``train`` measures a run: one split (given, or drawn) or k fold runs, and how the folds train."""

    split: str | Path | None = None  # a split.json (one run); None: a split drawn with seed, or k folds
    seed: int = 0  # the drawn split's seed, or the folds'
    folds: int = 0  # k fold runs (0: one run)
    by: str | None = None  # the split or the folds grouped by this column (e.g. question)
    jobs: int = 1  # fold runs in that many worker processes
    final: bool = False  # with folds, the final model on every labelled answer too


def resolve_data(
    *,
    benchmark: str | None,
    data: str | Path | None,
    rubric: str | Path | None = None,
    agreement: str | Path | None = None,
    data_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
) -> DataSource:
    """The one rule for what ``train``, ``learning-curve`` and ``ablate`` train on: a benchmark with concept-label
    passes (Mohler: its items, labels by majority vote over the passes, α from them) or an adjudicated table with its
    rubric (``--rubric``, or the rubric.yaml adjudicate keeps beside the table) and agreement.json (``--agreement``, or
    the one beside the table). Unlabelled rows of the table are left out, said through ``progress`` and in the notes."""
    if (benchmark is None) == (data is None):
        raise TrainError("training needs one data source: a benchmark or an adjudicated table",
                         hint="give either --benchmark NAME or --table FILE with --rubric")
    if benchmark is not None:
        if agreement is not None:
            raise TrainError("a benchmark builds its agreement from the concept-label passes",
                             hint="--agreement goes with --table")
        rb, table, agr = benchmark_table(benchmark, data_dir)
        prov = benchmark_provenance(benchmark)
        return DataSource(benchmark, rb, table, agr, [LLM_PASSES_NOTE], prov["table_source"], prov["labels"])
    path = Path(str(data))
    if rubric is None and (path.parent / "rubric.yaml").is_file():  # adjudicate keeps it beside the table
        rubric = path.parent / "rubric.yaml"
    if rubric is None:
        raise TrainError("an adjudicated table needs the rubric its concept columns follow",
                         hint="add --rubric NAME|FILE")
    rb = load_rubric(rubric)
    # items no reviewer or model labelled stay in the adjudicated table, unlabelled: left out here
    raw = read_table(path)
    check_ids(raw, str(data), fix="give every answer its own id (adjudicate writes one row per answer)")
    table, unlabelled = trainable_rows(raw, rb, str(data))
    notes = []
    if unlabelled:
        notes.append(f"{data}: skipping {len(unlabelled)} unlabelled row(s) (no reviewer or model labelled them: "
                     f"{', '.join(unlabelled[:5])}{' ...' if len(unlabelled) > 5 else ''})")
        warn(progress, notes[0])
    agr_path = Path(agreement) if agreement is not None else path.parent / "agreement.json"
    return DataSource(path.stem, rb, table, agr_path if agr_path.is_file() else None, notes, {"path": str(data)}, None,
                      path)


def run_train(
    *,
    benchmark: str | None,
    data: str | Path | None,
    rubric: str | None,
    agreement: str | Path | None,
    data_dir: str | Path | None,
    out: str | Path | None,
    options: TrainOptions,
    plan: SplitPlan = SplitPlan(),
    progress: ProgressFn | None = None,
) -> TrainResult:
    """``rubrictool train``: the data (:func:`resolve_data`), then one run with a split or k fold runs
    (:func:`train_on`); the run directory defaults to runs/<benchmark|table>-<variant>. ``plan``: the split or
    the folds (:class:`SplitPlan`; ``jobs``: k fold runs in that many worker processes; ``final``: with
    ``folds``, also the final model on every labelled answer)."""
    split, folds, jobs, final = plan.split, plan.folds, plan.jobs, plan.final
    if final and not folds:
        raise TrainError("--final trains a k-fold run's final model, and this is one run",
                         hint="add --folds K (the final model's quality card is the folds' pooled figures)")
    if jobs > 1 and not folds:
        raise TrainError(f"--jobs {jobs} trains folds in parallel, and this is one run",
                         hint="add --folds K, or drop --jobs")
    if (benchmark is None) == (data is None):
        raise TrainError("training needs one data source: a benchmark or an adjudicated table",
                         hint="give either --benchmark NAME or --table FILE with --rubric")
    stem = benchmark or Path(str(data)).stem
    run = Path(out) if out else Path("runs") / f"{stem}-{options.variant}"
    run = check_output(run, [data, split, agreement, rubric if rubric and Path(rubric).is_file() else None],
                 "kfold" if folds else "run", what="the run", lock=False)  # run_writer: its own lock
    with run_writer(run):  # one writer per run folder, held until the run is in place
        return _train_source(benchmark, data, rubric, agreement, data_dir, run, options, plan, progress)


def run_writer(run: Path) -> contextlib.AbstractContextManager[Path]:
    """``<run>.lock`` (rubrictool.locks), after a probe that the run's folder can be written: a read-only folder or a
    full disk is one line before any training, and a second ``train`` on the same --out stops at once, naming the
    first. Under ``accelerate launch`` only the main process writes the run, so only it takes the lock."""
    from accelerate import PartialState

    if not PartialState().is_main_process:
        return contextlib.nullcontext(run)
    kept = f"{run} is as it was" if run.exists() else f"nothing was written to {run}"
    try:
        run.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{run.name}.probe-", dir=run.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise TrainError(f"cannot write the run into {run.parent} ({exc.strerror or exc}); {kept}",
                         hint="pass --out a path in a folder you can write") from None
    return writer_lock(run, f"the run {run}", "wait for it to finish, or pass another --out", by="rubrictool train",
                       kept=kept)


def _train_source(benchmark: str | None, data: str | Path | None, rubric: str | None, agreement: str | Path | None,
                  data_dir: str | Path | None, run: Path, options: TrainOptions, plan: SplitPlan,
                  progress: ProgressFn | None) -> TrainResult:
    """run_train's body from the data source on, under the run's lock."""
    split, folds = plan.split, plan.folds
    if folds and split is not None:
        raise TrainError("a fixed split and k-fold evaluation exclude each other: k-fold makes its own splits",
                         hint="drop --split or --folds")
    if benchmark is not None and (split is not None or agreement is not None):
        raise TrainError("a benchmark builds its split and agreement from the concept-label passes",
                         hint="--split/--agreement go with --table")
    source = resolve_data(benchmark=benchmark, data=data, rubric=rubric, agreement=agreement, data_dir=data_dir,
                          progress=progress)
    return train_on(source, run, options, split=split, split_seed=plan.seed, folds=folds, by=plan.by,
                    progress=progress, jobs=plan.jobs, final=plan.final)


def train_on(
    source: DataSource,
    out: str | Path | None,
    options: TrainOptions,
    *,
    split: str | Path | None = None,
    split_seed: int = 0,
    folds: int = 0,
    by: str | None = None,
    progress: ProgressFn | None = None,
    jobs: int = 1,
    final: bool = False,
) -> TrainResult:
    """One run of ``options`` on ``source`` in ``out`` (default runs/<source>-<variant>): with ``folds``, k fold runs
    (:func:`rubrictool.train.train_folds`); else one split: ``split`` (a split.json), or a 7:2:1 split drawn with
    ``split_seed`` (grouped by the ``by`` column when given). ``jobs``: fold runs in that many worker processes;
    ``final``: with ``folds``, the final model too."""
    run = Path(out) if out else Path("runs") / f"{source.name}-{options.variant}"
    common: dict[str, Any] = {"options": options, "record": source.record(), "progress": progress}
    if folds:
        return train_folds(source.rubric, source.table, run, folds=folds, fold_seed=split_seed, by=by, jobs=jobs,
                           final=final, **common)
    if split:
        sp = load_split(split)
    elif by:
        sp = group_split_items(source.table, by, seed=split_seed)
    elif source.path is not None:
        sp = split_items(source.table, seed=split_seed, source=str(source.path))
    else:
        sp = split_items(source.table, seed=split_seed)
    return train_model(source.rubric, source.table, sp, run, **common)
