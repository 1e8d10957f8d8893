"""``rubrictool review ...``: the three-expert review round in Label Studio (serve, push, status, pull)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rubrictool.cli._common import (
    OldDataOpt,
    OptionalRunOpt,
    ProgressView,
    RubricOpt,
    at_least,
    console,
    err_console,
    given,
    handle_errors,
    renamed,
)
from rubrictool.cli._sanitize import shown
from rubrictool.rubric import load_rubric

if TYPE_CHECKING:
    from rubrictool.review import LabelStudioServer

__all__ = ["app"]

app = typer.Typer(
    help="Three-expert review in Label Studio. Example: rubrictool review status --project mohler-review",
    no_args_is_help=True,
)

LsUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url", help="Label Studio URL (default: $LABEL_STUDIO_URL, else the server `review serve` runs here).",
    ),
]
LsKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key", help="Label Studio API token (default: $LABEL_STUDIO_API_KEY); never printed.", show_default=False,
    ),
]
LsProjectOpt = Annotated[
    str | None, typer.Option("--project", "-p", help="Project title or numeric id (default: <rubric name>-review).")
]
CheckRubricOpt = Annotated[str | None, typer.Option("--rubric", "-r", help="Check the project against this rubric.")]


@app.command("serve")
@handle_errors
def review_serve(
    port: Annotated[int, typer.Option(
        "--port", callback=at_least(1, 65535), help="Port on 127.0.0.1 (the server listens on loopback only).",
    )] = 8080,
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
    from rubrictool.review import ENV_KEY, ENV_URL, serve


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
    items: Annotated[Path | None, typer.Option(
        "--items", show_default=False, help="The answers to review: an item table (CSV/JSONL/Parquet: id, "
        "response, question?, reference?, context?); required.")] = None,
    predictions: Annotated[
        Path | None, typer.Option(
            "--predictions", help="PredictionTable from `rubrictool annotate`: ranks items for --select; its raw_ok "
                                  "rows are sent as pre-annotations only with --show-predictions.",
        )
    ] = None,
    project: LsProjectOpt = None,
    max_annotations: Annotated[int, typer.Option(
        "--max-annotations", callback=at_least(1), help="Reviews per task.",
    )] = 3,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", callback=at_least(1), help="Tasks per import request.",
    )] = 200,
    run: OptionalRunOpt = None,
    select: Annotated[str | None, typer.Option(
        "--select", help="Send only --budget items to review: uncertain (grader least sure; needs --run), disagreement "
                         "(pre-annotations disagree most) or random.",
    )] = None,
    budget: Annotated[int | None, typer.Option(
        "--budget", callback=at_least(1), help="How many items --select sends to review.",
    )] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the tie-break (and of --select random).")] = 0,
    show_predictions: Annotated[bool, typer.Option(
        "--show-predictions", help="Anchored review (opt-in): send the predictions and let Label Studio pre-select one "
                                   "model's levels, marked on the interface as pre-filled by that model. The default "
                                   "is blind review: no predictions on the tasks.",
    )] = False,
    prefill_model: Annotated[str | None, typer.Option(
        "--prefill-model", help="With --show-predictions: the model whose levels are pre-selected (default: the --run "
                                "grader, else the first model by name).",
    )] = None,
    url: LsUrlOpt = None,
    api_key: LsKeyOpt = None,
    old_data: OldDataOpt = None,
) -> None:
    """Create or find the review project (interface generated from the rubric) and import the new items.

    Blind review by default: one task per item (keyed by item id) with no predictions, so reviewers see
    neither the models' levels nor each other's; --predictions and --run only rank items for --select
    and stay here for `adjudicate --predictions`. --show-predictions (anchored review) adds one prediction
    per model (model_version = the model) and pre-selects one model's levels, marked as pre-filled by it.
    Items and predictions already in the project are never imported again. With --select/--budget only
    the chosen items are imported; `adjudicate --pre-annotations` labels the rest.

    --run grades the items with a trained run (predictions-<run>.csv, for --select uncertain and `adjudicate
    --pre-annotations`); with --show-predictions its levels are one more prediction per task (model_version = the
    run's folder name), scored by its confidence (1 − level entropy, σ²-weighted with LCEC) for sorting in Label
    Studio.

    Example: rubrictool review push --rubric mohler --items items.jsonl --predictions annotations/predictions.csv --run runs/mohler --select uncertain --budget 400

    Example (anchored): rubrictool review push --rubric mohler --items items.jsonl --predictions annotations/predictions.csv --project mohler-anchored --show-predictions --prefill-model gpt-4o
    """  # noqa: E501 - the command's help text, kept as users see it
    from rubrictool.review import PushOptions, push, resolve_connection
    from rubrictool.tables import read_items

    data = given("--items", renamed("--items", items, "--data", old_data),
                 "give --items ITEMS (the answers to push)")
    rb = load_rubric(rubric)
    conn = resolve_connection(url, api_key)
    with ProgressView(err_console) as view:
        from rubrictool.grade import grader_predictions  # torch loads only when a run is given

        graded = grader_predictions(run, read_items(data), progress=view) if run is not None else None
        result = push(conn, rb, data, predictions,
                      PushOptions(project, max_annotations, batch_size, select=select, budget=budget, seed=seed,
                                  show_predictions=show_predictions, prefill_model=prefill_model),
                      progress=view, model_predictions=graded)
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
    from rubrictool.review import project_and_rubric, resolve_connection, status

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
    from rubrictool.outputs import check_output, has_columns
    from rubrictool.review import project_and_rubric, pull, resolve_connection

    check_output(out, [rubric], "file", own=has_columns("item", "reviewer", "concept", "level"),
                 what="a review table")  # never the rubric file, nor a file that is not an earlier pull
    rb, title = project_and_rubric(project, rubric)
    conn = resolve_connection(url, api_key)
    with ProgressView(err_console) as view:
        result = pull(conn, title, out, rb, progress=view)
    console.print(shown(result.summary()), highlight=False, soft_wrap=True)
