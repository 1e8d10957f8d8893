"""MOCHA: human judgements (1..5) of candidate answers to reading-comprehension questions (Chen et al. 2020).

The release (``data/mocha.tar.gz`` in github.com/anthonywchen/MOCHA) unpacks to ``mocha/`` with
``train.json``, ``dev.json``, ``test_no_labels.json`` and ``minimal_pairs.json``. Each split file maps
a constituent dataset (cosmosqa, drop, mcscript, narrativeqa, quoref, socialiqa) to
``{instance id: {context, question, reference, candidate, score, metadata: {scores, source}}}``.

ItemTable: ``context`` = the passage, ``question``, ``reference``, ``response`` = the candidate,
``grade`` = the human score rounded half up (``score`` keeps it unrounded, ``scores`` the single
judgements), plus ``dataset`` (the constituent dataset), ``split`` (the original split), ``source``
(the model that generated the candidate) and ``mocha_id``. The id is ``<dataset>-<split>-<mocha_id>``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.data.base import benchmark_dir, round_half_up
from rubrictool.data.fetch import ArchiveSpec, fetch_archive
from rubrictool.errors import DataError
from rubrictool.progress import ProgressFn
from rubrictool.tables import validate_items

__all__ = ["MOCHA", "MOCHA_SPLITS", "MOCHA_URL", "fetch_mocha", "load_mocha", "read_mocha"]

MOCHA_URL = "https://github.com/anthonywchen/MOCHA/raw/main/data/mocha.tar.gz"
"""The release archive as its authors publish it."""

MOCHA_SPLITS = {"train": "train.json", "dev": "dev.json", "test": "test_no_labels.json"}
"""The labelled splits' files (test has no scores: its grade stays empty)."""

_FIELDS = ("context", "question", "reference", "candidate")


def _read_split(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DataError(
            f"{path}: missing; the MOCHA release has {', '.join(MOCHA_SPLITS.values())} — is the download complete?",
            hint="run `rubrictool data fetch mocha --force`",
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}:{e.lineno}: invalid JSON ({e.msg}); the file is damaged or cut short — fetch it again"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e.__class__.__name__}: {e})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise DataError(f"{path}: expected {{dataset: {{instance id: instance}}}} as in the MOCHA release")
    return doc


def load_mocha(data_dir: str | Path | None = None, splits: Sequence[str] = ("train",)) -> pd.DataFrame:
    """Load MOCHA from ``<data dir>/mocha`` into an ItemTable.

    ``splits`` picks the original splits (``train``, ``dev``, ``test``); the default, ``train``, is the
    31,069 judged answers the REC-CBM paper uses.
    """
    unknown = [s for s in splits if s not in MOCHA_SPLITS]
    if unknown:
        raise DataError(f"unknown MOCHA split(s) {', '.join(unknown)}; use {', '.join(MOCHA_SPLITS)}")
    return read_mocha(benchmark_dir("mocha", data_dir, ("train.json",), "MOCHA data"), splits)


def read_mocha(root: Path, splits: Sequence[str] = ("train",)) -> pd.DataFrame:
    """The ItemTable of the MOCHA folder ``root`` (the one holding ``train.json``)."""
    rows: list[dict[str, Any]] = []
    for split in splits:
        path = root / MOCHA_SPLITS[split]
        for dataset, instances in _read_split(path).items():
            for iid, inst in instances.items():
                where = f"{path}: {dataset}/{iid}"
                if not isinstance(inst, dict):
                    raise DataError(f"{where}: expected an object with {', '.join(_FIELDS)}, score")
                missing = [f for f in _FIELDS if not isinstance(inst.get(f), str)]
                if missing:
                    raise DataError(
                        f"{where}: missing field(s) {', '.join(missing)}; the file is damaged — fetch it again"
                    )
                score = inst.get("score")
                if score is not None and not isinstance(score, (int, float)):
                    raise DataError(f"{where}: score {score!r} is not a number")
                raw_meta = inst.get("metadata")
                meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
                row: dict[str, Any] = {
                    "id": f"{dataset}-{split}-{iid}",
                    "question": inst["question"],
                    "response": inst["candidate"],
                    "reference": inst["reference"],
                    "context": inst["context"],
                    "grade": round_half_up(score) if score is not None else None,
                    "dataset": dataset,
                    "split": split,
                    "source": meta.get("source"),
                    "score": float(score) if score is not None else None,
                    "scores": " ".join(str(s) for s in meta.get("scores") or []) or None,
                    "mocha_id": iid,
                }
                row |= {f"meta_{k}": v for k, v in meta.items() if k not in ("source", "scores")}
                rows.append(row)
    return validate_items(pd.DataFrame(rows), str(root))  # an empty candidate is reported, never dropped


MOCHA = ArchiveSpec(
    name="mocha",
    what="the MOCHA release (mocha.tar.gz)",
    url=MOCHA_URL,
    markers=("train.json",),
    load=read_mocha,
    manual=(
        "or place the files by hand: download data/mocha.tar.gz from https://github.com/anthonywchen/MOCHA "
        "and unpack it so that <data dir>/mocha/train.json exists"
    ),
)


def fetch_mocha(
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Download and unpack MOCHA into ``<dest>/mocha`` (default :data:`MOCHA_URL`)."""
    return fetch_archive(MOCHA, dest, url, force, progress)
