"""The ``rubrictool`` command line: thin Typer commands over the library.

Each command parses options, calls one library function and prints its result. Library errors
(:class:`rubrictool.errors.RubrictoolError`, and ``reccbm``'s ``ReccbmError``) become a one-line
message and exit code 1 here, and only here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never reach for the network on import

import typer
from rich.console import Console

from rubrictool.errors import RubrictoolError

__all__ = ["app", "main"]

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="rubrictool",
    help="Rubric curation, LLM pre-annotation, three-expert review and REC-CBM training.\n\n"
    "Example: rubrictool train --benchmark mohler",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rubric_app = typer.Typer(help="Rubric inventories (YAML). Example: rubrictool rubric show mohler", no_args_is_help=True)
data_app = typer.Typer(help="Benchmark data and item tables. Example: rubrictool data show mohler", no_args_is_help=True)
review_app = typer.Typer(
    help="Three-expert review in Label Studio. Example: rubrictool review status --project mohler-review",
    no_args_is_help=True,
)
app.add_typer(rubric_app, name="rubric")
app.add_typer(data_app, name="data")
app.add_typer(review_app, name="review")

# -- shared options (defined once) ------------------------------------------------------------------------
RubricOpt = Annotated[str, typer.Option("--rubric", "-r", help="Bundled rubric name (mohler, asap2, mocha) or a YAML path.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output file or folder.")]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Folder holding benchmark data (default: $RUBRICTOOL_DATA, else ./data)."),
]
BenchmarkOpt = Annotated[str | None, typer.Option("--benchmark", "-b", help="Bundled benchmark, e.g. mohler.")]

F = TypeVar("F", bound=Callable[..., Any])


def _error_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [RubrictoolError]
    try:
        from reccbm.errors import ReccbmError

        types.append(ReccbmError)
    except ImportError:
        pass
    return tuple(types)


def handle_errors(fn: F) -> F:
    """Turn library errors into ``error: <message>`` on stderr and exit code 1 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _error_types() as e:
            err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("interrupted; everything already written is kept (re-run to resume)")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


# == rubric ================================================================================================


@rubric_app.command("list")
@handle_errors
def rubric_list(
    folder: Annotated[
        Path | None, typer.Option("--folder", "-f", help="Also list the *.yaml rubrics in this folder.")
    ] = None,
) -> None:
    """List the bundled rubrics and any in --folder (or $RUBRICTOOL_RUBRICS); broken files show their error.

    Example: rubrictool rubric list --folder my_rubrics/
    """
    from rich.table import Table

    from rubrictool.rubric import rubric_infos

    table = Table(title="Rubrics")
    for col in ("name", "concepts", "levels", "grades", "version", "title / error", "path"):
        table.add_column(col)
    for info in rubric_infos(folder):
        where = "(bundled)" if info.bundled else str(info.path)
        if info.error:
            table.add_row(info.name, "", "", "", "", f"[red]{info.error}[/]", where)
        else:
            table.add_row(info.name, str(info.n_concepts), info.scale, info.grade, info.version, info.title, where)
    console.print(table)


@rubric_app.command("show")
@handle_errors
def rubric_show(
    rubric: Annotated[str, typer.Argument(help="Bundled rubric name (mohler, asap2, mocha) or a YAML path.")],
) -> None:
    """Show a rubric as a table: one row per concept, one column per level anchor.

    Example: rubrictool rubric show mohler
    """
    from rubrictool.rubric import load_rubric, rubric_table

    console.print(rubric_table(load_rubric(rubric)))


@rubric_app.command("validate")
@handle_errors
def rubric_validate(
    paths: Annotated[list[Path], typer.Argument(help="Rubric YAML files to check.")],
) -> None:
    """Check rubric files; print every problem as `file:line: field: message`; exit 1 if any file is bad.

    Example: rubrictool rubric validate rubrics/*.yaml
    """
    from rubrictool.rubric import validate_rubric_files

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


@rubric_app.command("new")
@handle_errors
def rubric_new(
    name: Annotated[str, typer.Option("--name", "-n", help="Rubric id, e.g. cs101 (letters, digits, _ . -).")],
    concepts: Annotated[str, typer.Option("--concepts", "-c", help="Comma-separated concept keys, e.g. FC,CC,TU.")],
    levels: Annotated[int, typer.Option("--levels", "-l", help="Ordinal levels per concept (1..N).")] = 3,
    grade_min: Annotated[int, typer.Option("--grade-min", help="Lowest holistic grade.")] = 0,
    grade_max: Annotated[int, typer.Option("--grade-max", help="Highest holistic grade.")] = 5,
    title: Annotated[str | None, typer.Option("--title", help="Course / benchmark title.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write (default: <name>.yaml).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Scaffold a commented rubric YAML for a new course; it validates as is, then replace the TODOs.

    Example: rubrictool rubric new --name cs101 --concepts FC,CC,TU --levels 3 --out cs101.yaml
    """
    from rubrictool.rubric import new_rubric_file

    keys = [k.strip() for k in concepts.split(",") if k.strip()]
    path = new_rubric_file(out or Path(f"{name}.yaml"), name, keys, levels, grade_min, grade_max, title, force)
    console.print(
        f"wrote {path} ({len(keys)} concepts, levels 1..{levels}); next: rubrictool rubric lint {path}", soft_wrap=True
    )


@rubric_app.command("lint")
@handle_errors
def rubric_lint(
    rubric: Annotated[str, typer.Argument(help="Bundled rubric name or a YAML path.")],
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when there is any warning.")] = False,
    similarity: Annotated[
        float, typer.Option("--similarity", help="TF-IDF cosine above which two definitions count as near-duplicates.")
    ] = 0.5,
) -> None:
    """Warn about near-duplicate definitions, repeated anchors, concepts or levels without examples, TODOs.

    Exit 0 with warnings listed; with --strict exit 1 if there are any.

    Example: rubrictool rubric lint mohler --strict
    """
    from rubrictool.rubric import lint_rubric, load_rubric

    warnings = lint_rubric(load_rubric(rubric), similarity=similarity)
    for w in warnings:
        typer.echo(f"warning: {w}")
    typer.echo(f"{len(warnings)} warning(s) in {rubric}")
    if strict and warnings:
        raise typer.Exit(1)


@rubric_app.command("export")
@handle_errors
def rubric_export(
    rubric: Annotated[str, typer.Argument(help="Bundled rubric name or a YAML path.")],
    fmt: Annotated[str, typer.Option("--format", "-F", help="markdown (the paper's table layout) or json.")] = "markdown",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Export a rubric as a Markdown table (Concept | Definition | Example | Score scale) or as JSON.

    Example: rubrictool rubric export mocha --format markdown --out mocha.md
    """
    from rubrictool.rubric import write_export

    text = write_export(rubric, fmt, out)
    if out is None:
        typer.echo(text, nl=False)
    else:
        console.print(f"wrote {out}", soft_wrap=True)


# == data ==================================================================================================


@data_app.command("show")
@handle_errors
def data_show(
    benchmark: Annotated[str, typer.Argument(help="Bundled benchmark (mohler) or an item file (CSV/JSONL/Parquet).")] = "mohler",
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise a benchmark or item file: counts, grade histogram, mean response length, graders' agreement.

    Example: rubrictool data show mohler --data-dir ../shared/datasets
    """
    import json

    from rich.markup import escape
    from rich.table import Table

    from rubrictool.data import describe_benchmark

    s = describe_benchmark(benchmark, data_dir)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    console.print(
        f"[bold]{escape(benchmark)}[/]: {s['n_items']} answers over {s['n_questions']} questions; mean response "
        f"{s['mean_response_words']} words (median {s['median_response_words']:g})"
    )
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


@data_app.command("fetch")
@handle_errors
def data_fetch(
    benchmark: Annotated[str, typer.Argument(help="Benchmark to download (mohler).")] = "mohler",
    dest: Annotated[
        Path | None, typer.Option("--dest", help="Data folder (default: $RUBRICTOOL_DATA, else ./data).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="http(s):// or file:// URL, or a local .zip/.tar path (default: the authors' archive)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Download again even if the data is there.")] = False,
) -> None:
    """Download and unpack a benchmark into <dest>/<benchmark> (checked, atomic, idempotent).

    Example: rubrictool data fetch mohler --dest data/
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from rubrictool.data import fetch_benchmark

    bar = Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        console=err_console, transient=True,
    )
    task = bar.add_task(f"downloading {benchmark}", total=None)

    def on_progress(done: int, total: int | None) -> None:
        if not bar.live.is_started:  # only a real download shows a bar
            bar.start()
        bar.update(task, completed=done, total=total)

    try:
        path, fetched = fetch_benchmark(benchmark, dest, url, force, progress=on_progress)
    finally:
        if bar.live.is_started:
            bar.stop()
    console.print(f"{'fetched' if fetched else 'already present'}: {path}", soft_wrap=True)


@data_app.command("split")
@handle_errors
def data_split(
    source: Annotated[str, typer.Argument(help="Bundled benchmark name (mohler) or an item file (CSV/JSONL/Parquet).")],
    out: OutOpt = Path("split.json"),
    seed: Annotated[int, typer.Option("--seed", help="Random seed; the same seed gives the same split.")] = 0,
    ratios: Annotated[str, typer.Option("--ratios", help="train,dev,test shares.")] = "0.7,0.2,0.1",
    data_dir: DataDirOpt = None,
) -> None:
    """Write a deterministic train/dev/test split (stratified by grade) as JSON.

    Example: rubrictool data split mohler --seed 0 --out runs/mohler/split.json
    """
    from rubrictool.data import split_to_file
    from rubrictool.errors import DataError

    try:
        parts = tuple(float(x) for x in ratios.split(","))
    except ValueError:
        raise DataError(f"--ratios {ratios!r}: give three numbers like 0.7,0.2,0.1") from None
    if len(parts) != 3:
        raise DataError(f"--ratios {ratios!r}: give exactly three shares (train,dev,test)")
    sizes = split_to_file(source, out, seed, (parts[0], parts[1], parts[2]), data_dir)
    console.print(f"wrote {out}: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + f" (seed {seed})", soft_wrap=True)


# == annotate ==============================================================================================


@app.command("annotate")
@handle_errors
def annotate_cmd(
    benchmark: BenchmarkOpt = None,
    rubric: Annotated[str | None, typer.Option("--rubric", "-r", help="Rubric name or YAML path (default: the benchmark's).")] = None,
    data: Annotated[Path | None, typer.Option("--data", help="Item table (CSV/JSONL/Parquet: id, response, question?, reference?).")] = None,
    data_dir: DataDirOpt = None,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="litellm model string; repeatable (default: gpt-4o and gemini/gemini-2.5-pro).")] = None,
    api_base: Annotated[str | None, typer.Option("--api-base", help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (model hosted_vllm/<alias> or openai/<alias>).")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Read the API key from this environment variable (default: the provider's, e.g. OPENAI_API_KEY).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-j", help="Requests in flight per model.")] = 8,
    workers: Annotated[int | None, typer.Option("--workers", help="Client processes sharing the items, concurrency and budget (default: auto, i.e. 1, or one per 8 requests in flight for --api-base runs of 64+ items).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per request.")] = 120.0,
    max_retries: Annotated[int, typer.Option("--max-retries", help="Retries on 429, timeouts, 5xx and connection errors.")] = 4,
    backoff: Annotated[float, typer.Option("--backoff", help="First back-off in seconds (doubles per retry, with jitter).")] = 1.0,
    fmt: Annotated[str, typer.Option("--format", help="line (the paper's concept=..; label=..; evidence=..) or json (with a JSON schema).")] = "line",
    template: Annotated[Path | None, typer.Option("--template", help="Your own jinja2 prompt template (default: templates/annotate.prompt.j2).")] = None,
    examples: Annotated[Path | None, typer.Option("--examples", help="In-context examples: a table with response, question, reference and one level column per concept.")] = None,
    cache: Annotated[Path, typer.Option("--cache", help="SQLite reply cache (resume, never pay twice).")] = Path(".rubrictool/cache.sqlite"),
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the reply cache.")] = False,
    budget: Annotated[float | None, typer.Option("--budget", help="Stop cleanly before this many USD would be exceeded.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="Annotate only the first N items (a trial run).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Reply length cap (also the budget's worst case).")] = 1024,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature.")] = 0.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the first prompts, token counts and the estimated cost; send nothing.")] = False,
    out: OutOpt = Path("annotations"),
) -> None:
    """Pre-annotate every response on every rubric concept with LLMs (litellm), as the paper's annotation stage.

    Writes the tidy prediction table (item, model, concept, level, evidence, raw_ok + usage), failure
    records with the raw replies and a per-model summary. Keys come from the environment only.

    Example: rubrictool annotate --benchmark mohler --model gpt-4o --limit 20 --budget 1 --out annotations/
    """
    from rubrictool.annotate import DEFAULT_MODELS, AnnotateConfig, run_annotation

    config = AnnotateConfig(
        models=tuple(model or DEFAULT_MODELS), format=fmt, template=template, examples=examples, api_base=api_base,
        api_key_env=api_key_env, concurrency=concurrency, timeout=timeout, max_retries=max_retries, backoff=backoff,
        temperature=temperature, max_tokens=max_tokens, budget=budget, limit=limit, cache=None if no_cache else cache,
        workers=workers,
    )
    run_annotation(benchmark, rubric, data, data_dir, config, out, dry=dry_run, console=console)


# == review ================================================================================================

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


@review_app.command("serve")
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
    from rubrictool.review import run_serve

    run_serve(folder, port, label_studio_bin, console)


@review_app.command("push")
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
    url: LsUrlOpt = None,
    api_key: LsKeyOpt = None,
) -> None:
    """Create or find the review project (interface generated from the rubric) and import the new items.

    One task per item (keyed by item id) with one prediction per LLM model; items already in the
    project are never imported again.

    Example: rubrictool review push --rubric mohler --data items.jsonl --predictions annotations/predictions.csv
    """
    from rubrictool.review import run_push

    run_push(rubric, data, predictions, project, max_annotations, batch_size, url, api_key, console)


@review_app.command("status")
@handle_errors
def review_status(
    project: LsProjectOpt = None,
    rubric: Annotated[str | None, typer.Option("--rubric", "-r", help="Check the project against this rubric.")] = None,
    url: LsUrlOpt = None,
    api_key: LsKeyOpt = None,
) -> None:
    """Tasks with 0/1/2/3 reviews, reviews and skips per reviewer, and reviews that changed LLM labels.

    Example: rubrictool review status --project mohler-review
    """
    from rubrictool.review import run_status

    run_status(project, rubric, url, api_key, console)


@review_app.command("pull")
@handle_errors
def review_pull(
    project: LsProjectOpt = None,
    rubric: Annotated[str | None, typer.Option("--rubric", "-r", help="Check the project against this rubric.")] = None,
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
    from rubrictool.review import run_pull

    run_pull(project, rubric, out, url, api_key, console)

# == adjudicate ============================================================================================


@app.command("adjudicate")
@handle_errors
def adjudicate_cmd(
    rubric: Annotated[str | None, typer.Option("--rubric", "-r", help="Rubric name or YAML path (default: the benchmark's).")] = None,
    reviews: Annotated[list[str] | None, typer.Option("--reviews", help="Review file, repeatable: long (item, reviewer, concept, level) or one reviewer's wide file (id, FC, ...; reviewer = file stem, or NAME=PATH).")] = None,
    benchmark: BenchmarkOpt = None,
    items: Annotated[Path | None, typer.Option("--items", help="Item table (CSV/JSONL/Parquet) for texts, grades and the id check.")] = None,
    data_dir: DataDirOpt = None,
    predictions: Annotated[Path | None, typer.Option("--predictions", help="LLM prediction table (item, model, concept, level, raw_ok) to compare with the consensus.")] = None,
    method: Annotated[str, typer.Option("--method", help="majority (ordinal tie rule) or dawid-skene (crowd-kit).")] = "majority",
    level: Annotated[str, typer.Option("--level-of-measurement", help="Krippendorff's α metric: ordinal, nominal, interval or ratio.")] = "ordinal",
    resolutions: Annotated[Path | None, typer.Option("--resolutions", help="Expert decisions (item, concept, level[, note, decided_by]) or a filled-in discussion_queue.csv.")] = None,
    out: OutOpt = Path("adjudicated"),
    fmt: Annotated[str, typer.Option("--format", help="Table format: csv, jsonl or parquet.")] = "csv",
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap replicates for the α CIs (0 = none).")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap and the coverage folds.")] = 0,
    expected_reviewers: Annotated[int | None, typer.Option("--expected-reviewers", help="Report items with fewer reviewers (default: all reviewers seen).")] = None,
    from_label_studio: Annotated[str | None, typer.Option("--from-label-studio", help="First pull the reviews of this Label Studio project (title or id; connection from $LABEL_STUDIO_URL/$LABEL_STUDIO_API_KEY or `review serve`) into --out/reviews_label_studio.csv.")] = None,
) -> None:
    """Agreement (Krippendorff's α per concept, pairwise, per reviewer, LLM vs consensus, coverage) and adjudication.

    Writes adjudicated.<format> (the training table), decisions.<format>, discussion_queue.csv/.md
    and agreement.json into --out.

    Example: rubrictool adjudicate --benchmark mohler --out runs/mohler/adjudicated
    """
    from rubrictool.adjudicate import run_adjudicate, summary_lines, summary_table

    if from_label_studio:  # review pull, then adjudicate what it wrote
        from rubrictool.review import pull_for_adjudicate

        reviews = [*(reviews or []), str(pull_for_adjudicate(from_label_studio, rubric or benchmark, out))]

    with err_console.status("computing agreement and adjudicating ..."):
        result = run_adjudicate(
            rubric=rubric, reviews=reviews or [], benchmark=benchmark, items=items, data_dir=data_dir,
            predictions=predictions, resolutions=resolutions, method=method, level=level, out=out, fmt=fmt,
            n_boot=bootstrap, seed=seed, expected_reviewers=expected_reviewers,
        )
    console.print(summary_table(result.agreement))
    for line in summary_lines(result.agreement):
        console.print(line, soft_wrap=True, highlight=False)
    console.print(f"wrote {', '.join(str(p) for p in result.paths.values())}", soft_wrap=True, highlight=False)


# == train / grade =========================================================================================
@app.command("train")
@handle_errors
def train_cmd(
    benchmark: BenchmarkOpt = None,
    data: Annotated[Path | None, typer.Option("--data", help="Adjudicated table: items + one column per concept.")] = None,
    rubric: Annotated[str | None, typer.Option("--rubric", "-r", help="Rubric of --data (name or YAML).")] = None,
    split: Annotated[Path | None, typer.Option("--split", help="split.json (default: a 7:2:1 split).")] = None,
    split_seed: Annotated[int, typer.Option("--split-seed", help="Seed of the default split.")] = 0,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run dir (default runs/<data>-<variant>).")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML with model/stage1/stage2 sections.")] = None,
    variant: Annotated[str, typer.Option("--variant", help="reccbm, vanilla (CBM) or plm (no bottleneck).")] = "reccbm",
    race: Annotated[bool | None, typer.Option("--race/--no-race", help="RACE queries (off: pooled).")] = None,
    opcc: Annotated[bool | None, typer.Option("--opcc/--no-opcc", help="OPCC ranking loss.")] = None,
    lcec: Annotated[bool | None, typer.Option("--lcec/--no-lcec", help="LCEC correction.")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Repeat with seeds 0..N-1; mean ± std.")] = 1,
    agreement: Annotated[Path | None, typer.Option("--agreement", help="agreement.json for the α column.")] = None,
    backbone: Annotated[str | None, typer.Option("--backbone", help="HF name/path (default MiniLM).")] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", help="Stage I epochs (default 6).")] = None,
    max_len: Annotated[int | None, typer.Option("--max-len", help="Tokens per input (default 128).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Batch size (default 8).")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Stage I learning rate (default 1e-4).")] = None,
    stage2_lr: Annotated[float | None, typer.Option("--stage2-lr", help="Stage II learning rate (0.05).")] = None,
    tau: Annotated[float | None, typer.Option("--tau", help="RACE attention temperature τ (1.0).")] = None,
    lambda_r: Annotated[float | None, typer.Option("--lambda-r", help="OPCC weight λ_r (0.4).")] = None,
    lambda_d: Annotated[float | None, typer.Option("--lambda-d", help="Denoising weight λ_d (0.1).")] = None,
    lambda_s: Annotated[float | None, typer.Option("--lambda-s", help="Sparsity weight λ_s (0.005).")] = None,
    mixed_precision: Annotated[str | None, typer.Option("--mixed-precision", help="no, fp16 or bf16.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="auto (CUDA if present) or cpu.")] = None,
    data_dir: DataDirOpt = None,
    preset: Annotated[str, typer.Option("--preset", help="default (measured best) or paper (the paper's recipe).")] = "default",
    folds: Annotated[int, typer.Option("--folds", help="k-fold evaluation: k runs, every item tested once (0 = one split).")] = 0,
    head: Annotated[str | None, typer.Option("--head", help="Grade head: level (a weight per concept level) or scalar (paper).")] = None,
    query_init: Annotated[str | None, typer.Option("--query-init", help="RACE queries: rubric (concept texts) or orthogonal (paper).")] = None,
    center: Annotated[bool | None, typer.Option("--center/--no-center", help="LCEC prior mean at the label mean (paper: 0).")] = None,
    query_lr_multiplier: Annotated[float | None, typer.Option("--query-lr-mult", help="Query learning rate ÷ Stage I's (1).")] = None,
    concept_loss: Annotated[str | None, typer.Option("--concept-loss", help="L_con over concepts: mean or sum (paper).")] = None,
    joint_epochs: Annotated[int | None, typer.Option("--joint-epochs", help="Joint stage epochs after Stage I (0 = off).")] = None,
    joint_lr: Annotated[float | None, typer.Option("--joint-lr", help="Joint stage learning rate (2e-5).")] = None,
    holdout: Annotated[float | None, typer.Option("--holdout", help="Share of train held out of Stage I for Stage II (0 = paper).")] = None,
    stage2_select: Annotated[str | None, typer.Option("--stage2-select", help="Stage II epoch selection: t_f1 or nll.")] = None,
    intervention_p: Annotated[float | None, typer.Option("--intervention-p", help="Share of concepts set to their label while training the head (0 = paper).")] = None,
) -> None:
    """Train REC-CBM (or a baseline) and write a run dir; print metrics and the reliability table.

    Example: rubrictool train --benchmark mohler --folds 5 --out runs/mohler-5fold
    """
    from rubrictool.train import TrainProgress, result_tables, run_train

    def on_fold(i: int, k: int, state: str) -> None:
        console.print(f"fold {i + 1}/{k}: " + ("finished earlier, read back" if state == "done" else "training"))

    with TrainProgress(console) as progress:
        result = run_train(
            benchmark=benchmark, data=data, rubric=rubric, split=split, split_seed=split_seed, out=out,
            config=config, variant=variant, race=race, opcc=opcc, lcec=lcec, seeds=seeds, agreement=agreement,
            data_dir=data_dir, callback=progress, preset=preset, folds=folds, on_fold=on_fold, backbone=backbone,
            epochs=epochs, max_len=max_len, batch_size=batch_size, lr=lr, stage2_lr=stage2_lr, tau=tau,
            lambda_r=lambda_r, lambda_d=lambda_d, lambda_s=lambda_s, mixed_precision=mixed_precision, device=device,
            head=head, query_init=query_init, center=center, query_lr_multiplier=query_lr_multiplier,
            concept_loss=concept_loss, joint_epochs=joint_epochs, joint_lr=joint_lr, holdout=holdout,
            stage2_select=stage2_select, intervention_p=intervention_p,
        )
    for table in result_tables(result):
        console.print(table)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
    console.print(f"run written to {result.run_dir}", soft_wrap=True)


@app.command("compare")
@handle_errors
def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="k-fold run directory A (the reference).")],
    run_b: Annotated[Path, typer.Argument(help="k-fold run directory B.")],
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
) -> None:
    """Paired bootstrap of two k-fold runs on the items both tested: B − A with a 95 % CI per metric.

    Example: rubrictool compare runs/mohler-vanilla runs/mohler-reccbm
    """
    from rich.table import Table

    from rubrictool.evaluate import compare_runs

    res = compare_runs(run_a, run_b, n_boot=n_boot, seed=seed)
    t = Table(title=f"B − A on {res['n_items']} items ({res['n_boot']} paired bootstrap resamples)")
    for col in ("metric", "A", "B", "B − A", "95 % CI", "P(B not better)"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m, r in res["metrics"].items():
        t.add_row(m, f"{r['a']:.3f}", f"{r['b']:.3f}", f"{r['diff']:+.3f}", f"[{r['lo']:+.3f}, {r['hi']:+.3f}]",
                  f"{r['p_not_better']:.3f}")
    console.print(t)
    console.print(f"A = {res['a']}\nB = {res['b']}", soft_wrap=True)


@app.command("grade")
@handle_errors
def grade_cmd(
    model: Annotated[Path, typer.Option("--model", "-m", help="Run directory written by `rubrictool train`.")],
    data: Annotated[Path, typer.Option("--data", help="Items to grade (CSV/JSONL/Parquet): response, question...")],
    out: OutOpt = Path("graded.csv"),
    batch_size: Annotated[int, typer.Option("--batch-size", help="Items per forward pass.")] = 64,
    int8: Annotated[bool, typer.Option("--int8", help="Int8 CPU inference: faster, numbers shift slightly.")] = False,
    engine: Annotated[str, typer.Option(
        "--engine", help="Encoder runtime: torch, or onnx (ONNX Runtime; exported once, cached in RUN/onnx).",
    )] = "torch",
) -> None:
    """Grade new responses: grade, its probability, concept levels, expected scores, μ_post, contributions.

    Example: rubrictool grade --model runs/mohler-reccbm --data new_answers.csv --out graded.csv
    """
    from rich.progress import Progress

    from rubrictool.train import grade_file

    with Progress(console=err_console, transient=True) as bar:
        task = bar.add_task("grading", total=None)
        graded, path, seconds = grade_file(model, data, out, batch_size, lambda n: bar.advance(task, n), int8,
                                           engine)
    rate = len(graded) / seconds if seconds > 0 else float("inf")
    console.print(f"graded {len(graded)} responses in {seconds:.1f} s ({rate:.0f}/s) -> {path}", soft_wrap=True)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
