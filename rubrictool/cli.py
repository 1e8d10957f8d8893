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
# (commands added below by the foundation work)

# == data ==================================================================================================

# == annotate ==============================================================================================

# == review ================================================================================================

# == adjudicate ============================================================================================

# == train / grade =========================================================================================


def main() -> None:
    app()


if __name__ == "__main__":
    main()
