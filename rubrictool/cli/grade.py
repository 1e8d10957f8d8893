"""``rubrictool grade``: marks for new answers, held answers and the review queue, the quality card, the gradebook back.

``rubrictool.marks`` loads torch (seconds), so it is imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rubrictool.cli._common import (
    DeviceOpt,
    OldDataOpt,
    OutOpt,
    ProgressView,
    RunOpt,
    VerifyOpt,
    at_least,
    console,
    err_console,
    renamed,
)
from rubrictool.cli._sanitize import shown

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["grade_cmd"]


def grade_cmd(
    run: RunOpt,
    items: Annotated[Path | None, typer.Option(
        "--items", help="The answers to grade (CSV/JSONL/Parquet): response, question... (or leave it out and pass "
                        "--gradebook).",
    )] = None,
    out: OutOpt = Path("graded.csv"),
    batch_size: Annotated[int, typer.Option("--batch-size", callback=at_least(1), help="Items per forward pass.")] = 64,
    int8: Annotated[bool, typer.Option("--int8", help="Int8 CPU inference: faster; changes about 1 grade in 10 (torch) "
                                       "or 20 (onnx): docs/runs.md.")] = False,
    engine: Annotated[str, typer.Option(
        "--engine", help="Encoder runtime: torch, or onnx (ONNX Runtime; exported once, cached in RUN/onnx).",
    )] = "torch",
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override concepts for every response, e.g. FC=3,CC=1 (or --set FC=3 --set CC=1).",
    )] = None,
    device: DeviceOpt = None,
    verify: VerifyOpt = False,
    keep: Annotated[str | None, typer.Option(
        "--keep", help="Columns of --items copied beside each grade, comma-separated (default: question, student, "
                       "source_id, response, those present; '' for none).",
    )] = None,
    reviewed: Annotated[Path | None, typer.Option(
        "--reviewed", help="Reviewed answers of new questions: id and a column per concept with its level, optionally "
                           "grade (question and response too for an answer not in --items); each such question's other "
                           "answers are shifted by what they show "
                           "(docs/your-course.md#new-questions-a-few-reviewed-answers-first).",
    )] = None,
    review_budget: Annotated[int | None, typer.Option(
        "--review-budget", help="How many answers a teacher will read: the review queue (<out>.review.csv) lists that "
                                "many, most at risk first (default: the held answers).",
    )] = None,
    review_queue: Annotated[Path | None, typer.Option(
        "--review-queue", help="Where the review queue goes (default <out stem>.review.csv).",
    )] = None,
    gradebook: Annotated[Path | None, typer.Option(
        "--gradebook", help="The teacher's spreadsheet (XLSX/CSV/TSV) the answers came from, read as `data import` "
                            "reads it: written back in its own layout with the mark, needs review and a comment per "
                            "criterion, plus a per-question summary.",
    )] = None,
    sheet: Annotated[str | None, typer.Option(
        "--sheet", help="The --gradebook workbook's sheet, as given to `data import`.",
    )] = None,
    columns: Annotated[str | None, typer.Option(
        "--columns", help="The --gradebook's column mapping, as given to `data import` (e.g. question=Lab question).",
    )] = None,
    gradebook_out: Annotated[Path | None, typer.Option(
        "--gradebook-out", help="Where the gradebook goes (default <name>-graded.<ext> beside it; never the file "
                                "itself).",
    )] = None,
    old_data: OldDataOpt = None,
) -> None:
    """Grade new responses: grade, its probability, concept levels, expected scores, μ_post, contributions.

    Beside each id the output keeps the question, the student and the response (or the columns --keep names), so the
    grades join back to the gradebook.

    --run a k-fold run trained with --final grades with its final model (trained on every labelled answer) and
    carries the folds' pooled figures as its quality card (printed, and in <out stem>.card.json).

    A flags column names what a teacher should review (copies_reference, copies_question, keyword_list,
    concepts_disagree_with_grade, out_of_distribution, empty, truncated, repeats_text; docs/integrity.md). A flagged
    answer gets no mark: its grade is empty, needs_review says why, model_grade keeps the model's reading. The review
    queue (<out stem>.review.csv) ranks the answers by risk for --review-budget reviews.

    --gradebook writes the teacher's spreadsheet back with the marks (docs/your-course.md#9-grade-new-answers-grade).

    --reviewed: a few answers of each new question with their reviewed levels (and grades) shift how the reader
    reads that question's other answers; questions the run trained on are left as read.

    --device auto grades on a GPU when there is one; --int8 and --engine onnx run on the CPU.

    Example: rubrictool grade --run runs/mohler-reccbm --items new_answers.csv --out graded.csv

    Example: rubrictool grade --run runs/chemlab-5fold --items new-answers.csv --gradebook chem110-spring.xlsx --sheet Marks --columns "question=Lab question" --review-budget 10 --out graded.csv
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.marks import GradeOptions, card_line, grade_file
    from rubrictool.train.runs import verify_runs_fully

    data = renamed("--items", items, "--data", old_data)
    if verify:
        verify_runs_fully()
    if int8:
        err_console.print("[yellow]note:[/] --int8 grades with 8-bit weights: some grades differ from the ones the "
                          "full model gives (and was evaluated with); grade without --int8 for those",
                          soft_wrap=True, highlight=False)
    with ProgressView(err_console, transient=True) as view:
        res = grade_file(run, data, out, GradeOptions(
                             batch_size, int8, engine, overrides=",".join(set_) if set_ else None,
                             device=device or "auto",
                             keep=None if keep is None else [c.strip() for c in keep.split(",") if c.strip()],
                             review_budget=review_budget), view,
                         reviewed=reviewed, queue=review_queue, gradebook=gradebook,
                         sheet=sheet, columns=columns, gradebook_out=gradebook_out)
    graded, seconds = res.table, res.seconds
    rate = len(graded) / seconds if seconds > 0 else float("inf")
    console.print(f"graded {len(graded)} responses in {seconds:.1f} s ({rate:.0f}/s) -> {res.path}", soft_wrap=True)
    console.print(shown(card_line(res.card)), soft_wrap=True, highlight=False)
    for w in res.card.get("warnings") or []:
        console.print(f"[bold red]warning:[/] {shown(w)}", soft_wrap=True, highlight=False)
    flagged = graded["flags"].astype(str) != ""
    if flagged.any():
        counts = graded.loc[flagged, "flags"].str.split(";").explode().value_counts()
        console.print(f"{int(flagged.sum())} held for a teacher to read, no mark given (column needs_review): "
                      + ", ".join(f"{shown(k)} {v}" for k, v in counts.items()), soft_wrap=True, highlight=False)
    else:
        console.print("no answer held: every answer has a mark", soft_wrap=True, highlight=False)
    n_held = int(flagged.sum())
    beyond = f"; {n_held - len(res.queue)} held answers are beyond the budget and stay unmarked" \
        if n_held > len(res.queue) else ""
    console.print(f"review queue: {len(res.queue)} answers, most at risk first -> {res.queue_path}{beyond}",
                  soft_wrap=True, highlight=False)
    if res.gradebook_path is not None and res.summary is not None:
        _print_gradebook(res.gradebook_path, res.summary, res.summary_path)


def _print_gradebook(path: Path, summary: pd.DataFrame, summary_path: Path | None) -> None:
    """Where the gradebook went, and its per-question summary."""
    where = summary_path or f"sheet of {path.name}"
    console.print(f"gradebook -> {path} (per-question summary: {where})", soft_wrap=True, highlight=False)
    for row in summary.to_dict("records"):
        mean = "—" if row["mean mark"] is None else f"{row['mean mark']:.2f}"
        console.print(f"  {shown(str(row['question']))[:70]}: {row['answers']} answers, {row['marked']} marked, "
                      f"{row['held for review']} held, mean {mean}", soft_wrap=True, highlight=False)
