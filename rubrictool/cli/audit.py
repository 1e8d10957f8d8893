"""``rubrictool audit``: the gaming audit of a trained run (:mod:`rubrictool.audit`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from rubrictool.cli._common import (
    DataDirOpt,
    OldDataOpt,
    ProgressView,
    RunOpt,
    RunTableOpt,
    VerifyOpt,
    at_least,
    console,
    err_console,
    print_warnings,
    renamed,
)
from rubrictool.cli._sanitize import shown

if TYPE_CHECKING:
    from rubrictool.behaviour import BehaviourResult

__all__ = ["audit_cmd"]


def audit_cmd(
    run: RunOpt,
    table: RunTableOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Folder for audit.csv/.md/.json/.png (default RUN/audit).",
    )] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the filler choice and the shuffles.")] = 0,
    transform: Annotated[list[str] | None, typer.Option(
        "--transform", help="Only these transformations (repeatable; default all: append_reference, append_keywords, "
        "append_question, append_filler, repeat_sentence, shuffled_correct).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", callback=at_least(1), help="Items per forward pass.")] = 32,
    filler: Annotated[Path | None, typer.Option(
        "--filler", help="Filler sentences for append_filler, one per line (default: sentences of the course's own "
        "training answers to other questions).")] = None,
    pairs: Annotated[Path | None, typer.Option(
        "--pairs", help="Minimal pairs for the behavioural tests (JSONL: question_id, right, wrong, changed, note, "
        "provenance); those whose question the run's table holds are graded.")] = None,
    behaviour: Annotated[bool, typer.Option(
        "--behaviour/--no-behaviour", help="Also run the behavioural tests (typos, negation, ...) on the same "
        "answers.")] = True,
    data_dir: DataDirOpt = None,
    verify: VerifyOpt = False,
    old_data: OldDataOpt = None,
) -> None:
    """How far standard gaming moves a trained grader, on the run's test split.

    Appends the reference, its keywords, the question, filler or a repeated sentence to every test
    answer, or replaces it by a shuffled copy of a correct answer, and grades every version: mean grade
    shift, share of answers whose grade rises, mean shift of each concept's level, and how many gamed
    answers the `grade` flags catch. Then the behavioural tests: edits that must not move a mark (a
    full stop, case, a one-letter typo, sentence order, a synonym, the student's name), edits that must
    lower it (a "not", the key term swapped) or must not raise it, and minimal pairs (--pairs); a test
    that misses its target is named in words. Writes a table (CSV/MD/JSON) and a PNG.

    Example: rubrictool audit --run runs/mohler-reccbm --out audit/
    """
    from rubrictool.audit import audit_run, write_audit
    from rubrictool.io import writable_dir
    from rubrictool.outputs import check_output
    from rubrictool.train.runs import require_run_dir, verify_runs_fully

    data = renamed("--table", table, "--data", old_data)
    if verify:
        verify_runs_fully()
    require_run_dir(run)  # a mistyped --run is one line, and nothing is created for it
    check_output(out or run / "audit", [run, data, filler, pairs], "folder", in_run=True,
                 required=[data, filler, pairs], what="the audit",
                 writes=["audit.csv", "audit_items.csv", "audit.md", "audit.json", "audit.png"])
    writable_dir(out or run / "audit")
    with ProgressView(err_console, transient=True) as view:
        res = audit_run(run, data=data, data_dir=data_dir, seed=seed, batch_size=batch_size,
                        transformations=transform, progress=view, filler=filler, behaviour=behaviour, pairs=pairs)
    paths = write_audit(res, out or run / "audit")
    print_warnings(res.warnings)
    if res.constant_grade is not None:  # every shift is +0.000 by construction: no table that reads as "robust"
        console.print(f"[bold red]The model is constant:[/] {res.constant}.", soft_wrap=True, highlight=False)
        for n in res.notes:
            console.print(f"[yellow]note:[/] {shown(n)}", soft_wrap=True, highlight=False)
        console.print(f"wrote {paths['md']}, {paths['png'].name}, audit.csv/.json/_items.csv", soft_wrap=True)
        return
    if res.constant:
        console.print(f"[bold red]warning:[/] {res.constant}.", soft_wrap=True, highlight=False)
    t = Table(title=f"gaming audit: {res.n} test answers (honest answers flagged: {100 * res.honest_flagged:.1f} %)")
    for col in ("transformation", "mean grade shift", "grade rises", "flagged"):
        t.add_column(col, justify="left" if col == "transformation" else "right")
    for r in res.summary.to_dict(orient="records"):
        t.add_row(r["transformation"], f"{r['mean_grade_shift']:+.3f}", f"{100 * r['share_raised']:.1f} %",
                  f"{100 * r['share_flagged']:.1f} %")
    console.print(t)
    for n in res.notes:
        console.print(f"[yellow]note:[/] {shown(n)}", soft_wrap=True, highlight=False)
    if res.behaviour is not None:
        _print_behaviour(res.behaviour)
    also = ", behaviour.json/_items.csv" if res.behaviour is not None else ""
    console.print(f"wrote {paths['md']}, {paths['png'].name}, audit.csv/.json/_items.csv{also}", soft_wrap=True)


def _print_behaviour(b: BehaviourResult) -> None:
    """The behavioural tests as a table, then each failing test in words."""
    from rubrictool.behaviour import failing_sentences

    t = Table(title=f"behavioural tests: {b.n} test answers")
    for col in ("test", "answers", "marks changed", "mean shift", "expected", "meets target"):
        t.add_column(col, justify="left" if col in ("test", "expected") else "right", no_wrap=col == "test")
    for r in b.summary.to_dict(orient="records"):
        expect = {"same": "stays", "falls": "falls", "not_up": "does not rise",
                  "right_above": "right > wrong"}[r["expect"]]
        changed = "—" if r["kind"] == "minimum functionality" else f"{100 * r['share_changed']:.1f} %"
        verdict = "—" if r["passes"] is None else ("yes" if r["passes"] else "[bold red]no[/]")
        t.add_row(r["test"], str(r["n"]), changed, f"{r['mean_shift']:+.2f}", expect, verdict)
    console.print(t)
    for s in failing_sentences(b.summary):
        console.print(f"[bold red]fails:[/] {shown(s)}", soft_wrap=True, highlight=False)
    for n in b.notes:
        console.print(f"[yellow]note:[/] {shown(n)}", soft_wrap=True, highlight=False)
