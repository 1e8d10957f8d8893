"""``rubrictool data ...``: summarise, fetch and split benchmark data and item tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, TransferSpeedColumn
from rich.table import Table

from rubrictool.cli._common import DataDirOpt, OutOpt, ProgressView, console, err_console, handle_errors
from rubrictool.data import describe_benchmark, export_benchmark, fetch_benchmark, split_to_file
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
    s = describe_benchmark(benchmark, data_dir)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    console.print(
        f"[bold]{escape(benchmark)}[/]: {s['n_items']} answers over {s['n_questions']} questions; mean response "
        f"{s['mean_response_words']} words (median {s['median_response_words']:g}, longest {s['max_response_words']})"
    )
    for col, counts in s.get("by", {}).items():
        console.print(f"by {col}: " + ", ".join(f"{escape(k)} {v}" for k, v in counts.items()), soft_wrap=True)
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
    limit: Annotated[int | None, typer.Option("--limit", help="Keep only the first N items.")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Write a benchmark's item table (every column) to a CSV/JSONL/Parquet file, e.g. for `review push --data`.

    Example: rubrictool data export asap2 --limit 200 --out asap2-items.jsonl
    """
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
    try:
        parts = tuple(float(x) for x in ratios.split(","))
    except ValueError:
        raise DataError(f"--ratios {ratios!r}: give three numbers like 0.7,0.2,0.1") from None
    if len(parts) != 3:
        raise DataError(f"--ratios {ratios!r}: give exactly three shares (train,dev,test)")
    sizes = split_to_file(source, out, seed, (parts[0], parts[1], parts[2]), data_dir, by)
    console.print(f"wrote {out}: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + f" (seed {seed}"
                  + (f", grouped by {by})" if by else ")"), soft_wrap=True)
