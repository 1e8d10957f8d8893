"""Importing a course's own answer file (CSV, TSV, JSONL, Parquet or XLSX) as an ItemTable.

A teacher's spreadsheet has its own headers (``answer``, ``reference_answer``, ``correct``, ...). The
import maps them onto the ItemTable's columns (``id, question, response, reference, context, grade``),
guessing common header names case- and space-insensitively unless ``columns`` says otherwise, makes
ids when the file has none (a repeated or empty id in the file's own id column is refused, naming the
row), and reports what it found — the mapping, the grade scale, empty responses, repeated rows — before
anything is written (:func:`read_course_file`, then :func:`write_course_items`; :func:`import_items` does
both). Reading the file (its format, delimiter, header row and row numbers) is
:mod:`rubrictool.data.course_file`.

Row numbers in messages count data rows from 1 below the header; for XLSX they are the spreadsheet's
own row numbers (the header is row 1). A repeated or empty id is named by the row a spreadsheet shows,
in XLSX and CSV alike (the header row and blank rows counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rubrictool.atomic import remove_stale_temps
from rubrictool.data.course_file import (
    IMPORT_FORMATS,
    ImportReport,
    check_nul,
    data_rows,
    file_format,
    read_raw,
    where_row,
)
from rubrictool.data.course_ids import made_ids, text_ids
from rubrictool.errors import DataError
from rubrictool.io import read_table, write_table
from rubrictool.outputs import output_lock
from rubrictool.tables import ITEM_COLUMNS, validate_items

__all__ = [
    "HEADER_GUESSES",
    "IMPORT_FORMATS",
    "MAPPED_COLUMNS",
    "ImportReport",
    "ImportedItems",
    "check_against",
    "check_file_ids",
    "grade_problem",
    "header_scale",
    "import_items",
    "parse_columns",
    "read_course_file",
    "write_course_items",
]


HEADER_GUESSES: dict[str, tuple[str, ...]] = {
    "id": ("id", "item_id", "answer_id", "response_id", "submission_id", "uid", "row_id"),
    "question": ("question", "question_text", "prompt", "item", "task", "question_id", "qid", "q#", "qno",
                 "question_no", "question_number", "question_nr", "q"),
    "response": (
        "response", "answer", "student_answer", "student_response", "answer_text", "response_text",
        "student_text", "submission", "essay", "candidate",
    ),
    "reference": (
        "reference", "reference_answer", "model_answer", "key", "answer_key", "correct_answer", "desired_answer",
        "ideal_answer", "expected_answer", "sample_answer", "solution",
    ),
    "context": ("context", "passage", "source_text", "reading"),
    "grade": ("grade", "score", "mark", "marks", "points", "correct", "total", "final_grade", "label"),
    "student": ("student_id", "student", "student_number", "student_no", "learner", "learner_id", "pupil", "user_id",
                "username", "email"),
}
"""Header names tried per ItemTable column (and ``student``, whose ids make the answers' ids), in order of preference
(compared lower-case, ignoring spaces, ``_`` and ``-``, and then without a scale written after the name, as in
``Score (0-5)``, ``Mark [0-10]``, ``Points /5`` or ``Score out of 5``): the first header of the file matching a
column's list is used."""

MAPPED_COLUMNS = [*ITEM_COLUMNS, "student"]
"""What ``--columns`` can map: the ItemTable's columns and ``student`` (the student of each answer, kept as the
``student`` column; the answers' ids are made from it and the question)."""

_SCALE_NOTE = re.compile(
    r"\s*(?:\(([^()]*)\)|\[([^\[\]]*)\]|/\s*(\d+(?:\.\d+)?)|out\s+of\s+(\d+(?:\.\d+)?))\s*$", re.IGNORECASE)
_RANGE = re.compile(r"^\s*(?:max\.?\s*|out\s+of\s+)?(-?\d+(?:\.\d+)?)(?:\s*(?:-|–|—|to|\.\.)\s*(-?\d+(?:\.\d+)?))?\s*"
                    r"(?:points?|pts|marks?)?\s*$", re.IGNORECASE)


def _header_base(name: str) -> str:
    """A header without a scale written after it: ``Score (0-5)`` -> ``Score``."""
    return _SCALE_NOTE.sub("", str(name)).strip() or str(name)


def header_scale(name: str) -> tuple[float, float] | None:
    """The grade range a header states: ``Score (0-5)`` -> (0, 5); ``Points /10``, ``Mark (max 10)``,
    ``Score out of 5`` -> (0, max); None when it states none."""
    m = _SCALE_NOTE.search(str(name))
    if not m:
        return None
    if m.group(3) or m.group(4):
        return 0.0, float(m.group(3) or m.group(4))
    r = _RANGE.match(m.group(1) if m.group(1) is not None else m.group(2))
    if not r:
        return None
    return (float(r.group(1)), float(r.group(2))) if r.group(2) else (0.0, float(r.group(1)))

_TRUE = {"true", "yes", "y"}
_FALSE = {"false", "no", "n"}


def _norm(name: object) -> str:
    return re.sub(r"[\s_\-]+", "", str(name)).lower()


@dataclass
class ImportedItems:
    """The ItemTable an import will write, and its report."""

    items: pd.DataFrame
    report: ImportReport


def parse_columns(spec: str | None) -> dict[str, str | None]:
    """``response=answer,grade=correct`` -> {"response": "answer", "grade": "correct"}; an empty right side
    (``grade=``) means "no such column" (a guess is not used)."""
    out: dict[str, str | None] = {}
    if not spec:
        return out
    for part in spec.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise DataError(
                f"--columns {spec!r}: {part.strip()!r} is not COLUMN=HEADER; "
                "e.g. --columns response=answer,grade=correct"
            )
        key, _, header = part.partition("=")
        key = key.strip().lower()
        if key not in MAPPED_COLUMNS:
            raise DataError(
                f"--columns: {key!r} is not an item table column; map one of {', '.join(MAPPED_COLUMNS)} "
                "(e.g. response=answer)"
            )
        if key in out:
            raise DataError(f"--columns: {key} is mapped twice")
        out[key] = header.strip() or None
    return out


def _num(x: float) -> str:
    """3.0 -> "3", 2.5 -> "2.5"."""
    return str(int(x)) if x.is_integer() else str(x)


def _map_columns(headers: list[str], given: dict[str, str | None], path: Path) -> tuple[dict[str, str], list[str]]:
    by_norm: dict[str, str] = {}
    by_base: dict[str, str] = {}  # headers without a scale after the name: 'Score (0-5)' answers to 'score'
    for h in headers:
        by_norm.setdefault(_norm(h), h)
        by_base.setdefault(_norm(_header_base(h)), h)
    mapping: dict[str, str] = {}
    for key, header in given.items():
        if header is None:
            continue
        if header in headers:
            mapping[key] = header
        elif _norm(header) in by_norm:
            mapping[key] = by_norm[_norm(header)]
        else:
            raise DataError(
                f"{path}: --columns {key}={header}: no column {header!r}; its headers: {', '.join(map(repr, headers))}"
            )
    taken = set(mapping.values())
    doubled = [h for h in taken if list(mapping.values()).count(h) > 1]
    if doubled:
        raise DataError(f"--columns: header {doubled[0]!r} is mapped to two columns")
    guessed = []
    for key in MAPPED_COLUMNS:
        if key in given:
            continue
        for cand in HEADER_GUESSES[key]:
            found = by_norm.get(_norm(cand)) or by_base.get(_norm(cand))
            if found is not None and found not in taken:
                mapping[key] = found
                taken.add(found)
                guessed.append(key)
                break
    return mapping, guessed


def _grades(col: pd.Series, report: ImportReport, header: str, path: Path, grade_scale: float | None = None,
            round_grades: bool = False) -> pd.Series:
    """The grade column as numbers (true/false/yes/no read as 1/0), times ``grade_scale`` when given, rounded half up
    when ``round_grades``; a cell that is no number is an error."""
    text = col.map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip())
    low = text.str.lower()
    booleans = low.isin(_TRUE | _FALSE)
    num = pd.to_numeric(text.where(~booleans), errors="coerce")
    num = num.where(~booleans, low.isin(_TRUE).astype(float))
    bad = num.isna() & text.notna() & text.ne("")
    if bad.any():
        pos = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{path}: {where_row(report, pos)}, column {header!r}: grade {text.iloc[pos]!r} is not a number "
            f"({int(bad.sum())} such cell(s)); map the grades to numbers first (e.g. A=4, B=3) or map another "
            "column with --columns grade=HEADER"
        )
    raw_num = num
    if grade_scale is not None:
        num = num * grade_scale
    if round_grades:
        num = np.floor(num + 0.5 + 1e-9).where(num.notna())
    have = num.dropna()
    frac = num.notna() & (num != num.round())
    integer = not bool(frac.any())
    hist = have.value_counts().sort_index()
    first = int(np.flatnonzero(frac.to_numpy())[0]) if frac.any() else None
    report.grade = {
        "column": header,
        "header_scale": header_scale(header),
        "scaled_by": grade_scale,
        "rounded": int((num != raw_num * (grade_scale or 1.0)).sum()) if round_grades else None,
        "n_fractional": int(frac.sum()),
        "first_fractional": None if first is None else f"{where_row(report, first)}: {_num(float(num.iloc[first]))}",
        "min": float(have.min()) if len(have) else None,
        "max": float(have.max()) if len(have) else None,
        "integer": integer,
        "n_missing": int(num.isna().sum()),
        "histogram": {_num(float(k)): int(v) for k, v in zip(hist.index.tolist(), hist.tolist())},
        "booleans": bool(booleans.any()),
    }
    return num.astype("Int64") if integer else num


def _require_response(mapping: dict[str, str], headers: list[str], report: ImportReport, p: Path) -> None:
    """Fail, naming the headers (and the workbook's other sheets), when no column holds the answers."""
    if "response" not in mapping:
        sheets = ""
        if report.other_sheets:  # the answers may well be on another sheet of the workbook
            sheets = (f" of sheet {report.sheet!r} (the workbook's other sheets: "
                      f"{', '.join(map(repr, report.other_sheets))})")
        other = next((d for d in (";", "\t", "|") if len(headers) == 1 and d in headers[0]), None)
        delim = (f"; the header is one column holding {other!r}: save the file with commas (or as .tsv for tabs)"
                 if other else "")
        raise DataError(
            f"{p}: no column for the students' answers among the headers{sheets} ({', '.join(map(repr, headers))})"
            + delim,
            hint="name it with --columns response=HEADER" + (", or pick the sheet with --sheet NAME" if sheets else ""),
        )


def _mapped_items(
    raw: pd.DataFrame, mapping: dict[str, str], report: ImportReport, p: Path, grade_scale: float | None,
    round_grades: bool,
) -> pd.DataFrame:
    """The ItemTable's mapped columns but the id: text columns as text, grades read, questions stripped."""
    items = pd.DataFrame(index=raw.index)
    for key in ITEM_COLUMNS:
        if key in mapping and key not in ("id", "grade"):
            col = raw[mapping[key]]
            items[key] = col.map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    if "grade" in mapping:
        items["grade"] = _grades(raw[mapping["grade"]], report, mapping["grade"], p, grade_scale, round_grades)
    elif grade_scale is not None or round_grades:
        option = '--grade-scale' if grade_scale is not None else '--round-grades'
        raise DataError(f"{p}: {option} needs a grade column, "
                        "and none was found", hint="map it with --columns grade=HEADER")
    if "question" in items.columns:
        items["question"] = items["question"].fillna("").str.strip()
        report.n_questions = int(items["question"].nunique())
    return items


def _with_ids(
    items: pd.DataFrame, raw: pd.DataFrame, mapping: dict[str, str], report: ImportReport,
    id_prefix: str | None, p: Path,
) -> pd.DataFrame:
    """``items`` with ids (and ``student``): the file's answer ids (each given once, none empty:
    :func:`check_file_ids`), or, when it has no id column, ids made from the question and the student
    (stable across imports)."""
    student = text_ids(raw[mapping["student"]]) if "student" in mapping else None
    if student is not None:
        items["student"] = student
    id_col = mapping.get("id")
    if id_col is not None:
        file_ids = text_ids(raw[id_col])
        check_file_ids(file_ids, report, p, id_col)
        items.insert(0, "id", file_ids)
        return items
    report.ids = "made"
    made, report.id_rule = made_ids(items, student)
    if id_prefix:
        made, report.id_rule = id_prefix + made, f"{id_prefix}{report.id_rule}"
    items.insert(0, "id", made)
    return items


def check_file_ids(ids: pd.Series, report: ImportReport, p: Path, column: str) -> None:
    """Refuse an empty or repeated id in the file's own id column, naming the row a spreadsheet shows (ids the
    import makes are never checked here: they are unique by construction)."""
    rows = report.sheet_rows

    def row(pos: int) -> str:
        return f"row {rows[pos] if pos < len(rows) else pos + 2}"

    fix = ("make the ids unique, or pass --columns id= to leave the column out (kept as source_id) so "
           "ids are made from the question and the student")
    rows_are = f"rows as a spreadsheet numbers them, the header being row {report.header_row}"
    empty = ids.isna().to_numpy()
    if empty.any():
        first = int(np.flatnonzero(empty)[0])
        raise DataError(f"{p}: {row(first)}: empty id in column {column!r} ({int(empty.sum())} empty in all; "
                        f"{rows_are}); nothing written", hint=fix)
    dup = ids.duplicated(keep=False).to_numpy()
    if dup.any():
        first = int(np.flatnonzero(dup)[0])
        value = ids.iloc[first]
        again = [row(int(i)) for i in np.flatnonzero((ids == value).to_numpy())]
        where = " and ".join(again[:3]) + (" …" if len(again) > 3 else "")
        raise DataError(f"{p}: {where}: the id {value!r} of column {column!r} is used more than once "
                        f"({int(ids.duplicated().sum())} repeats in all; {rows_are}); nothing written", hint=fix)


def _keep_extra_columns(
    items: pd.DataFrame, raw: pd.DataFrame, headers: list[str], mapping: dict[str, str], report: ImportReport
) -> None:
    """Add the unmapped headers to ``items`` under their own names (``source_<name>`` when the name is taken)."""
    used = set(mapping.values())
    for h in headers:
        if h in used:
            continue
        name = h if h not in items.columns else f"source_{h}"
        col = raw[h]
        kinds = {type(v) for v in col.dropna().tolist()}
        if len(kinds) > 1:  # e.g. 101 and "s2" in one spreadsheet column: text, so every format can store it
            col = col.map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
        items[name] = col
        report.unused.append(h)


def _report_repeats(items: pd.DataFrame, report: ImportReport) -> pd.Series:
    """Report empty responses, repeated rows and repeated answers; returns which responses are empty."""
    resp = items["response"]
    empty = resp.isna() | resp.fillna("").str.strip().eq("")
    report.empty_responses = [
        f"{where_row(report, int(pos))} (id {items['id'].iloc[int(pos)]})" for pos in np.flatnonzero(empty.to_numpy())
    ]
    keyed = items.drop(columns="id").astype(str)  # every column of the file (made ids aside)
    dup = keyed.duplicated(keep="first")
    if dup.any():
        firsts = keyed.drop_duplicates(keep="first")
        first_pos = {tuple(r): i for i, r in zip(firsts.index, firsts.itertuples(index=False, name=None))}
        for pos in np.flatnonzero(dup.to_numpy()):
            row = tuple(keyed.iloc[int(pos)])
            report.duplicate_rows.append(f"{where_row(report, int(pos))} = {where_row(report, int(first_pos[row]))}")
    same_text = items.loc[~empty & ~dup, [c for c in ("question", "response") if c in items.columns]]
    report.duplicate_answers = int(same_text.assign(response=same_text["response"].str.strip().str.lower())
                                   .duplicated(keep=False).sum())
    return empty


def read_course_file(
    path: str | Path,
    columns: dict[str, str | None] | str | None = None,
    sheet: str | None = None,
    grade_scale: float | None = None,
    round_grades: bool = False,
    id_prefix: str | None = None,
) -> ImportedItems:
    """Read a course's answer file into an ItemTable plus a report of what was found; writes nothing.

    ``columns`` maps ItemTable columns to the file's headers (``{"response": "answer"}`` or the CLI's
    ``response=answer,...``); columns not given are guessed from :data:`HEADER_GUESSES`. Other headers
    are kept as extra columns; the student column (``student``) as ``student``. Ids: the file's answer-id column when
    its values are unique; otherwise (none, or repeated) ids made from the question and the student, the same for the
    same answer in every import of the course and never another's
    (:func:`~rubrictool.data.course_ids.made_ids`: ``q1/s101``), the file's ids kept as ``source_id``. Grades are
    multiplied by ``grade_scale`` and rounded half up with ``round_grades`` (half marks the trainer cannot use). Empty
    responses stay in the table and are listed in the report (:func:`write_course_items` refuses, drops or keeps
    them). ``id_prefix`` goes before every made id (``spring26/``).
    """
    p = Path(path)
    fmt = file_format(p)
    given = parse_columns(columns) if isinstance(columns, str) or columns is None else dict(columns)
    report = ImportReport(source=str(p), fmt=fmt)
    raw = data_rows(read_raw(p, fmt, sheet, report), report, p)
    headers = list(raw.columns)
    mapping, guessed = _map_columns(headers, given, p)
    report.mapping, report.guessed = mapping, guessed
    _require_response(mapping, headers, report, p)
    check_nul(raw, report, p)
    items = _mapped_items(raw, mapping, report, p, grade_scale, round_grades)
    items = _with_ids(items, raw, mapping, report, id_prefix, p)
    _keep_extra_columns(items, raw, headers, mapping, report)
    empty = _report_repeats(items, report)
    validate_items(items.loc[~empty.to_numpy()], str(p))  # what every later stage will check
    return ImportedItems(items.reset_index(drop=True), report)


def grade_problem(report: ImportReport, ungraded: bool = False) -> tuple[str, str] | None:
    """Why the trainer could not use the imported grades, and the fix, or None: no grade column (unless
    ``ungraded``: the answers are to be graded), a grade column with no grade in it, or grades that are not whole
    numbers (half marks). A grade column with ``ungraded`` is a contradiction too."""
    g = report.grade
    if ungraded:
        if g and g.get("min") is not None:
            return (f"--ungraded, but column {g['column']!r} holds grades",
                    "drop --ungraded to import them, or leave the column out with --columns grade=")
        return None
    if not g:
        return ("no grade column found, so a grader cannot train on these answers",
                ("map it with --columns grade=HEADER, or pass --ungraded if these answers are to be graded "
                "(`rubrictool grade`)"))
    if g.get("min") is None:
        return (f"the grade column {g['column']!r} is empty in every row",
                ("map the column that holds the grades with --columns grade=HEADER, or pass --ungraded if these "
                "answers are to be graded"))
    if g.get("n_fractional"):
        scale = next((k for k in (2, 4, 10, 100) if all(float(v) * k == round(float(v) * k) for v in g["histogram"])),
                     None)
        fix = (f"pass --grade-scale {scale} to count in 1/{scale} marks "
               f"(grades {g['min'] * scale:g}..{g['max'] * scale:g}), "
               if scale else "")
        return ((f"grade column {g['column']!r}: {g['n_fractional']} grade(s) are not whole numbers "
                f"({g['first_fractional']}); the trainer needs whole-number grades"),
                fix + "or --round-grades to round them half up, or map another column with --columns grade=HEADER")
    return None


def check_against(imported: ImportedItems, earlier: list[str | Path]) -> None:
    """Refuse ids that one of the course's ``earlier`` item tables gives to another answer (another response text):
    e.g. a student who answers the same question again in a later term. Names the first such id and the fix."""
    resp = dict(zip(imported.items["id"].astype(str), imported.items["response"].fillna("").astype(str)))
    for path in earlier:
        old = read_table(path)
        if not {"id", "response"} <= set(old.columns):
            raise DataError(f"--against {path}: not an item table (it needs id and response columns)")
        norm = " ".join
        clash = [(i, r) for i, r in zip(old["id"].astype(str), old["response"].fillna("").astype(str))
                 if i in resp and norm(resp[i].split()) != norm(r.split())]
        if clash:
            raise DataError(
                f"{imported.report.source}: {len(clash)} id(s) already name another answer in {path}, e.g. "
                f"{clash[0][0]!r}; nothing written",
                hint="pass --id-prefix TERM/ (e.g. --id-prefix spring26/) so this file's ids are its own")


def write_course_items(imported: ImportedItems, out: str | Path, drop_empty: bool = False, keep_empty: bool = False,
                       ungraded: bool = False) -> Path:
    """Write an imported ItemTable (CSV/JSONL/Parquet by the suffix of ``out``, atomically).

    Refused, with nothing written, when its grades cannot train a grader (:func:`grade_problem`; ``ungraded`` says
    the answers are to be graded instead). Empty responses (listed in the report) are refused — training reads no
    empty answer — unless ``drop_empty``, which leaves them out (``report.dropped_empty``), or ``keep_empty``, which
    keeps them for ``rubrictool grade`` to flag (``empty``) without grading."""
    o = Path(out)
    src = Path(imported.report.source)
    if o.exists() and src.exists() and o.resolve() == src.resolve():
        raise DataError(f"--out {o} is the file being imported; write the item table to another file")
    if drop_empty and keep_empty:
        raise DataError("--drop-empty and --keep-empty contradict each other; pass one")
    rep = imported.report
    problem = grade_problem(rep, ungraded)
    if problem is not None:
        raise DataError(f"{rep.source}: {problem[0]}; nothing written", hint=problem[1])
    items = imported.items
    if rep.empty_responses and not keep_empty:
        if not drop_empty:
            shown = "; ".join(rep.empty_responses[:5]) + (" ..." if len(rep.empty_responses) > 5 else "")
            raise DataError(
                f"{rep.source}: {len(rep.empty_responses)} empty response(s): {shown}; nothing written",
                hint="fill them in, pass --drop-empty to leave them out (they stay listed, never dropped silently), or "
                     "--keep-empty to keep them for `rubrictool grade` to flag",
            )
        resp = items["response"]
        items = items.loc[~(resp.isna() | resp.fillna("").str.strip().eq("")).to_numpy()].reset_index(drop=True)
        imported.items, rep.dropped_empty = items, True
    try:
        with output_lock(o, "data import"):  # one writer; then a killed import's temporary files are its own to clean
            stale = remove_stale_temps(o)
            if stale:
                rep.warnings.append(f"removed {len(stale)} temporary file(s) an interrupted import of {o} left: "
                                    + ", ".join(t.name for t in stale[:3]))
            path = write_table(items, o, for_people=True)
    except OSError as exc:  # a full disk, a read-only folder: the temporary file is removed, --out is as it was
        kept = f"{o} is as it was" if o.exists() else "nothing was written"
        raise DataError(f"cannot write the item table {o} ({exc.strerror or exc}); {kept}",
                        hint="free space or pass --out a path in a folder you can write") from None
    imported.report.n_written, imported.report.out = len(imported.items), str(path)
    return path


def import_items(
    path: str | Path,
    out: str | Path,
    columns: dict[str, str | None] | str | None = None,
    sheet: str | None = None,
    drop_empty: bool = False,
    keep_empty: bool = False,
    ungraded: bool = False,
    grade_scale: float | None = None,
    round_grades: bool = False,
) -> ImportedItems:
    """:func:`read_course_file`, then :func:`write_course_items` to ``out``."""
    imported = read_course_file(path, columns, sheet, grade_scale, round_grades)
    write_course_items(imported, out, drop_empty, keep_empty, ungraded)
    return imported
