"""Reading a course's answer file for :mod:`rubrictool.data.importer`: the formats, the raw sheet (a CSV's delimiter
sniffed, a workbook's header row found), its data rows and the row a person finds each at, and the report an import
fills in (:class:`ImportReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.errors import DataError
from rubrictool.io import read_table

__all__ = ["IMPORT_FORMATS", "ImportReport", "check_nul", "data_rows", "file_format", "read_raw", "where_row"]


IMPORT_FORMATS = {
    ".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet",
    ".xlsx": "xlsx", ".xlsm": "xlsx",
}


@dataclass
class ImportReport:
    """What an import found, said before anything is written."""

    source: str
    fmt: str
    sheet: str | None = None
    other_sheets: list[str] = field(default_factory=list)
    n_rows: int = 0
    """Data rows read (blank rows excluded)."""
    blank_rows: int = 0
    mapping: dict[str, str] = field(default_factory=dict)
    """ItemTable column -> the file's header it comes from."""
    guessed: list[str] = field(default_factory=list)
    """The ItemTable columns whose header was guessed (not given in ``columns``)."""
    unused: list[str] = field(default_factory=list)
    """Headers kept as extra columns (renamed ``source_<name>`` when the name is an ItemTable column)."""
    ids: str = "kept"
    """kept (the file's ids, unique) or made (the file has no id column)."""
    id_rule: str | None = None
    """How made ids are made, in words (``<question>/<student>``)."""
    grade: dict[str, Any] = field(default_factory=dict)
    """min, max, integer, n_missing, histogram, booleans (true/false read as 1/0), header_scale (the range the header
    states), scaled_by, rounded (grades changed by rounding), n_fractional and first_fractional (not whole numbers)."""
    n_questions: int | None = None
    empty_responses: list[str] = field(default_factory=list)
    """Where each empty response is ("row 7 (id bio.3)")."""
    dropped_empty: bool = False
    duplicate_rows: list[str] = field(default_factory=list)
    """Rows that repeat an earlier row in every column of the file ("row 9 = row 4")."""
    duplicate_answers: int = 0
    """Answers whose text repeats another answer to the same question (not identical rows)."""
    n_written: int = 0
    out: str | None = None
    header_row: int = 1
    """A workbook sheet's header row (blank rows above it skipped)."""
    row_numbers: list[int] = field(default_factory=list)
    """Per data row kept (blank rows left out), the row a person finds it at: in a workbook the sheet's row (header
    row and any blank rows above it counted), in a text file its data row."""
    sheet_rows: list[int] = field(default_factory=list)
    """Per data row kept, the row a spreadsheet shows it at, in a workbook and a CSV/TSV alike (the header row and
    blank rows counted; a JSONL file's line, a Parquet file's row)."""
    delimiter: str | None = None
    """A CSV's delimiter when it is not a comma (sniffed: ``;`` from a spreadsheet set to a decimal comma)."""
    warnings: list[str] = field(default_factory=list)
    """What the import changed or could not tell (two columns with one header)."""


def read_raw(path: Path, fmt: str, sheet: str | None, report: ImportReport) -> pd.DataFrame:
    """The file as a DataFrame of strings/numbers, headers as written (stripped)."""
    if sheet is not None and fmt != "xlsx":
        raise DataError(f"{path}: --sheet is for XLSX workbooks; this is a {fmt.upper()} file")
    if fmt in ("csv", "tsv"):
        sep = "\t" if fmt == "tsv" else _sniff_delimiter(path)
        if sep not in (",", "\t"):
            report.delimiter = sep
        try:
            df = pd.read_csv(
                path, sep=sep, dtype=str, keep_default_na=False, na_values=[""],
                index_col=False, encoding="utf-8-sig",
            )
        except UnicodeDecodeError:
            raise DataError(
                f"{path}: not UTF-8 text; save it as 'CSV UTF-8' (Excel) or re-encode it to UTF-8"
            ) from None
        except (ValueError, pd.errors.ParserError, OSError) as e:
            first = str(e).splitlines()[0] if str(e) else e.__class__.__name__
            raise DataError(f"{path}: cannot read as {fmt.upper()}: {first}") from None
    elif fmt == "xlsx":
        try:
            book = pd.ExcelFile(path, engine="openpyxl")
        except ImportError:
            raise DataError(
                "reading XLSX needs openpyxl", hint="pip install openpyxl (a rubrictool dependency)"
            ) from None
        except (ValueError, OSError, KeyError) as e:
            raise DataError(
                f"{path}: cannot read as XLSX ({e.__class__.__name__}: {e}); is it an Excel workbook?"
            ) from None
        names = [str(n) for n in book.sheet_names]
        if sheet is not None and sheet not in names:
            raise DataError(f"{path}: no sheet {sheet!r}; its sheets: {', '.join(map(repr, names))}; pass --sheet NAME")
        if not names:
            raise DataError(f"{path}: the workbook has no sheets")
        chosen = sheet if sheet is not None else names[0]
        report.sheet, report.other_sheets = chosen, [n for n in names if n != chosen]
        report.header_row = _first_filled_row(book, chosen)
        df = book.parse(chosen, dtype=object, header=report.header_row - 1)  # blank rows above the header skipped
        book.close()
    else:
        df = read_table(path)  # JSONL, Parquet: io's reader and its errors
    if fmt in ("csv", "tsv"):
        _warn_repeated_headers(path, sep, list(df.columns), report)
        records = _record_rows(path, sep)
        if len(records) == len(df) + 1:  # the header and every data row, as a spreadsheet numbers them
            report.header_row, report.sheet_rows = records[0], records[1:]
    df.columns = [str(c).strip() for c in df.columns]
    unnamed = [c for c in df.columns if c.startswith("Unnamed:") and df[c].isna().all()]
    df = df.drop(columns=unnamed)
    if df.columns.duplicated().any():
        dup = df.columns[df.columns.duplicated()][0]
        raise DataError(f"{path}: two columns are headed {dup!r}; give every column its own header")
    return df


def _sniff_delimiter(path: Path) -> str:
    """A CSV's delimiter: a comma, unless its header line holds none and does hold ``;``, a tab or ``|`` (a spreadsheet
    set to a decimal comma saves ``;``)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
            head = fh.readline()
    except OSError:
        return ","
    if "," in head:
        return ","
    counts = {d: head.count(d) for d in (";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _record_rows(path: Path, sep: str) -> list[int]:
    """The row a spreadsheet shows each non-empty record of a CSV at (1-based; empty lines counted, a quoted cell
    over several lines being one row)."""
    import csv

    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
            return [n for n, rec in enumerate(csv.reader(fh, delimiter=sep), 1)
                    if rec and not (len(rec) == 1 and not rec[0].strip())]
    except (OSError, csv.Error):
        return []


def _warn_repeated_headers(path: Path, sep: str, columns: list[str], report: ImportReport) -> None:
    """Warn of two columns under one header (pandas reads the second as ``NAME.1``): which one is read as what."""
    import csv

    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
            header = [h.strip() for h in next(csv.reader(fh, delimiter=sep), [])]
    except OSError:
        return
    seen: dict[str, int] = {}
    for i, h in enumerate(header):
        if h in seen and h and i < len(columns):
            report.warnings.append(
                f"columns {seen[h] + 1} and {i + 1} are both headed {h!r}: column {seen[h] + 1} is read as {h!r}, "
                f"column {i + 1} as {str(columns[i]).strip()!r} (rename one in the file, or map it with --columns)")
        seen.setdefault(h, i)


def _first_filled_row(book: Any, sheet: str) -> int:
    """The sheet row (1-based) of a workbook sheet's first non-empty row: the header pandas read (blank rows above
    it are skipped)."""
    try:
        ws = book.book[sheet]
        for n, row in enumerate(ws.iter_rows(values_only=True), 1):
            if any(v is not None and str(v).strip() != "" for v in row):
                return n
    except Exception:  # noqa: BLE001 - a workbook openpyxl reads differently: rows as if the header were row 1
        return 1
    return 1


def where_row(report: ImportReport, pos: int) -> str:
    """A data row (0-based position in the file's data rows, blank rows left out) as the user finds it: the sheet's
    row in a workbook, the data row in a text file."""
    if pos < len(report.row_numbers):
        return f"row {report.row_numbers[pos]}"
    return f"row {pos + 2}" if report.fmt == "xlsx" else f"row {pos + 1}"


def check_nul(df: pd.DataFrame, report: ImportReport, path: Path) -> None:
    for col in df.columns:
        s = df[col]
        if pd.api.types.is_numeric_dtype(s.dtype):
            continue
        has = s.map(lambda v: isinstance(v, str) and "\x00" in v)
        if has.any():
            pos = int(np.flatnonzero(has.to_numpy())[0])
            raise DataError(
                f"{path}: {where_row(report, pos)}, column {col!r}: the cell contains a NUL byte "
                f"({int(has.sum())} such "
                "cell(s)); remove it — a NUL usually means a binary file or the wrong encoding"
            )


def file_format(p: Path) -> str:
    """The import format of ``p`` by its suffix; fails on an unknown type or a missing file."""
    fmt = IMPORT_FORMATS.get(p.suffix.lower())
    if fmt is None:
        hint = "save it as .xlsx or .csv" if p.suffix.lower() in (".xls", ".ods", ".numbers") else ""
        raise DataError(
            f"{p}: unknown file type {p.suffix!r}; import reads .csv, .tsv, .jsonl, .parquet or .xlsx"
            + (f" ({hint})" if hint else "")
        )
    if not p.is_file():
        raise DataError(f"{p}: no such file; check the path")
    return fmt


def data_rows(raw: pd.DataFrame, report: ImportReport, p: Path) -> pd.DataFrame:
    """``raw`` without its blank rows (counted in the report); fails when no row is left."""
    blank = raw.apply(lambda c: c.isna() | c.astype(str).str.strip().eq("")).all(axis=1)
    report.blank_rows = int(blank.sum())
    first = report.header_row + 1 if report.fmt == "xlsx" else 1  # where data row 0 is
    kept = np.flatnonzero(~blank.to_numpy())
    report.row_numbers = [first + int(i) for i in kept]
    if report.fmt == "xlsx":
        report.sheet_rows = list(report.row_numbers)
    elif len(report.sheet_rows) == len(raw):  # a CSV/TSV's rows as a spreadsheet shows them
        report.sheet_rows = [report.sheet_rows[int(i)] for i in kept]
    else:  # no header row: a JSONL file's lines, a Parquet file's rows
        report.sheet_rows = [int(i) + 1 for i in kept] if report.fmt not in ("csv", "tsv") else []
    raw = raw.loc[~blank.to_numpy()].reset_index(drop=True)
    report.n_rows = len(raw)
    if len(raw) == 0:
        raise DataError(f"{p}: no data rows" + (f" in sheet {report.sheet!r}" if report.sheet else ""))
    return raw
