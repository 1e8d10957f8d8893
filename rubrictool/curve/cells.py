"""A learning curve's cell files (:mod:`rubrictool.curve`): their names, reading and writing them, the digests that
tie a cell to its settings and table, and an "all" cell read from a finished fold run instead of trained again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.curve.figure import METRICS
from rubrictool.errors import DataError
from rubrictool.io import atomic_write_text, read_table
from rubrictool.rubric import Rubric
from rubrictool.tables import validate_adjudicated
from rubrictool.train.resume import config_differences

__all__ = ["cell_from_run", "cell_name", "read_cell", "settings_digest", "table_digest", "write_json"]


def cell_name(fold: int, size: int | str, repeat: int, variant: str) -> str:
    """A cell's name, its file's stem: ``fold0-n50-r1-reccbm``."""
    return f"fold{fold}-n{size}-r{repeat}-{variant}"


def write_json(path: Path, doc: dict[str, Any]) -> Path:
    """Atomically: a reader (or a resumed run) sees the whole file or none of it."""
    return atomic_write_text(path, json.dumps(doc, indent=1, default=float) + "\n")


def read_cell(path: Path, settings: str) -> dict[str, Any]:
    """A finished cell's record; fails when it is unreadable or was trained with other settings."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: unreadable cell file ({exc.__class__.__name__})",
                        hint="delete it to retrain that cell") from None
    if doc.get("settings") != settings:
        raise DataError(f"{path}: this cell was trained with other settings (table, folds, preset or training options) "
                        "than this run", hint="give a new --out, or delete the directory's cells/ to start over")
    return dict(doc)


def settings_digest(doc: dict[str, Any]) -> str:
    """A short digest of a curve's settings, stored in each cell."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def table_digest(df: pd.DataFrame, keys: Sequence[str]) -> str:
    """A short digest of a table's ids, grades and the concept levels of ``keys``."""
    cols = ["id", "_y", *[f"_c_{k}" for k in keys if f"_c_{k}" in df.columns]]
    body = df[cols].sort_values("id").to_csv(index=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def cell_from_run(src: Path, fold: int, variant: str, expected: dict[str, Any], split: dict[str, list[str]],
                  df: pd.DataFrame, rb: Rubric, plm: bool) -> dict[str, Any] | None:
    """A variant's "all" cell of ``fold``, read from the finished fold run ``src/fold-<fold>`` of ``train --folds``
    (or ``benchmarks/folds.py``) instead of trained again: None when that run is not there or not finished. It must
    have been trained on the same fold (test part and training part), table and configuration, with seed 0 (the
    curve's first repeat), or DataError says what differs. Its dev part is the run's own (a stratified share of the
    same training part, drawn by the k-fold split). ``plm``: the variant is the PLM (the black box reads the grades
    only)."""
    import yaml

    from rubrictool.train.runs import RECORD, run_is_complete

    run = src / f"fold-{fold}"
    if not all((run / f).is_file() for f in ("metrics.json", "test_predictions.csv", "split.json", "config.yaml",
                                             "table.csv")):
        return None
    if (run / RECORD).is_file() and not run_is_complete(run):
        return None
    where = f"--all-from {variant}={src}: {run}"
    try:
        their_split = json.loads((run / "split.json").read_text())
        config = yaml.safe_load((run / "config.yaml").read_text()) or {}
        metrics = json.loads((run / "metrics.json").read_text())
        pred = read_table(run / "test_predictions.csv")[["id", "grade"]]
        table = validate_adjudicated(read_table(str(run / "table.csv")), rb, need_concepts=not plm)
    except (OSError, ValueError, KeyError, yaml.YAMLError, DataError) as exc:
        raise DataError(f"{where}: unreadable fold run ({exc.__class__.__name__}: {str(exc)[:120]})",
                        hint="give the folder `train --folds` wrote, or drop --all-from to train the cell") from None
    if set(their_split.get("test", [])) != set(split["test"]) or (
            set(their_split.get("train", [])) | set(their_split.get("dev",
                                                                    []))) != set(split["train"]) | set(split["dev"]):
        raise DataError(f"{where}: its fold is not this curve's fold {fold} (other folds, fold seed or --by)",
                        hint="give the folder of `train --folds` with the same --folds, --fold-seed and --by")
    keys = [] if plm else rb.keys
    if table_digest(table, keys) != table_digest(df, keys):
        raise DataError(f"{where}: trained on another table (labels or grades differ)",
                        hint="give the fold runs of this table, or drop --all-from to train the cell")
    diff = config_differences(config, expected)
    if diff:
        raise DataError(f"{where}: trained with another configuration ({'; '.join(diff[:3])})",
                        hint="give the fold runs of this variant and preset, or drop --all-from to train the cell")
    seeds = metrics.get("seeds") or []
    chosen = [s for s in seeds if s.get("seed") == metrics.get("selected_seed")]
    if len(seeds) != 1 or not chosen or chosen[0].get("seed") != 0:
        raise DataError(f"{where}: trained with seeds {[s.get('seed') for s in seeds]}; the curve's first repeat is "
                        "seed 0",
                        hint="give fold runs trained with one seed (the default), or drop --all-from")
    test_m = chosen[0]["test"]
    return {"n_dev": len(their_split.get("dev", [])), "metrics": {m: float(test_m[m]) for m in METRICS},
            "encoder": (metrics.get("encoder") or {}).get("used", "train"),
            "train_seconds": float(chosen[0].get("train_seconds") or 0.0), "source": str(run),
            "train_ids": sorted(their_split.get("train", [])), "dev_ids": sorted(their_split.get("dev", [])),
            "test_ids": pred["id"].tolist(), "test_predicted": pred["grade"].astype(int).tolist()}
