"""``rubrictool data ...``: summarise, fetch and split benchmark data and item tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, TransferSpeedColumn
from rich.table import Table

from rubrictool.cli._common import (
    DataDirOpt,
    OutOpt,
    ProgressView,
    at_least,
    console,
    err_console,
    finite,
    handle_errors,
)
from rubrictool.cli._sanitize import shown
from rubrictool.errors import DataError

__all__ = ["app"]

app = typer.Typer(help="Benchmark data and item tables. Example: rubrictool data show mohler", no_args_is_help=True)


@app.command("show")
@handle_errors
def data_show(
    benchmark: Annotated[
        str, typer.Argument(help="Bundled benchmark (mohler, asap2, mocha) or an item file (CSV/JSONL/Parquet).")
    ] = "mohler",
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise a benchmark or item file: counts, grade histogram, response length, graders' agreement.

    Example: rubrictool data show asap2 --data-dir ../shared/datasets
    """
    from rubrictool.data import describe_benchmark

    s = describe_benchmark(benchmark, data_dir)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    console.print(
        f"[bold]{shown(benchmark)}[/]: {s['n_items']} answers over {s['n_questions']} questions; mean response "
        f"{s['mean_response_words']} words (median {s['median_response_words']:g}, longest {s['max_response_words']})"
    )
    for col, counts in s.get("by", {}).items():
        console.print(f"by {col}: " + ", ".join(f"{shown(k)} {v}" for k, v in counts.items()), soft_wrap=True)
    hist = Table(title="grade histogram")
    hist.add_column("grade")
    hist.add_column("answers", justify="right")
    hist.add_column("share", justify="right")
    for g, n in s["grade_histogram"].items():
        hist.add_row(str(g), str(n), f"{n / s['n_items']:.1%}")
    console.print(hist)
    if s["graders"]:
        gr = s["graders"]
        console.print(
            f"graders (me vs other, 0..5): exact agreement {gr['exact_agreement']:.1%}, within 1 point "
            f"{gr['within_one_point']:.1%}, Pearson r {gr['pearson_r']:.3f}, mean |diff| {gr['mean_abs_diff']:.3f}"
        )


@app.command("fetch")
@handle_errors
def data_fetch(
    benchmark: Annotated[str, typer.Argument(help="Benchmark to download (mohler, asap2, mocha).")] = "mohler",
    dest: Annotated[
        Path | None, typer.Option("--dest", help="Data folder (default: $RUBRICTOOL_DATA, else ./data).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help=(
            "http(s):// or file:// URL, or a local .zip/.tar path (default: the authors' archive); "
            "for asap2, 'kaggle' downloads the competition's files with KAGGLE_USERNAME/KAGGLE_KEY."
        )),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Download again even if the data is there.")] = False,
) -> None:
    """Download and unpack a benchmark into <dest>/<benchmark> (checked, atomic, idempotent).

    Example: rubrictool data fetch mocha --dest data/
    """
    from rubrictool.data import fetch_benchmark

    columns = ("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
    # only a real download shows a bar
    with ProgressView(err_console, *columns, transient=True, start_on_first=True) as view:
        path, fetched = fetch_benchmark(benchmark, dest, url, force, progress=view)
    console.print(f"{'fetched' if fetched else 'already present'}: {path}", soft_wrap=True)


@app.command("export")
@handle_errors
def data_export(
    benchmark: Annotated[str, typer.Argument(help="Bundled benchmark (mohler, asap2, mocha).")],
    out: OutOpt = Path("items.jsonl"),
    limit: Annotated[int | None, typer.Option(
        "--limit", callback=at_least(1), help="Keep only the first N items.",
    )] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Write a benchmark's item table (every column) to a CSV/JSONL/Parquet file, e.g. for `review push --items`.

    Example: rubrictool data export asap2 --limit 200 --out asap2-items.jsonl
    """
    from rubrictool.data import export_benchmark
    from rubrictool.outputs import check_output, has_columns

    check_output(out, [data_dir], "file", own=has_columns("id", "response"), what="an item table")
    path, n = export_benchmark(benchmark, out, data_dir, limit)
    console.print(f"wrote {path}: {n} items", soft_wrap=True)


@app.command("split")
@handle_errors
def data_split(
    source: Annotated[
        str, typer.Argument(help="Bundled benchmark name (mohler, asap2, mocha) or an item file (CSV/JSONL/Parquet).")
    ],
    out: OutOpt = Path("split.json"),
    seed: Annotated[int, typer.Option("--seed", help="Random seed; the same seed gives the same split.")] = 0,
    ratios: Annotated[str, typer.Option("--ratios", help="train,dev,test shares.")] = "0.7,0.2,0.1",
    data_dir: DataDirOpt = None,
    by: Annotated[str | None, typer.Option("--by", help=(
        "Keep every value of this column in one part, e.g. question: no question in both train and test "
        "(whole questions assigned, balancing sizes and grades)."))] = None,
) -> None:
    """Write a deterministic train/dev/test split (stratified by grade) as JSON; --by question for new questions.

    Example: rubrictool data split mohler --seed 0 --out runs/mohler/split.json

    Example: rubrictool data split items.csv --by question --out split-by-question.json
    """
    from rubrictool.data import split_to_file

    try:
        parts = tuple(float(x) for x in ratios.split(","))
    except ValueError:
        raise DataError(f"--ratios {ratios!r}: give three numbers like 0.7,0.2,0.1") from None
    if len(parts) != 3:
        raise DataError(f"--ratios {ratios!r}: give exactly three shares (train,dev,test)")
    from rubrictool.outputs import check_output, is_split_file

    check_output(out, [source], "file", own=is_split_file, what="a split file")  # never the items, nor another file
    sizes = split_to_file(source, out, seed, (parts[0], parts[1], parts[2]), data_dir, by)
    console.print(f"wrote {out}: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + f" (seed {seed}"
                  + (f", grouped by {by})" if by else ")"), soft_wrap=True)


def _import_lines(rep: Any) -> list[str]:
    """What `data import` found, one statement per line (the library's ImportReport, in words)."""
    lines = []
    others = f"; other sheets: {', '.join(map(repr, rep.other_sheets))}" if rep.other_sheets else ""
    where = f" (sheet {rep.sheet!r}" + others + ")" if rep.sheet else ""
    lines.append(f"read {rep.source}{where}: {rep.n_rows} "
                 "rows" + (f" ({rep.blank_rows} blank row(s) skipped)" if rep.blank_rows else ""))
    shown = [f"{k} <- {rep.mapping[k]!r}" + (" (guessed)" if k in rep.guessed else "") for k in
             ("id", "student", "question", "response", "reference", "context", "grade") if k in rep.mapping]
    lines.append("columns: " + ", ".join(shown))
    missing = [k for k in ("question", "reference", "grade") if k not in rep.mapping]
    if missing:
        lines.append(f"no column found for: {', '.join(missing)} (map one with --columns {missing[0]}=HEADER)")
    if rep.unused:
        lines.append("kept as extra columns: " + ", ".join(map(repr, rep.unused)))
    made = rep.id_rule or "<question>/<student>"
    if rep.ids == "made":
        lines.append(f"ids: the file has no answer-id column; made ids {made}, the same for the same question and "
                     "student in every import: another term's file whose students are named the same (Student 1, …) "
                     "gets the same ids; import it with --against THIS_TABLE (checked) or --id-prefix TERM/")
    else:
        lines.append(f"ids: column {rep.mapping['id']!r}, all unique")
    if rep.n_questions is not None:
        lines.append(f"questions: {rep.n_questions}")
    g = rep.grade
    if g:
        if g["min"] is None:
            lines.append(f"grade ({g['column']!r}): every cell is empty")
        else:
            hist = ", ".join(f"{k}: {v}" for k, v in g["histogram"].items())
            kind = "integers" if g["integer"] else "NOT all integers (the trainer needs integer grades)"
            hs = g.get("header_scale")
            lines.append(
                f"grade ({g['column']!r}): {g['min']:g}..{g['max']:g}, {kind}; answers per grade {hist}"
                + (f"; {g['n_missing']} missing" if g["n_missing"] else "")
                + ("; true/false read as 1/0" if g["booleans"] else "")
                + (f"; multiplied by {g['scaled_by']:g} (--grade-scale)" if g.get("scaled_by") is not None else "")
                + (f"; {g['rounded']} rounded half up (--round-grades)" if g.get("rounded") is not None else "")
                + (f"; the header says {hs[0]:g}..{hs[1]:g}" if hs and g.get("scaled_by") is None else "")
            )
            lines.append(f"  in the rubric: grade: {{min: {g['min']:g}, max: {g['max']:g}}} (or "
                         "--grade-min/--grade-max of rubric new)")
    if rep.delimiter:
        lines.append(f"delimiter: {rep.delimiter!r} (the header holds no comma)")
    lines += [f"warning: {w}" for w in rep.warnings]
    if rep.empty_responses:
        lines.append(f"empty responses: {len(rep.empty_responses)}: " + "; ".join(rep.empty_responses[:10])
                     + (" ..." if len(rep.empty_responses) > 10 else ""))
    else:
        lines.append("empty responses: none")
    if rep.duplicate_rows:
        lines.append(f"repeated rows: {len(rep.duplicate_rows)} row(s) repeat an earlier row in every column: "
                     + "; ".join(rep.duplicate_rows[:10]) + (" ..." if len(rep.duplicate_rows) > 10 else "")
                     + " (kept; delete them in the file if they were pasted twice)")
    else:
        lines.append("repeated rows: none")
    if rep.duplicate_answers:
        lines.append(f"{rep.duplicate_answers} answers share their text with another answer to the same question "
                     "(kept)")
    return lines


@app.command("import")
@handle_errors
def data_import(
    file: Annotated[Path, typer.Argument(help="The course's answer file: .csv, .tsv, .jsonl, .parquet or .xlsx.")],
    out: OutOpt = Path("items.csv"),
    columns: Annotated[
        str | None,
        typer.Option("--columns", help=(
            "Map item-table columns to the file's headers, e.g. "
            "response=answer,reference=reference_answer,grade=correct "
            "(id, question, response, reference, context, grade; 'grade=' maps none). Unmapped ones are guessed."
        )),
    ] = None,
    sheet: Annotated[str | None, typer.Option("--sheet", help="XLSX sheet to read (default: the first).")] = None,
    drop_empty: Annotated[
        bool, typer.Option(
            "--drop-empty", help="Leave out answers with an empty response (listed); without it they stop the import.",
        )
    ] = False,
    keep_empty: Annotated[
        bool, typer.Option(
            "--keep-empty", help="Keep answers with an empty response (listed), for `grade` to flag as empty.",
        )
    ] = False,
    ungraded: Annotated[
        bool, typer.Option("--ungraded", help="The answers are to be graded: import them without a grade column.")
    ] = False,
    grade_scale: Annotated[
        float | None, typer.Option(
            "--grade-scale", callback=finite(0, open_lo=True),
            help="Multiply every grade by this, e.g. 2 to count half marks (0..5 in halves -> 0..10).",
        )
    ] = None,
    round_grades: Annotated[
        bool, typer.Option("--round-grades", help="Round grades that are not whole numbers half up (2.5 -> 3).")
    ] = False,
    against: Annotated[list[Path] | None, typer.Option("--against", help=(
        "An earlier item table of the course (repeatable): refuse ids it gives to another answer."))] = None,
    id_prefix: Annotated[str | None, typer.Option(
        "--id-prefix", help="Put this before every made id, e.g. spring26/.",
    )] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what the import finds; write nothing.")] = False,
) -> None:
    """Import a course's own answer file (its own headers) as an item table every later stage reads.

    Guesses the columns (answer/response/student_answer, reference_answer/model_answer/key, score/grade/mark/
    points/correct, also with a scale after the name as in 'Score (0-5)', question/prompt/item/Q#, student/student_id,
    id, ...) case- and space-insensitively and prints the mapping; makes ids from the question and the student
    (q1/s101: the same answer gets the same id in every import of the course, another answer never) when the file
    has no answer ids; reports the grade scale, empty responses and repeated rows before anything is written.

    A table a grader cannot train on is refused, nothing written: no grade column (pass --ungraded when the answers
    are to be graded), or grades that are not whole numbers (--grade-scale, --round-grades).

    Example: rubrictool data import science.xlsx --out items.csv --columns response=answer,grade=correct

    Example: rubrictool data import next-term.xlsx --ungraded --keep-empty --against items.csv --out new-answers.csv
    """
    from rubrictool.data.importer import check_against, grade_problem, read_course_file, write_course_items
    from rubrictool.outputs import check_output, has_columns, writable_parent

    if not dry_run:  # before reading: an output that would replace the answers, or that cannot be written
        check_output(out, [file, *(against or [])], "file", own=has_columns("id", "response"), what="an item table",
                     required=[file, *(against or [])])
        writable_parent(out)
    imported = read_course_file(file, columns, sheet, grade_scale, round_grades, id_prefix)
    for line in _import_lines(imported.report):
        console.print(shown(line), soft_wrap=True, highlight=False)
    if dry_run:
        problem = grade_problem(imported.report, ungraded)
        if problem is not None:
            err_console.print(shown(f"the import would be refused: {problem[0]} ({problem[1]})"), soft_wrap=True,
                              highlight=False)
        console.print("dry run: nothing written", highlight=False)
        return
    if against:
        check_against(imported, list(against))
    before = len(imported.report.warnings)
    path = write_course_items(imported, out, drop_empty, keep_empty, ungraded)
    for w in imported.report.warnings[before:]:  # e.g. a killed import's temporary files, removed
        err_console.print(f"[yellow]note:[/] {shown(w)}", soft_wrap=True, highlight=False)
    kept = imported.report.empty_responses if keep_empty else []
    n_empty = len(imported.report.empty_responses)
    left = f" ({n_empty} empty response(s) left out)" if imported.report.dropped_empty else ""
    left += f" ({len(kept)} empty response(s) kept: `grade` flags them)" if kept else ""
    console.print(f"wrote {shown(str(path))}: {imported.report.n_written} items{left}", soft_wrap=True, highlight=False)
