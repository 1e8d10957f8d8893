"""Whether a finished fold of a k-fold run may be read back by a new ``train --folds`` call over the same folder.

A fold is read back only when it was trained as this call would train it: the same configuration (its config.yaml,
which names the variant, preset and every field), the same table (the sha256 of its copy table.csv) and the same
split (split.json). Otherwise the call stops before it writes anything, naming the first fold that differs and how,
so that folds of two configurations or two tables are never pooled under one name. A recipe field added to the code
since a fold was trained, left at its default by this call, is not a difference (:func:`config_differences`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from reccbm.config import SECTIONS
from rubrictool.errors import TrainError
from rubrictool.train.runs import RECORD, run_is_complete

__all__ = ["check_folds", "config_differences", "fold_difference"]


def config_differences(theirs: Any, ours: Any, where: str = "", words: tuple[str, str] = ("in the run", "here")
                       ) -> list[str]:
    """Fields of a run's config.yaml (``theirs``) that differ from what this call would train with (``ours``), each as
    "FIELD THEIRS <words[0]>, OURS <words[1]>". A recipe field the run predates (absent from its file) counts as its
    dataclass default, which is what the code did before the field was added: a lever is added off, and a preset that
    turns one on sets its value, which then differs. A run from before the encoder choice was recorded has no
    ``encoder``: its stage1.encoder says what it did."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        out: list[str] = []
        for key in sorted(set(theirs) | set(ours), key=str):
            name = f"{where}.{key}" if where else str(key)
            if key == "encoder" and not where and key not in theirs:
                continue
            if key not in theirs and where in SECTIONS:
                default = {f.name: f.default for f in dataclasses.fields(SECTIONS[where])}.get(key)
                if not config_differences(default, ours[key], name, words):
                    continue
            out += config_differences(theirs.get(key), ours.get(key), name, words)
        return out
    if isinstance(theirs, (list, tuple)) and isinstance(ours, (list, tuple)):  # config.yaml keeps a tuple as a list
        theirs, ours = list(theirs), list(ours)
    return [] if theirs == ours else [f"{where or 'config'} {theirs!r} {words[0]}, {ours!r} {words[1]}"]


def _table_sha256(table: pd.DataFrame) -> str:
    """The sha256 of the copy a run keeps of its training table (rubrictool.train writes ``io.people_csv``)."""
    from rubrictool.io import people_csv

    return hashlib.sha256(people_csv(table)).hexdigest()


def _plain_table_sha256(table: pd.DataFrame) -> str:
    """The sha256 of the copy as runs wrote it before formula cells were neutralised in it (``table.to_csv``)."""
    return hashlib.sha256(table.to_csv(index=False).encode("utf-8")).hexdigest()


def fold_difference(fold_dir: Path, split: dict[str, list[str]], config: dict[str, Any], table_sha256: str,
                    plain_sha256: str | None = None) -> str | None:
    """How a finished fold differs from what this call would train (None: the same, read it back). ``plain_sha256``:
    the table's digest as folds wrote their copy before it was neutralised (such a fold is read back too)."""
    try:
        old_config = yaml.safe_load((fold_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        old_config = None
    if old_config is not None:
        new_config = yaml.safe_load(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
        diff = config_differences(old_config, new_config, words=("there", "now"))
        if diff:
            more = f" (and {len(diff) - 2} more)" if len(diff) > 2 else ""
            return "its configuration differs: " + "; ".join(diff[:2]) + more
    try:
        record = json.loads((fold_dir / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    copy = ((record.get("files") or {}).get("table.csv") or {}).get("sha256") if isinstance(record, dict) else None
    if copy and copy not in (table_sha256, plain_sha256):
        return "it was trained on another table (the content of its table.csv differs)"
    try:
        old_split = json.loads((fold_dir / "split.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for part in ("train", "dev", "test"):
        was, now = [str(i) for i in old_split.get(part, [])], [str(i) for i in split.get(part, [])]
        if was != now:
            return f"its {part} split differs ({len(was)} answers there, {len(now)} now)"
    return None


def check_folds(run: Path, splits: Sequence[dict[str, list[str]]], table: pd.DataFrame,
                config_for: Callable[[int], dict[str, Any]], done: Callable[[Path], bool] = run_is_complete) -> None:
    """Refuse, before anything is written, a k-fold folder holding a finished fold (``done``) that this call would
    train otherwise; ``config_for(n)`` is the config.yaml this call writes for a fold with n labelled answers."""
    sha, plain = _table_sha256(table), _plain_table_sha256(table)
    for i, sp in enumerate(splits):
        fold = run / f"fold-{i}"
        if not fold.is_dir() or not done(fold):
            continue
        why = fold_difference(fold, sp, config_for(len(sp.get("train", [])) + len(sp.get("dev", []))), sha,
                              plain)
        if why:
            raise TrainError(f"{fold} was trained otherwise than this call would train it: {why}; nothing was written, "
                             f"and its folds are kept",
                             hint=f"pass another --out, or remove {run} to train every fold again")
