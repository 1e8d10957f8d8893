"""``rubrictool rubric ...``: list, show, validate, scaffold, lint and export rubric inventories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rubrictool.cli._common import (
    OldDataOpt,
    OldRubricArg,
    OptionalRunOpt,
    at_least,
    console,
    err_console,
    folds_or_none,
    given,
    handle_errors,
    renamed,
)
from rubrictool.cli._sanitize import shown
from rubrictool.rubric import (
    Rubric,
    lint_rubric,
    load_rubric,
    new_rubric_file,
    rubric_infos,
    validate_rubric_files,
    write_export,
)

__all__ = ["app", "rubric_table"]

app = typer.Typer(help="Rubric inventories (YAML). Example: rubrictool rubric show --rubric mohler",
                  no_args_is_help=True)

# The rubric a command reads is --rubric/-r, as everywhere; the argument form works for one release.
ThisRubricOpt = Annotated[str | None, typer.Option(
    "--rubric", "-r", help="Bundled rubric name (mohler, asap2, mocha) or a YAML path; required.",
    show_default=False)]


def the_rubric(option: str | None, argument: str | None) -> str:
    """The rubric given by --rubric/-r or, for one release, as the old positional argument (a note); both or
    neither: one line, exit 2."""
    value = renamed("--rubric", option, "the RUBRIC argument", argument, note=(
        "the rubric as an argument is renamed --rubric/-r here; the argument will be removed in the next "
        "release"))
    return given("--rubric", value, "give --rubric NAME (a bundled rubric) or --rubric PATH (a YAML file)")


def rubric_table(rubric: Rubric) -> Table:
    """One row per concept, one column per level anchor."""
    table = Table(
        title=f"{rubric.title} ({rubric.name} v{rubric.version}) — grades {rubric.grade.min}..{rubric.grade.max}",
        show_lines=True,
    )
    table.add_column("Concept", ratio=2)
    table.add_column("Definition", ratio=3)
    for v in rubric.scale.values:
        table.add_column(str(v), ratio=1)
    for c in rubric.concepts:
        group = f"\n[dim]{shown(c.group)}[/]" if c.group else ""
        holds = [t for t, on in (("reference: top", c.reference_is_top),
                                 ("off-topic: bottom", c.off_topic_is_bottom)) if on]
        marks = f"\n[dim]{' · '.join(holds)}[/]" if holds else ""  # what holds on every question
        table.add_row(
            f"[bold]{shown(c.key)}[/] {shown(c.name)}{group}{marks}", shown(c.definition),
            *(shown(lv.anchor) + (f" [dim]({lv.points:g} pts)[/]" if lv.points is not None else "") for lv in c.levels),
        )
    return table


@app.command("list")
@handle_errors
def rubric_list(
    folder: Annotated[
        Path | None, typer.Option("--folder", "-f", help="Also list the *.yaml rubrics in this folder.")
    ] = None,
) -> None:
    """List the bundled rubrics and any in --folder (or $RUBRICTOOL_RUBRICS); broken files show their error.

    Example: rubrictool rubric list --folder my_rubrics/
    """
    table = Table(title="Rubrics")
    for col in ("name", "concepts", "levels", "grades", "version", "title / error", "path"):
        table.add_column(col)
    for info in rubric_infos(folder):
        where = "(bundled)" if info.bundled else str(info.path)
        if info.error:
            table.add_row(shown(info.name), "", "", "", "", f"[red]{shown(info.error)}[/]", shown(where))
        else:
            table.add_row(shown(info.name), str(info.n_concepts), info.scale, info.grade, shown(info.version),
                          shown(info.title), shown(where))
    console.print(table)


@app.command("show")
@handle_errors
def rubric_show(
    option: ThisRubricOpt = None,
    argument: OldRubricArg = None,
) -> None:
    """Show a rubric as a table: one row per concept, one column per level anchor.

    Example: rubrictool rubric show --rubric mohler
    """
    console.print(rubric_table(load_rubric(the_rubric(option, argument))))


@app.command("validate")
@handle_errors
def rubric_validate(
    paths: Annotated[list[Path], typer.Argument(help="Rubric YAML files to check.")],
) -> None:
    """Check rubric files; print every problem as `file:line: field: message`; exit 1 if any file is bad.

    Example: rubrictool rubric validate rubrics/*.yaml
    """
    results = validate_rubric_files(list(paths))
    n_bad = 0
    for path, errors in results.items():
        if errors:
            n_bad += 1
            for line in errors:
                typer.echo(line)
        else:
            typer.echo(f"ok: {path}")
    if n_bad:
        err_console.print(f"{n_bad} of {len(results)} rubric file(s) have errors", highlight=False)
        raise typer.Exit(1)


@app.command("new")
@handle_errors
def rubric_new(
    concepts: Annotated[str, typer.Option("--concepts", "-c", help="Comma-separated concept keys, e.g. FC,CC,TU.")],
    name_opt: Annotated[str | None, typer.Option(
        "--name", show_default=False, help="Rubric id, e.g. cs101 (letters, digits, _ . -); required.",
    )] = None,
    levels_opt: Annotated[int | None, typer.Option(
        "--levels", callback=at_least(2), show_default=False,
        help="Ordinal levels per concept (1..N); default 3.")] = None,
    grade_min: Annotated[int, typer.Option("--grade-min", help="Lowest holistic grade.")] = 0,
    grade_max: Annotated[int, typer.Option("--grade-max", help="Highest holistic grade.")] = 5,
    title: Annotated[str | None, typer.Option("--title", help="Course / benchmark title.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write (default: <name>.yaml).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    old_n: Annotated[str | None, typer.Option("-n", hidden=True, help="Old short flag of --name.")] = None,
    old_l: Annotated[int | None, typer.Option("-l", hidden=True, callback=at_least(2),
                                              help="Old short flag of --levels.")] = None,
) -> None:
    """Scaffold a commented rubric YAML for a new course; it validates as is, then replace the TODOs.

    Example: rubrictool rubric new --name cs101 --concepts FC,CC,TU --levels 3 --out cs101.yaml
    """
    name = given("--name", renamed("--name", name_opt, "-n", old_n),
                 "give --name ID, e.g. --name cs101")
    levels = renamed("--levels", levels_opt, "-l", old_l) or 3
    keys = [k.strip() for k in concepts.split(",") if k.strip()]
    _check_out(out or Path(f"{name}.yaml"), [])  # one writer (an existing file: --force decides)
    path = new_rubric_file(out or Path(f"{name}.yaml"), name, keys, levels, grade_min, grade_max, title, force)
    console.print(
        f"wrote {path} ({len(keys)} concepts, levels 1..{levels}); next: rubrictool rubric lint -r {path}",
        soft_wrap=True
    )


@app.command("lint")
@handle_errors
def rubric_lint(
    option: ThisRubricOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when there is any warning.")] = False,
    similarity: Annotated[
        float, typer.Option("--similarity", help="TF-IDF cosine above which two definitions count as near-duplicates.")
    ] = 0.5,
    argument: OldRubricArg = None,
) -> None:
    """Warn about near-duplicate definitions, repeated anchors, concepts or levels without examples, TODOs.

    Exit 0 with warnings listed; with --strict exit 1 if there are any.

    Example: rubrictool rubric lint --rubric mohler --strict
    """
    rubric = the_rubric(option, argument)
    warnings = lint_rubric(load_rubric(rubric), similarity=similarity)
    for w in warnings:
        typer.echo(f"warning: {w}")
    typer.echo(f"{len(warnings)} warning(s) in {rubric}")
    if strict and warnings:
        raise typer.Exit(1)


@app.command("export")
@handle_errors
def rubric_export(
    option: ThisRubricOpt = None,
    out_format: Annotated[
        str, typer.Option("--out-format", "-F", help="markdown (the paper's table layout) or json.")
    ] = "markdown",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")] = None,
    argument: OldRubricArg = None,
) -> None:
    """Export a rubric as a Markdown table (Concept | Definition | Example | Score scale) or as JSON.

    Example: rubrictool rubric export --rubric mocha --out-format markdown --out mocha.md
    """
    rubric = the_rubric(option, argument)
    if out is not None:
        _check_out(out, [rubric])
    text = write_export(rubric, out_format, out)
    if out is None:
        typer.echo(text, nl=False)
    else:
        console.print(f"wrote {out}", soft_wrap=True)


def _check_out(out: Path, inputs: list[object], own_column: str | None = None) -> None:
    """The output rule (rubrictool.outputs): never an input; for a table, never a file that is not one it wrote."""
    from rubrictool.outputs import check_output, has_columns

    check_output(out, [str(i) for i in inputs if i is not None], "file",
                 own=has_columns(own_column) if own_column else None)


@app.command("points")
@handle_errors
def rubric_points(
    labels: Annotated[Path, typer.Option("--labels", "-l", help=(
        "Concept levels of the answers: LLM labels (annotate's predictions), an adjudicated table, or a run's "
        "test_predictions.csv / pooled_predictions.csv."))],
    option: Annotated[str | None, typer.Option("--rubric", "-r", show_default=False, help=(
        "A rubric with `points:` on every level (YAML path or bundled name); required."))] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write id, points_total, points_grade (and grade) here.",
    )] = None,
    argument: OldRubricArg = None,
) -> None:
    """Grade answers from their concept levels alone with the rubric's own points: no training (a cold start).

    When the file has gold grades (an adjudicated table, a run's pooled_predictions.csv) the points grades are
    scored against them (T-Acc, T-F1, QWK, ...).

    Example: rubrictool rubric points -r cs101.yaml --labels annotations/predictions.jsonl --out graded.csv
    """
    from rubrictool.points import grade_file

    rubric = the_rubric(option, argument)
    if out is not None:
        _check_out(out, [rubric, labels], "points_total")
    table, metrics, kind = grade_file(rubric, labels, out)
    n_ok = int(table["points_grade"].notna().sum())
    console.print(f"{n_ok} of {len(table)} answers graded from {kind} with the points of {rubric}", soft_wrap=True,
                  highlight=False)
    if n_ok < len(table):
        err_console.print(f"{len(table) - n_ok} answer(s) lack a level for some concept: no points "
                          "grade", highlight=False)
    hist = table["points_grade"].value_counts().sort_index()
    console.print("points grades: " + ", ".join(f"{g}: {n}" for g, n in hist.items()), highlight=False)
    if metrics:
        in_sample = metrics.get("in_sample") == 1.0
        console.print("against the gold grades (n = {n:.0f}): T-Acc {t_acc:.3f}, T-F1 {t_f1:.3f}, QWK {qwk:.3f}".format(
            **metrics) + (f", adjacent {metrics['adjacent']:.3f}" if "adjacent" in metrics else "")
            + (" (in-sample)" if in_sample else ""), highlight=False)
        if in_sample:
            console.print("in-sample: these points were fitted to these answers' grades, so the figures above flatter "
                          "them; `rubric fit-points` prints how they grade answers they were not fitted to "
                          "(cross-validated)", soft_wrap=True, highlight=False)
    if out is not None:
        console.print(f"wrote {out}", soft_wrap=True)


@app.command("fit-points")
@handle_errors
def rubric_fit_points(
    out: Annotated[Path, typer.Option("--out", "-o", help="The rubric with the suggested points (and OUT.diff).")],
    option: Annotated[str | None, typer.Option("--rubric", "-r", show_default=False, help=(
        "Rubric name or YAML path (without points, or points to replace); required."))] = None,
    table: Annotated[Path | None, typer.Option(
        "--table", help="Graded answers with gold concept levels (adjudicated table).")] = None,
    run: OptionalRunOpt = None,
    fit: Annotated[str, typer.Option("--fit", help=(
        "ordinal: points and the cut-points between grades fitted together, so every grade of the scale can be given; "
        "least-squares: the grade regressed on the levels, the total read as the grade."))] = "ordinal",
    folds: Annotated[int, typer.Option("--folds", callback=folds_or_none, help=(
        "Cross-validate the fit with this many folds (each graded by points fitted to the others); 0 skips it."))] = 5,
    argument: OldRubricArg = None,
    old_data: OldDataOpt = None,
) -> None:
    """Suggest points per level for a rubric that has none: fitted to graded answers (--table), or read from
    grade head's weights of a trained run (--run).

    The suggestion is the rubric's own YAML with `points:` on every level and a `grading:` block (with --fit ordinal,
    `map: thresholds`: the least total for each grade), validated, plus its diff: accept it as is, or round the points
    and edit. Fitted to graded answers, it prints the grades the table can give, its in-sample figures (marked so),
    and its cross-validated T-Acc and QWK with 95 % bootstrap CIs beside the majority class.

    Example: rubrictool rubric fit-points -r mohler --table adjudicated/adjudicated.csv --out points.yaml
    """
    from rubrictool.points import FIT_METHODS, reachable_grades, suggest_points, write_suggestion

    rubric = the_rubric(option, argument)
    data = renamed("--table", table, "--data", old_data)
    if fit not in FIT_METHODS:
        raise typer.BadParameter(f"use one of {', '.join(FIT_METHODS)}", param_hint="--fit")
    _check_out(out, [rubric, data, run])

    sugg = suggest_points(rubric, data, run, method=fit, folds=folds)
    f = sugg.fitted
    rb = sugg.rubric
    t = Table(title=f"suggested points per level ({f.source})")
    t.add_column("concept")
    for v in rb.scale.values:
        t.add_column(f"level {v}", justify="right")
    for c, row in zip(rb.concepts, f.points):
        t.add_row(c.key, *(f"{p:g}" for p in row))
    console.print(t)
    if f.grading.get("map") == "thresholds":
        cuts = ", ".join(f"{rb.grade.min + i + 1} from {c:g}" for i, c in enumerate(f.grading["thresholds"]))
        console.print(f"grades by total: {rb.grade.min} below {f.grading['thresholds'][0]:g}, {cuts}", soft_wrap=True,
                      highlight=False)
    reach = [int(g) for g in reachable_grades(rb, f.points, f.grading)]
    every = list(range(rb.grade.min, rb.grade.max + 1))
    if reach == every:
        console.print(f"grades the table can give: all of {rb.grade.min}..{rb.grade.max}", highlight=False)
    else:
        never = [g for g in every if g not in reach]
        err_console.print(f"warning: no concept profile earns grade{'s' if len(never) > 1 else ''} "
                          f"{', '.join(map(str, never))}: the table never gives {'them' if len(never) > 1 else 'it'}",
                          soft_wrap=True, highlight=False)
    fit_line = f"R² {f.r2:.3f} over {f.n} {'answers' if data else 'concept profiles'}"
    if f.t_acc is not None and f.qwk is not None:
        fit_line += (f"; in-sample (on the {f.n} answers it was fitted to, not a measure of new answers): "
                     f"T-Acc {f.t_acc:.3f}, QWK {f.qwk:.3f}")
    console.print(fit_line, soft_wrap=True, highlight=False)
    if f.cv is not None:
        cv, ci, maj, vs = f.cv, f.cv["ci"], f.cv["majority"], f.cv["vs_majority"]
        console.print(
            f"cross-validated ({cv['folds']} folds, each answer graded by points fitted to the others): "
            f"T-Acc {ci['t_acc']['value']:.3f} [{ci['t_acc']['lo']:.3f}, {ci['t_acc']['hi']:.3f}], "
            f"QWK {ci['qwk']['value']:.3f} [{ci['qwk']['lo']:.3f}, {ci['qwk']['hi']:.3f}] (95 % bootstrap CIs)",
            soft_wrap=True, highlight=False)
        console.print(
            f"majority class (always grade {maj['grade']}): T-Acc {maj['t_acc']:.3f}, QWK {maj['qwk']:.3f}; points − "
            f"majority T-Acc {vs['diff']:+.3f} [{vs['lo']:+.3f}, {vs['hi']:+.3f}]", soft_wrap=True, highlight=False)
        for w in cv["warnings"]:
            msg = w["message"].replace("the model", "the points table").replace("T-Acc is not", "its T-Acc is not")
            err_console.print(f"warning: cross-validated, {msg}", soft_wrap=True, highlight=False)
    elif data is not None and folds >= 2:
        err_console.print(f"note: too few answers to cross-validate with {folds} folds: only in-sample figures",
                          soft_wrap=True, highlight=False)
    paths = write_suggestion(sugg, out)
    console.print(f"wrote {paths[0]} (validates) and {paths[1]}", soft_wrap=True)
