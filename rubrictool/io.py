"""Reading and writing tables: CSV, JSONL or Parquet by file suffix, one format rule, atomic writes."""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from rubrictool.errors import DataError

__all__ = ["FORMATS", "read_table", "write_table", "write_text"]

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: unknown table format {path.suffix!r}; use .csv, .jsonl or .parquet")
    return fmt


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV, JSONL or Parquet file into a DataFrame (strings kept as strings)."""
    p = Path(path)
    fmt = _format(p)
    if not p.is_file():
        raise DataError(f"{p}: no such file; check the path")
    try:
        if fmt == "csv":
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                return pd.read_csv(
                    p, dtype={"id": str, "item": str}, keep_default_na=False, na_values=[""], index_col=False
                )
        if fmt == "jsonl":
            rows = []
            with p.open(encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(f"{p}:{lineno}: invalid JSON ({e.msg}); one JSON object per line") from None
                    if not isinstance(row, dict):
                        raise DataError(f"{p}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
                    rows.append(row)
            df = pd.DataFrame(rows)
            for col in ("id", "item"):
                if col in df.columns:
                    df[col] = df[col].map(lambda v: v if v is None or isinstance(v, str) else str(v))
            return df
        return pd.read_parquet(p)
    except DataError:
        raise
    except pd.errors.ParserWarning:
        raise DataError(
            f"{p}: a row has more fields than the header; quote text that contains commas"
        ) from None
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as e:
        first = str(e).splitlines()[0] if str(e) else e.__class__.__name__
        raise DataError(f"{p}: cannot read as {fmt}: {first}") from None


def _jsonable(v: object) -> object:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return None if math.isnan(float(v)) else float(v)
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, np.ndarray):
        return v.tolist()
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write atomically (temp file + rename) as CSV, JSONL or Parquet, chosen by the file suffix."""
    p = Path(path)
    fmt = _format(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        elif fmt == "jsonl":
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps({k: _jsonable(v) for k, v in rec.items()}, ensure_ascii=False) + "\n" for rec in df.to_dict(orient="records"))
        else:
            df.to_parquet(tmp, index=False)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p


def writable_dir(out: str | Path) -> Path:
    """``out``, created; one clear error when it cannot be written (e.g. a read-only run directory), checked
    before a command spends minutes computing what it will write there."""
    d = Path(out)
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".rubrictool-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise DataError(f"cannot write into {d} ({exc.strerror or exc}); pass --out DIR") from None
    return d


def write_text(path: str | Path, text: str) -> Path:
    """Write a text file (UTF-8) atomically: a temp file beside it, then a rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p
