"""Runs that span stages: a benchmark's concept-label passes adjudicated and trained on, and the
``rubrictool train`` entry point that picks a data source, a split or k folds.

The training stage (:mod:`rubrictool.train`) takes an adjudicated table; the adjudication stage
(:mod:`rubrictool.adjudicate`) makes one. This module sits above both, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

import reccbm
from rubrictool.adjudicate import adjudicate
from rubrictool.data import load_benchmark, load_concept_passes, load_split, split_items
from rubrictool.errors import TrainError
from rubrictool.io import read_table
from rubrictool.progress import ProgressFn
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import LLM_PASSES_NOTE
from rubrictool.train import FLAT_OPTIONS, TrainResult, load_train_config, train_folds, train_model

__all__ = ["benchmark_table", "run_train", "train_benchmark"]


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
    **kwargs: Any,
) -> TrainResult:
    """``rubrictool train --benchmark mohler``: items from the data directory, concept labels from the
    three LLM annotation passes in <data dir>/mohler-concepts (majority vote), α from the same passes, a 7:2:1 split."""
    rb, table, agreement = benchmark_table(benchmark, data_dir)
    split = split_items(table, seed=split_seed)
    notes = [LLM_PASSES_NOTE] + list(kwargs.pop("notes", None) or [])
    return train_model(rb, table, split, run_dir, agreement=agreement, notes=notes, **kwargs)


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
    unknown = sorted(set(flat) - set(FLAT_OPTIONS))
    if unknown:
        raise TrainError(f"unknown option(s) {unknown}")
    overrides = load_train_config(config)
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
    if folds and split is not None:
        raise TrainError("a fixed split and k-fold evaluation exclude each other: k-fold makes its own splits",
                         hint="drop --split or --folds")
    if benchmark is not None:
        if split is not None or agreement is not None:
            raise TrainError("a benchmark builds its split and agreement from the concept-label passes",
                             hint="--split/--agreement go with --data")
        if folds:
            rb, table, agr_doc = benchmark_table(benchmark, data_dir)
            return train_folds(rb, table, run, folds=folds, fold_seed=split_seed, agreement=agr_doc,
                               notes=[LLM_PASSES_NOTE], progress=progress, **kw)
        return train_benchmark(benchmark, run, data_dir=data_dir, split_seed=split_seed, **single)
    if rubric is None:
        raise TrainError("an adjudicated table needs the rubric its concept columns follow",
                         hint="add --rubric NAME|FILE")
    table = read_table(data)  # type: ignore[arg-type]
    agr = agreement if agreement is not None else Path(str(data)).parent / "agreement.json"
    if folds:
        return train_folds(rubric, table, run, folds=folds, fold_seed=split_seed, agreement=agr, progress=progress, **kw)
    sp = load_split(split) if split else split_items(table, seed=split_seed)
    return train_model(rubric, table, sp, run, agreement=agr, **single)
