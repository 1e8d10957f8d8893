"""Reading and writing tables: CSV, JSONL or Parquet by file suffix, one format rule, atomic writes."""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.atomic import atomic_write, atomic_write_text
from rubrictool.errors import DataError
from rubrictool.textsafe import neutralise_frame, restore_frame

__all__ = ["FORMATS", "atomic_write_text", "jsonl_objects", "people_csv", "read_table", "reject_nul", "write_table",
           "write_text", "written_for_people"]

_BOM = b"\xef\xbb\xbf"
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: unknown table format {path.suffix!r}; use .csv, .jsonl or .parquet")
    return fmt


def reject_nul(df: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    """``df`` unchanged, or a one-line error naming the file, row and column of the first text cell (or
    header) holding a NUL byte: a NUL in an answer is binary junk or a UTF-16 file read as UTF-8, and it
    cuts text short in C libraries, terminals and Label Studio."""
    for col in df.columns:
        if "\x00" in str(col):
            raise DataError(f"{source}: header: column name {str(col)!r} contains a NUL byte (\\0)",
                            hint="save the file as UTF-8 text without NUL bytes")
    for col in df.columns:
        values = df[col]
        if not (pd.api.types.is_object_dtype(values) or pd.api.types.is_string_dtype(values)):
            continue
        has = values.map(lambda v: isinstance(v, str) and "\x00" in v).to_numpy(dtype=bool)
        if has.any():
            pos = int(np.flatnonzero(has)[0])
            ident = f" (id {str(df['id'].iloc[pos]).replace(chr(0), '')})" if "id" in df.columns else ""
            raise DataError(f"{source}: row {pos + 1}{ident}, column {str(col)!r}: the text contains a NUL byte (\\0)",
                            hint="remove it, or save the file as UTF-8 text (a UTF-16 file reads as NULs)")
    return df


def jsonl_objects(lines: Iterable[str], where: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSONL text; a line that is not a JSON object is one error
    naming ``where`` and the line."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}:{lineno}: invalid JSON ({e.msg}); one JSON object per line") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
        yield lineno, row


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV, JSONL or Parquet file into a DataFrame (strings kept as strings); a NUL byte in any text
    cell is refused (:func:`reject_nul`); in a CSV rubrictool wrote for people (:func:`written_for_people`) a cell
    neutralised for spreadsheets (``'=…``) is read back as it was; any other file is read exactly as written."""
    df = reject_nul(_read_table(path), path)
    return restore_frame(df) if _format(Path(path)) == "csv" and written_for_people(path) else df


def written_for_people(path: str | Path) -> bool:
    """Whether a CSV is one rubrictool wrote for people (``write_table(for_people=True)``, :func:`people_csv`): it
    begins with the UTF-8 byte-order mark, which also tells a spreadsheet that the text is UTF-8. Only such a file has
    its neutralised cells restored when read; any other file is read exactly as written (a leading ``'`` kept)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(_BOM)) == _BOM
    except OSError:
        return False


def people_csv(df: pd.DataFrame, index: bool = False) -> bytes:
    """``df`` as the bytes of a CSV written for people: formula cells neutralised (rubrictool.textsafe), the UTF-8
    byte-order mark first (:func:`written_for_people`); for files written as bytes (a report's tables)."""
    text = neutralise_frame(df).to_csv(index=index, quoting=csv.QUOTE_NONNUMERIC if _has_cr(df) else csv.QUOTE_MINIMAL)
    return _BOM + text.encode("utf-8")


def _read_table(path: str | Path) -> pd.DataFrame:
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
            with p.open(encoding="utf-8") as fh:
                rows = [row for _, row in jsonl_objects(fh, p)]
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


def _has_cr(df: pd.DataFrame) -> bool:
    for col in df.columns:
        if "\r" in str(col):
            return True
        values = df[col]
        if (pd.api.types.is_object_dtype(values) or pd.api.types.is_string_dtype(values)) and values.map(
                lambda v: isinstance(v, str) and "\r" in v).any():
            return True
    return False


def write_table(df: pd.DataFrame, path: str | Path, for_people: bool = False) -> Path:
    """Write atomically (temp file + rename) as CSV, JSONL or Parquet, chosen by the file suffix; the file gets
    the mode a new file would (umask respected, e.g. 0644 under umask 022), not mkstemp's 0600.

    ``for_people``: a CSV that people open in a spreadsheet (graded answers, an imported item table, the adjudication
    tables): text cells that a spreadsheet would run as a formula are neutralised (rubrictool.textsafe), the file
    begins with the UTF-8 byte-order mark that marks it as such, and :func:`read_table` gives them back verbatim."""
    fmt = _format(Path(path))
    if for_people and fmt == "csv":
        df = neutralise_frame(df)

    def write(tmp: Path) -> None:
        if fmt == "csv":
            # a carriage return inside a cell: pandas leaves the cell unquoted (its line ending is "\n"), and every
            # reader, this one included, would end the row there; quote every text cell then
            df.to_csv(tmp, index=False, quoting=csv.QUOTE_NONNUMERIC if _has_cr(df) else csv.QUOTE_MINIMAL,
                      encoding="utf-8-sig" if for_people else "utf-8")
        elif fmt == "jsonl":
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps({k: _jsonable(v) for k, v in rec.items()}, ensure_ascii=False) + "\n"
                              for rec in df.to_dict(orient="records"))
        else:
            df.to_parquet(tmp, index=False)

    return atomic_write(path, write)


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
    """Write a text file (UTF-8) atomically, with a umask-respecting mode (:func:`atomic_write_text`)."""
    return atomic_write_text(path, text)