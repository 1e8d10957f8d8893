"""ASAP 2.0: source-based argumentative essays scored holistically on 1..6 (Crossley et al. 2025).

Two published layouts load (see docs/data.md for where each comes from):

* the corpus release (github.com/scrosseye/ASAP_2.0): ``ASAP_2_Final_github_train.csv`` with
  ``essay_id, score, full_text, assignment, prompt_name`` and the writers' demographic fields
  (``economically_disadvantaged, student_disability_status, ell_status, race_ethnicity, gender,
  grade_level``, ...); a Kaggle mirror of it is named ``ASAP2_train_sourcetexts.csv``;
* the Kaggle competition "Learning Agency Lab - Automated Essay Scoring 2.0": ``train.csv`` with
  ``essay_id, full_text, score`` only (no prompt, no demographics).

ItemTable: ``id`` = essay_id, ``question`` = the assignment text (else the prompt name; empty in the
Kaggle layout), ``response`` = the essay, ``grade`` = the holistic score; every other column of the
file is kept as it is.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from rubrictool.data.base import benchmark_dir
from rubrictool.data.fetch import ArchiveSpec, Credentials, fetch_archive
from rubrictool.errors import DataError
from rubrictool.progress import ProgressFn
from rubrictool.tables import validate_items

__all__ = ["ASAP2", "ASAP2_FILES", "ASAP2_KAGGLE_URL", "ASAP2_URL", "fetch_asap2", "load_asap2", "read_asap2"]

ASAP2_FILES = ("ASAP_2_Final_github_train.csv", "ASAP2_train_sourcetexts.csv", "train.csv")
"""The files the loader reads, in order of preference: the corpus release, its Kaggle mirror, the competition."""

ASAP2_URL = "https://github.com/scrosseye/ASAP_2.0/raw/main/ASAP_2_Final_github_train.zip"
"""The corpus release's training file as its authors publish it (no account needed)."""

ASAP2_KAGGLE_URL = (
    "https://www.kaggle.com/api/v1/competitions/data/download-all/learning-agency-lab-automated-essay-scoring-2"
)
"""The competition's files through the Kaggle API (needs KAGGLE_USERNAME / KAGGLE_KEY and accepted rules)."""

_REQUIRED = ("essay_id", "full_text", "score")
_MANUAL = (
    "or place the file by hand: download ASAP_2_Final_github_train.zip from https://github.com/scrosseye/ASAP_2.0, "
    "or train.csv from https://www.kaggle.com/competitions/learning-agency-lab-automated-essay-scoring-2/data, "
    "and put the CSV in <data dir>/asap2/"
)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, dtype={"essay_id": str}, keep_default_na=False, na_values=[""], index_col=False)
    except pd.errors.ParserWarning:
        raise DataError(
            f"{path}: a row has more fields than the header; the file is damaged — fetch it again"
        ) from None
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as e:
        first = str(e).splitlines()[0] if str(e) else e.__class__.__name__
        raise DataError(
            f"{path}: cannot read as CSV ({first}); the file is damaged or cut short — fetch it again"
        ) from None


def load_asap2(data_dir: str | Path | None = None) -> pd.DataFrame:
    """Load ASAP 2.0 from ``<data dir>/asap2`` into an ItemTable (the first of :data:`ASAP2_FILES` found)."""
    return read_asap2(benchmark_dir("asap2", data_dir, ASAP2_FILES, "ASAP 2.0 data"))


def read_asap2(root: Path) -> pd.DataFrame:
    """The ItemTable of the ASAP 2.0 folder ``root`` (holding one of :data:`ASAP2_FILES`)."""
    path = next((root / f for f in ASAP2_FILES if (root / f).is_file()), root / ASAP2_FILES[0])
    raw = _read_csv(path)
    missing = [c for c in _REQUIRED if c not in raw.columns]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {', '.join(missing)}; ASAP 2.0 files have essay_id, full_text and score "
            f"(found {', '.join(map(str, raw.columns)) or 'none'})"
        )
    question = raw["assignment"] if "assignment" in raw.columns else raw.get("prompt_name")
    items = pd.DataFrame({
        "id": raw["essay_id"],
        "question": question,
        "response": raw["full_text"],
        "reference": None,
        "context": None,
        "grade": raw["score"],
    })
    extra = raw.drop(columns=[c for c in ("essay_id", "full_text", "score", "assignment") if c in raw.columns])
    extra = extra.rename(columns={c: f"asap2_{c}" for c in extra.columns if c in items.columns})  # never overwrite
    items = pd.concat([items, extra.reset_index(drop=True)], axis=1)
    items["source_file"] = path.name
    out = validate_items(items, str(path))
    bad = out["grade"].isna() | (out["grade"] % 1 != 0)
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0]) + 1
        value = raw["score"].iloc[row - 1]
        what = "no score" if pd.isna(value) else f"score {value} is not a whole number 1..6"
        raise DataError(
            f"{path}: row {row} (essay {out['id'].iloc[row - 1]}): {what}; the file is damaged — fetch it again"
        )
    out["grade"] = out["grade"].astype(int)
    return out


ASAP2 = ArchiveSpec(
    name="asap2",
    what="the ASAP 2.0 release (ASAP_2_Final_github_train.zip) or the Kaggle competition's files",
    url=ASAP2_URL,
    markers=ASAP2_FILES,
    load=read_asap2,
    manual=_MANUAL,
    credentials=Credentials(
        "KAGGLE_USERNAME", "KAGGLE_KEY",
        "your Kaggle user name and API key, from kaggle.com → Settings → API; accept the competition's rules first",
    ),
    credentials_for="https://www.kaggle.com/",
)


def fetch_asap2(
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Download ASAP 2.0 into ``<dest>/asap2`` (default :data:`ASAP2_URL`; ``url="kaggle"`` for the
    competition's files through the Kaggle API, with credentials from the environment)."""
    return fetch_archive(ASAP2, dest, ASAP2_KAGGLE_URL if url == "kaggle" else url, force, progress)
