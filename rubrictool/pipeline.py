"""Runs that span stages: a benchmark's concept-label passes adjudicated and trained on, and the
``rubrictool train`` entry point that picks a data source, a split or k folds.

The training stage (:mod:`rubrictool.train`) takes an adjudicated table; the adjudication stage
(:mod:`rubrictool.adjudicate`) makes one. This module sits above both, so neither imports the other.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

import reccbm
from rubrictool.adjudicate import adjudicate
from rubrictool.adjudicate.outputs import trainable_rows
from rubrictool.data import group_split_items, load_benchmark, load_concept_passes, load_split, split_items
from rubrictool.errors import TrainError
from rubrictool.io import read_table
from rubrictool.locks import writer_lock
from rubrictool.outputs import check_output
from rubrictool.progress import ProgressFn, warn
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import LLM_PASSES_NOTE
from rubrictool.train import FLAT_OPTIONS, TrainResult, load_train_config, parse_cfg, train_folds, train_model

__all__ = ["benchmark_provenance", "benchmark_table", "run_train", "train_benchmark"]


def benchmark_table(benchmark: str, data_dir: str | Path | None = None) -> tuple[Rubric, pd.DataFrame, dict[str, Any]]:
    """(rubric, adjudicated table, agreement) of a benchmark with concept-label passes (Mohler): the items
    from the data directory, concept labels by majority vote over the three LLM annotation passes."""
    if benchmark != "mohler":
        raise TrainError(f"no concept-label passes for benchmark {benchmark!r}",
                         hint="pass an adjudicated table with --data and its rubric with --rubric")
    rb = load_rubric(benchmark)
    items = load_benchmark(benchmark, data_dir)
    # α's bootstrap CI for the reliability table and the report: 200 resamples take about 0.2 s on Mohler's 2,273 items
    adj = adjudicate(load_concept_passes(data_dir), rb, items, n_boot=200, coverage=False, note=LLM_PASSES_NOTE)
    return rb, adj.table, adj.agreement


def train_benchmark(
    benchmark: str,
    run_dir: str | Path,
    *,
    data_dir: str | Path | None = None,
    split_seed: int = 0,
    by: str | None = None,
    **kwargs: Any,
) -> TrainResult:
    """``rubrictool train --benchmark mohler``: items from the data directory, concept labels from the
    three LLM annotation passes in <data dir>/mohler-concepts (majority vote), α from the same passes, a 7:2:1 split."""
    rb, table, agreement = benchmark_table(benchmark, data_dir)
    split = group_split_items(table, by, seed=split_seed) if by else split_items(table, seed=split_seed)
    notes = [LLM_PASSES_NOTE] + list(kwargs.pop("notes", None) or [])
    return train_model(rb, table, split, run_dir, agreement=agreement, notes=notes, **(benchmark_provenance(benchmark) | kwargs))


def benchmark_provenance(benchmark: str) -> dict[str, Any]:
    """train_model's ``table_source`` and ``labels`` for a benchmark trained on its bundled concept-label passes."""
    return {"table_source": {"benchmark": benchmark},
            "labels": {"source": "llm", "expert_validated": False, "benchmark": benchmark, "passes": ["A", "B", "C"],
                       "detail": LLM_PASSES_NOTE}}


def run_train(
    *,
    benchmark: str | None,
    data: str | Path | None,
    rubric: str | None,
    split: str | Path | None,
    split_seed: int,
    out: str | Path | None,
    config: str | Path | None,
    variant: str,
    race: bool | None,
    opcc: bool | None,
    lcec: bool | None,
    seeds: int,
    agreement: str | Path | None,
    data_dir: str | Path | None,
    callback: Callable[[reccbm.Event], None] | None = None,
    preset: str = "default",
    folds: int = 0,
    progress: ProgressFn | None = None,
    **flat: Any,
) -> TrainResult:
    """``rubrictool train``: a benchmark or an adjudicated table (+ rubric), flat CLI options over a YAML
    config over CPU_DEFAULTS; the run directory defaults to runs/<benchmark|table>-<variant>."""
    cfg = flat.pop("cfg", None) or []
    by = flat.pop("by", None)
    unknown = sorted(set(flat) - set(FLAT_OPTIONS))
    if unknown:
        raise TrainError(f"unknown option(s) {unknown}")
    overrides = load_train_config(config)
    for section, values in parse_cfg(cfg).items():  # --cfg over --config
        overrides.setdefault(section, {}).update(values)
    for name, value in flat.items():
        for section, key in FLAT_OPTIONS[name] if value is not None else []:
            overrides.setdefault(section, {})[key] = value
    kw: dict[str, Any] = {"variant": variant, "race": race, "opcc": opcc, "lcec": lcec, "overrides": overrides,
                          "seeds": seeds, "callback": callback, "preset": preset}
    single = kw | {"progress": progress}  # k-fold runs take progress themselves and hand it on
    if (benchmark is None) == (data is None):
        raise TrainError("training needs one data source: a benchmark or an adjudicated table",
                         hint="give either --benchmark NAME or --data FILE with --rubric")
    stem = benchmark or Path(str(data)).stem
    run = Path(out) if out else Path("runs") / f"{stem}-{variant}"
    check_output(run, [data, split, config, agreement, rubric if rubric and Path(rubric).is_file() else None],
                 "kfold" if folds else "run", what="the run")
    with run_writer(run):  # one writer per run folder, held until the run is in place
        return _train_source(benchmark, data, rubric, split, split_seed, run, agreement, data_dir, folds, by, kw, single,
                             progress)


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


def _train_source(benchmark: str | None, data: str | Path | None, rubric: str | None, split: str | Path | None,
                  split_seed: int, run: Path, agreement: str | Path | None, data_dir: str | Path | None, folds: int,
                  by: str | None, kw: dict[str, Any], single: dict[str, Any], progress: ProgressFn | None) -> TrainResult:
    """run_train's body from the data source on, under the run's lock."""
    if folds and split is not None:
        raise TrainError("a fixed split and k-fold evaluation exclude each other: k-fold makes its own splits",
                         hint="drop --split or --folds")
    if benchmark is not None:
        if split is not None or agreement is not None:
            raise TrainError("a benchmark builds its split and agreement from the concept-label passes",
                             hint="--split/--agreement go with --data")
        if folds:
            rb, table, agr_doc = benchmark_table(benchmark, data_dir)
            return train_folds(rb, table, run, folds=folds, fold_seed=split_seed, agreement=agr_doc, by=by,
                               notes=[LLM_PASSES_NOTE], progress=progress, **(kw | benchmark_provenance(benchmark)))
        return train_benchmark(benchmark, run, data_dir=data_dir, split_seed=split_seed, by=by, **single)
    if rubric is None and (Path(str(data)).parent / "rubric.yaml").is_file():  # adjudicate keeps it beside the table
        rubric = str(Path(str(data)).parent / "rubric.yaml")
    if rubric is None:
        raise TrainError("an adjudicated table needs the rubric its concept columns follow",
                         hint="add --rubric NAME|FILE")
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    table, unlabelled = trainable_rows(read_table(data), rb, str(data))  # type: ignore[arg-type]
    if unlabelled:
        warn(progress, f"{data}: skipping {len(unlabelled)} unlabelled row(s) (no reviewer or model labelled them: "
                       f"{', '.join(unlabelled[:5])}{' ...' if len(unlabelled) > 5 else ''})")
    agr = agreement if agreement is not None else Path(str(data)).parent / "agreement.json"
    kw["table_source"] = {"path": str(data)}
    if folds:
        return train_folds(rubric, table, run, folds=folds, fold_seed=split_seed, agreement=agr, progress=progress, by=by,
                           **kw)
    if split:
        sp = load_split(split)
    elif by:
        sp = group_split_items(table, by, seed=split_seed)
    else:
        sp = split_items(table, seed=split_seed, source=str(data))
    return train_model(rubric, table, sp, run, agreement=agr, **(single | {"table_source": kw["table_source"]}))
