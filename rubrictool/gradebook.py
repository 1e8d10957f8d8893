"""The teacher's gradebook back: the spreadsheet the answers came from, in its own layout and format, with the marks.

:func:`read_gradebook` reads the spreadsheet as ``rubrictool data import`` does (the same ``--sheet`` and
``--columns``; its ids are the import's ids). :func:`write_gradebook` writes a copy of it (XLSX or CSV/TSV, never the
file itself): the teacher's columns, rows, row order, other sheets and cell formats kept, and after the last column

- ``Mark (rubrictool)``: the mark, empty for an answer held for review;
- ``Needs review``: why an answer is held (empty when marked);
- one ``<concept name>: comment`` column per criterion: the rubric's own anchor of the level read, e.g. "2 of 3: A
  hazard is named, without a precaution." (no LLM; empty for a held answer, whose levels a teacher reads first);

plus a per-question summary (answers, marked, held, mean mark): a ``Summary (rubrictool)`` sheet in a workbook, a
``<name>-summary.csv`` beside a CSV. Running it again on its own output replaces these columns, never duplicates them.
"""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rubrictool.atomic import atomic_write, atomic_write_text
from rubrictool.data.importer import ImportedItems, read_course_file
from rubrictool.errors import DataError
from rubrictool.rubric import Rubric

__all__ = ["MARK_HEADER", "REVIEW_HEADER", "SUMMARY_SHEET", "comment_header", "comments", "gradebook_path",
           "question_summary", "read_gradebook", "write_gradebook"]

MARK_HEADER = "Mark (rubrictool)"
REVIEW_HEADER = "Needs review"
SUMMARY_SHEET = "Summary (rubrictool)"
FORMATS = (".xlsx", ".csv", ".tsv")


def comment_header(name: str) -> str:
    return f"{name}: comment"


def read_gradebook(path: str | Path, sheet: str | None = None, columns: str | None = None) -> ImportedItems:
    """The spreadsheet as ``data import`` reads it (same ids); XLSX, CSV or TSV only (the formats written back)."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise DataError(f"--gradebook {p}: a gradebook is written back as it came, and {p.suffix or 'this'} files "
                        "are not", hint="pass the teacher's .xlsx, .csv or .tsv file")
    return read_course_file(p, columns, sheet)


def is_graded_book(path: Path) -> bool:
    """Whether an existing file is a gradebook this command wrote (its mark column in one of the first rows): an
    ``own`` test for :func:`rubrictool.outputs.check_output`."""
    try:
        if path.suffix.lower() in (".xlsx", ".xlsm"):
            from openpyxl import load_workbook

            book = load_workbook(path, read_only=True)
            try:
                return any(MARK_HEADER in {str(v) for v in row if v is not None}
                           for ws in book.worksheets for row in ws.iter_rows(max_row=30, values_only=True))
            finally:
                book.close()
        with path.open(encoding="utf-8-sig", errors="replace") as fh:
            return any(MARK_HEADER in fh.readline() for _ in range(30))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # an unreadable file is not ours: refused, kept
        return False


def gradebook_path(source: str | Path, out: str | Path | None = None) -> Path:
    """Where the gradebook goes: ``out``, else ``<name>-graded<suffix>`` beside the source; never the source itself,
    and in the source's format."""
    src = Path(source)
    o = Path(out) if out is not None else src.with_name(f"{src.stem}-graded{src.suffix}")
    if o.suffix.lower() != src.suffix.lower():
        raise DataError(f"--gradebook-out {o}: the gradebook is written back in its own format ({src.suffix})",
                        hint=f"name a {src.suffix} file")
    if o.exists() and o.resolve() == src.resolve():
        raise DataError(f"--gradebook-out {o} is the teacher's file itself; the marks go into a copy",
                        hint="pass another --gradebook-out, or leave it out for <name>-graded")
    return o


def comments(rubric: Rubric, graded: pd.DataFrame) -> dict[str, list[str]]:
    """Per concept name, per row of ``graded``: the level read and its anchor ("2 of 3: A hazard is named..."), empty
    for a held answer or one without levels."""
    held = graded["needs_review"].fillna("").astype(str).ne("").to_numpy()
    out: dict[str, list[str]] = {}
    for c in rubric.concepts:
        anchors = {lv.value: lv.anchor for lv in c.levels}
        top = max(anchors)
        col = graded.get(f"{c.key}_level")
        texts = []
        for i in range(len(graded)):
            v = None if col is None else pd.to_numeric(col.iloc[i], errors="coerce")
            if held[i] or v is None or pd.isna(v) or int(v) not in anchors:
                texts.append("")
            else:
                texts.append(f"{int(v)} of {top}: {anchors[int(v)].rstrip('.')}.")
        out[c.name] = texts
    return out


def question_summary(items: pd.DataFrame, graded: pd.DataFrame) -> pd.DataFrame:
    """Per question (in the spreadsheet's order): answers, marked, held and the mean mark of the marked ones."""
    q = items["question"].fillna("").astype(str) if "question" in items.columns else pd.Series("", index=items.index)
    marks = pd.to_numeric(graded["grade"], errors="coerce").to_numpy(float)
    rows = []
    for question in dict.fromkeys(q):
        at = (q == question).to_numpy()
        given = marks[at][~np.isnan(marks[at])]
        rows.append({"question": question or "(no question)", "answers": int(at.sum()), "marked": len(given),
                     "held for review": int(at.sum()) - len(given),
                     "mean mark": round(float(given.mean()), 2) if len(given) else None})
    return pd.DataFrame(rows)


def _added(imported: ImportedItems, graded: pd.DataFrame, rubric: Rubric) -> dict[str, list[Any]]:
    """The columns to add, one value per item of the spreadsheet (its order), from ``graded`` matched by id."""
    ids = imported.items["id"].astype(str)
    by_id = graded.assign(id=graded["id"].astype(str)).set_index("id")
    missing = [i for i in ids if i not in by_id.index]
    if missing:
        raise DataError(f"{imported.report.source}: {len(missing)} answer(s) of the gradebook are not among the graded "
                        f"answers, e.g. {missing[0]!r}", hint="grade the table `data import` made from this file, with "
                        "the same --sheet and --columns, or leave --items out to grade the gradebook itself")
    rows = by_id.loc[list(ids)].reset_index()
    marks = [None if pd.isna(v) else int(v) for v in rows["grade"]]
    added: dict[str, list[Any]] = {MARK_HEADER: marks, REVIEW_HEADER: rows["needs_review"].fillna("").tolist()}
    added |= {comment_header(name): texts for name, texts in comments(rubric, rows).items()}
    return added


def write_gradebook(imported: ImportedItems, graded: pd.DataFrame, rubric: Rubric, out: str | Path
                    ) -> tuple[Path, pd.DataFrame, Path | None]:
    """Write the gradebook back to ``out`` (:func:`gradebook_path`); returns it, the per-question summary and where
    the summary went (None: a sheet of the workbook)."""
    added = _added(imported, graded, rubric)
    by_id = graded.assign(id=graded["id"].astype(str)).set_index("id")
    summary = question_summary(imported.items, by_id.loc[list(imported.items["id"].astype(str))].reset_index())
    src, o = Path(imported.report.source), Path(out)
    if imported.report.fmt == "xlsx":
        _write_xlsx(src, imported.report.sheet, added, summary, o)
        return o, summary, None
    _write_csv(src, "\t" if imported.report.fmt == "tsv" else ",", added, o)
    summary_path = o.with_name(f"{o.stem}-summary.csv")
    atomic_write_text(summary_path, summary.to_csv(index=False))
    return o, summary, summary_path


def _data_rows(values: list[list[Any]]) -> list[int]:
    """Positions (0-based, after the header) of the rows that hold anything: ``data import`` skips blank rows."""
    return [i for i, row in enumerate(values) if any(v is not None and str(v).strip() for v in row)]


def _write_xlsx(src: Path, sheet: str | None, added: dict[str, list[Any]], summary: pd.DataFrame, out: Path) -> None:
    import openpyxl

    book = openpyxl.load_workbook(src)
    ws = book[sheet] if sheet is not None else book.worksheets[0]
    header = [c.value for c in ws[1]]
    last = max((i + 1 for i, v in enumerate(header) if v is not None and str(v).strip()), default=0)
    names = [str(v).strip() if v is not None else "" for v in header]
    rows = _data_rows([[c.value for c in row] for row in ws.iter_rows(min_row=2, max_col=max(last, 1))])
    for name, values in added.items():
        col = names.index(name) + 1 if name in names else last + 1
        if name not in names:
            last, names = last + 1, [*names, name]
        ws.cell(row=1, column=col, value=name)
        for pos, value in zip(rows, values):
            ws.cell(row=pos + 2, column=col, value=value if value != "" else None)
    if SUMMARY_SHEET in book.sheetnames:
        del book[SUMMARY_SHEET]
    summ = book.create_sheet(SUMMARY_SHEET)
    summ.append(list(summary.columns))
    for rec in summary.itertuples(index=False):
        summ.append(list(rec))
    atomic_write(out, lambda tmp: book.save(tmp))


def _write_csv(src: Path, sep: str, added: dict[str, list[Any]], out: Path) -> None:
    with src.open(encoding="utf-8-sig", newline="") as f:
        table = list(csv.reader(f, delimiter=sep))
    if not table:
        raise DataError(f"{src}: empty file; nothing to write back")
    header, body = table[0], table[1:]
    rows = _data_rows([list(r) for r in body])
    for name, values in added.items():
        if name in header:
            col = header.index(name)
        else:
            header.append(name)
            col = len(header) - 1
            for r in body:
                r.extend([""] * (len(header) - len(r)))
        for pos, value in zip(rows, values):
            row = body[pos]
            row.extend([""] * (len(header) - len(row)))
            row[col] = "" if value is None else str(value)
    buf = io.StringIO()
    csv.writer(buf, delimiter=sep, lineterminator="\n").writerows([header, *body])
    atomic_write_text(out, buf.getvalue())
