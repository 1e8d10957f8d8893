"""Item tables' sources: the three benchmark loaders, their downloads, the Mohler concept-label passes,
summaries and train/dev/test splits.

The ItemTable is one row per student response with the columns
``id, question, response, reference, context, grade`` (the last three optional) plus whatever extra
columns a benchmark carries (Mohler's two graders, ASAP 2.0's demographic fields, MOCHA's constituent
dataset and split). :data:`BENCHMARKS` is the one list of supported benchmarks; :func:`load_benchmark`,
:func:`fetch_benchmark` and :func:`describe_benchmark` dispatch on it.

One module per benchmark (:mod:`.mohler`, :mod:`.asap2`, :mod:`.mocha`), the shared download path in
:mod:`.fetch`, splits in :mod:`.splits`, summaries in :mod:`.describe`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.data.asap2 import ASAP2_KAGGLE_URL, ASAP2_URL, fetch_asap2, load_asap2
from rubrictool.data.base import DATA_ENV, resolve_data_dir, round_half_up
from rubrictool.data.describe import describe_items
from rubrictool.data.mocha import MOCHA_URL, fetch_mocha, load_mocha
from rubrictool.data.mohler import (
    MOHLER_URL,
    concept_passes_dir,
    fetch_mohler,
    load_concept_passes,
    load_mohler,
    synthetic_mohler_table,
)
from rubrictool.data.splits import (
    deal_strata,
    group_kfold_splits,
    group_split_items,
    kfold_splits,
    load_split,
    save_split,
    split_items,
)
from rubrictool.errors import DataError
from rubrictool.io import write_table
from rubrictool.progress import ProgressFn
from rubrictool.tables import read_items

__all__ = [
    "ASAP2_KAGGLE_URL",
    "ASAP2_URL",
    "BENCHMARKS",
    "DATA_ENV",
    "MOCHA_URL",
    "MOHLER_URL",
    "concept_passes_dir",
    "deal_strata",
    "describe_benchmark",
    "describe_items",
    "export_benchmark",
    "fetch_asap2",
    "fetch_benchmark",
    "fetch_mocha",
    "fetch_mohler",
    "group_kfold_splits",
    "group_split_items",
    "kfold_splits",
    "load_asap2",
    "load_benchmark",
    "load_concept_passes",
    "load_mocha",
    "load_mohler",
    "load_split",
    "resolve_data_dir",
    "round_half_up",
    "save_split",
    "split_items",
    "split_to_file",
    "synthetic_mohler_table",
]

_LOADERS: dict[str, Callable[[str | Path | None], pd.DataFrame]] = {
    "mohler": load_mohler,
    "asap2": load_asap2,
    "mocha": load_mocha,
}
_FETCHERS: dict[str, Callable[[str | Path | None, str | None, bool, ProgressFn | None], tuple[Path, bool]]] = {
    "mohler": fetch_mohler,
    "asap2": fetch_asap2,
    "mocha": fetch_mocha,
}

BENCHMARKS = tuple(_LOADERS)
"""The supported benchmarks, by name (each has a bundled rubric of the same name)."""


def load_benchmark(name: str, data_dir: str | Path | None = None) -> pd.DataFrame:
    """Load a benchmark's ItemTable by name from the data directory."""
    if name not in _LOADERS:
        raise DataError(
            f"no loader for benchmark {name!r}; available: {', '.join(BENCHMARKS)}",
            hint="for other data pass --items FILE (an item table) or --table FILE (an adjudicated one)",
        )
    return _LOADERS[name](data_dir)


def fetch_benchmark(
    name: str,
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Download a benchmark's published data into ``<dest>/<name>``; (folder, fetched now?)."""
    if name not in _FETCHERS:
        raise DataError(f"no download for benchmark {name!r}; available: {', '.join(BENCHMARKS)}")
    return _FETCHERS[name](dest, url, force, progress)


def describe_benchmark(name: str, data_dir: str | Path | None = None) -> dict[str, Any]:
    """:func:`describe_items` of a bundled benchmark, or of an item file when ``name`` is a path
    (``rubrictool data show``)."""
    items = load_benchmark(name, data_dir) if name in BENCHMARKS else read_items(name)
    return {"benchmark": name, **describe_items(items)}


def split_to_file(
    source: str,
    out: str | Path,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.7, 0.2, 0.1),
    data_dir: str | Path | None = None,
    by: str | None = None,
) -> dict[str, int]:
    """Split a benchmark (by name) or an item file (by path) and write ``split.json``; returns sizes.
    ``by`` (e.g. ``"question"``) keeps every value of that column in one part (:func:`group_split_items`)."""
    items = load_benchmark(source, data_dir) if source in BENCHMARKS else read_items(source)
    split = (group_split_items(items, by, seed=seed, ratios=ratios) if by
             else split_items(items, seed=seed, ratios=ratios))
    meta = {"source": source, "ratios": list(ratios), "stratify": "grade"} | ({"by": by} if by else {})
    save_split(split, out, seed=seed, meta=meta)
    return {k: len(v) for k, v in split.items()}


def export_benchmark(
    name: str, out: str | Path, data_dir: str | Path | None = None, limit: int | None = None
) -> tuple[Path, int]:
    """Write a benchmark's ItemTable (every column) to ``out`` (CSV/JSONL/Parquet by suffix, atomically):
    the item file that ``review push --items`` and ``annotate --items`` read. ``limit`` keeps the first n
    items. Returns (path, rows written)."""
    items = load_benchmark(name, data_dir)
    if limit is not None:
        if limit < 1:
            raise DataError(f"--limit {limit}: give a positive number of items")
        items = items.head(limit)
    return write_table(items, out, for_people=True), len(items)

