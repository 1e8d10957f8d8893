"""``rubrictool review ...``: the three-expert review round in Label Studio (serve, push, status, pull)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rubrictool.cli._common import ProgressView, RubricOpt, console, err_console, handle_errors
from rubrictool.cli._sanitize import shown
from rubrictool.review import (
    ENV_KEY,
    ENV_URL,
    LabelStudioServer,
    project_and_rubric,
    pull,
    push,
    resolve_connection,
    serve,
    status,
)
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_items

__all__ = ["app"]

app = typer.Typer(
    help="Three-expert review in Label Studio. Example: rubrictool review status --project mohler-review",
    no_args_is_help=True,
)

LsUrlOpt = Annotated[
    str | None,
    typer.Option("--url", help="Label Studio URL (default: $LABEL_STUDIO_URL, else the server `review serve` runs here)."),
]
LsKeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", help="Label Studio API token (default: $LABEL_STUDIO_API_KEY); never printed.", show_default=False),
]
LsProjectOpt = Annotated[
    str | None, typer.Option("--project", "-p", help="Project title or numeric id (default: <rubric name>-review).")
]
CheckRubricOpt = Annotated[str | None, typer.Option("--rubric", "-r", help="Check the project against this rubric.")]


@app.command("serve")
@handle_errors
def review_serve(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (the server listens on loopback only).")] = 8080,
    folder: Annotated[Path, typer.Option("--dir", help="Folder for the server's data, admin token and log.")] = Path(
        ".rubrictool/label-studio"
    ),
    label_studio_bin: Annotated[
        Path | None,
        typer.Option("--label-studio-bin", help="The label-studio executable (default: .venv-ls/bin, else PATH)."),
    ] = None,
) -> None:
    """Run a local Label Studio for one researcher until Ctrl-C (data, token and log under --dir).

    Prints the URL and where the admin password and API token files are (mode 0600), never the token.

    Example: rubrictool review serve --port 8080
    """

    def ready(server: LabelStudioServer) -> None:
        for line in (
            f"Label Studio is running at {server.url}  (Ctrl-C stops it)",
            f"  sign in as {server.admin_email}; the password is in {server.password_file}",
            f"  the admin API token is in {server.token_file} (mode 0600); data and log in {server.folder}",
            (f"  with the default --dir, `rubrictool review push|status|pull` run from this folder find it; "
             f"elsewhere set {ENV_URL}={server.url} and {ENV_KEY}=$(cat {server.token_file})"),
        ):
            console.print(line, highlight=False, soft_wrap=True, markup=False)

    serve(folder, port, label_studio_bin, on_ready=ready)
    console.print("Label Studio stopped", highlight=False)


@app.command("push")
@handle_errors
def review_push(
    rubric: RubricOpt,
    data: Annotated[Path, typer.Option("--data", help="Item table (CSV/JSONL/Parquet: id, response, question?, reference?, context?).")],
    predictions: Annotated[
        Path | None, typer.Option("--predictions", help="PredictionTable from `rubrictool annotate` (raw_ok rows become pre-annotations).")
    ] = None,
    project: LsProjectOpt = None,
    max_annotations: Annotated[int, typer.Option("--max-annotations", help="Reviews per task.")] = 3,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Tasks per import request.")] = 200,
    run: Annotated[Path | None, typer.Option("--run", help="A trained run: its concept levels become one more prediction per task (model_version = the run's folder name), scored by its confidence (1 − level entropy, σ²-weighted with LCEC) for sorting in Label Studio.")] = None,
    select: Annotated[str | None, typer.Option("--select", help="Send only --budget items to review: uncertain (grader least sure; needs --run), disagreement (pre-annotations disagree most) or random.")] = None,
    budget: Annotated[int | None, typer.Option("--budget", help="How many items --select sends to review.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the tie-break (and of --select random).")] = 0,
    hide_predictions: Annotated[bool, typer.Option("--hide-predictions", help="Do not show the pre-annotations to reviewers (blind arm of the anchoring check); they are still stored.")] = False,
    url: LsUrlOpt = None,
    api_key: LsKeyOpt = None,
) -> None:
    """Create or find the review project (interface generated from the rubric) and import the new items.

    One task per item (keyed by item id) with one prediction per LLM model (and per --run); items
    and predictions already in the project are never imported again. With --select/--budget only the
    chosen items are imported; `adjudicate --pre-annotations` labels the rest.

    Example: rubrictool review push --rubric mohler --data items.jsonl --predictions annotations/predictions.csv --run runs/mohler --select uncertain --budget 400
    """
    rb = load_rubric(rubric)
    conn = resolve_connection(url, api_key)
    with ProgressView(err_console) as view:
        from rubrictool.grade import grader_predictions  # torch loads only when a run is given

        graded = grader_predictions(run, read_items(data), progress=view) if run is not None else None
        result = push(conn, rb, data, predictions, project, max_annotations, batch_size, progress=view,
                      model_predictions=graded, select=select, budget=budget, seed=seed,
                      show_predictions=not hide_predictions)
    console.print(shown(result.summary()), highlight=False, soft_wrap=True)


@app.command("status")
@handle_errors
def review_status(
    project: LsProjectOpt = None,
    rubric: CheckRubricOpt = None,
    url: LsUrlOpt = None,
    api_key: LsKeyOpt = None,
) -> None:
    """Tasks with 0/1/2/3 reviews, reviews and skips per reviewer, reviews that changed LLM labels, and the
    anchoring check: per concept, α so far and how often reviewers kept each pre-annotated level.

    Example: rubrictool review status --project mohler-review
    """
    rb, title = project_and_rubric(project, rubric)
    report = status(resolve_connection(url, api_key), title, rb)
    for line in report.lines():
        console.print(shown(line), highlight=False, soft_wrap=True)


@app.command("pull")
@handle_errors
def review_pull(
    project: LsProjectOpt = None,
    rubric: CheckRubricOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="ReviewTable to write (.csv, .jsonl or .parquet).")] = Path(
        "reviews.csv"
    ),
    url: LsUrlOpt = None,
    api_key: LsKeyOpt = None,
) -> None:
    """Export every submitted review as the tidy ReviewTable that `rubrictool adjudicate` reads.

    Columns: item, reviewer (email), concept, level, source, lead_time, annotation, differs_<model>.
    Skipped (cancelled) annotations and drafts are not reviews.

    Example: rubrictool review pull --project mohler-review --out reviews.csv
    """
    rb, title = project_and_rubric(project, rubric)
    conn = resolve_connection(url, api_key)
    with ProgressView(err_console) as view:
        result = pull(conn, title, out, rb, progress=view)
    console.print(shown(result.summary()), highlight=False, soft_wrap=True)
