"""What every command module shares: the consoles, the error handler, options defined once, and the
one renderer of :class:`rubrictool.progress.Progress` events as Rich progress bars."""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from rubrictool.cli._sanitize import shown
from rubrictool.errors import RubrictoolError
from rubrictool.progress import Progress
from rubrictool.textsafe import strip_controls

__all__ = [
    "AdjudicatedDataOpt",
    "AgreementOpt",
    "BackboneOpt",
    "BenchmarkOpt",
    "ConfigOpt",
    "DataDirOpt",
    "DataRubricOpt",
    "DeviceOpt",
    "EpochsOpt",
    "JobsOpt",
    "LrOpt",
    "MaxLenOpt",
    "OptionalRunOpt",
    "OutOpt",
    "PresetOpt",
    "ProgressView",
    "RubricOpt",
    "RunDataOpt",
    "RunOpt",
    "SafeConsole",
    "TrainBatchSizeOpt",
    "VerifyOpt",
    "console",
    "err_console",
    "handle_errors",
    "print_warnings",
]



class SafeConsole(Console):
    """A Rich console that never writes a control character it did not make: every string it renders (print
    arguments, table cells) loses terminal escape sequences and control characters first (line breaks and
    tabs kept). Text from users still goes through :func:`rubrictool.cli._sanitize.shown`, which also
    escapes Rich markup."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(strip_controls(text), **kwargs)


console = SafeConsole()
err_console = SafeConsole(stderr=True)

# -- shared options (defined once) ------------------------------------------------------------------------
RubricOpt = Annotated[str, typer.Option("--rubric", "-r", help="Bundled rubric name (mohler, asap2, mocha) or a YAML path.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output file or folder.")]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Folder holding benchmark data (default: $RUBRICTOOL_DATA, else ./data)."),
]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Check the run by the full sha256 of every file, weights included (default: sizes, small files "
    "hashed, a sampled hash of the weights).")]
BenchmarkOpt = Annotated[str | None, typer.Option("--benchmark", "-b", help="Bundled benchmark: mohler, asap2 or mocha.")]

# A trained run is always --run (-m is an LLM in `annotate`, never a run).
_RUN_HELP = "Run directory written by `rubrictool train`."
RunOpt = Annotated[Path, typer.Option("--run", help=_RUN_HELP)]
OptionalRunOpt = Annotated[Path | None, typer.Option("--run", help=_RUN_HELP)]
RunDataOpt = Annotated[Path | None, typer.Option(
    "--data", help="The adjudicated table the run was trained on (default: the run's own copy of it, else the file it recorded).")]

# What train, learning-curve and ablate read and train with.
AdjudicatedDataOpt = Annotated[Path | None, typer.Option("--data", help="Adjudicated table: items + one column per concept.")]
DataRubricOpt = Annotated[str | None, typer.Option("--rubric", "-r", help="Rubric of --data (name or YAML).")]
AgreementOpt = Annotated[Path | None, typer.Option("--agreement", help="agreement.json for the α column (default: beside --data).")]
PresetOpt = Annotated[str, typer.Option("--preset", help=(
    "default (measured best), plain (the default before its concept reader: no answer-reference alignment, "
    "hard concept targets, LCEC learned) or paper (the paper's recipe)."))]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="YAML with sections model, stage1, joint, stage2 (docs/training.md lists every field).")]
BackboneOpt = Annotated[str | None, typer.Option("--backbone", help="HF name/path (default MiniLM).")]
EpochsOpt = Annotated[int | None, typer.Option("--epochs", help="Stage I epochs (preset default 3, paper 6).")]
MaxLenOpt = Annotated[int | None, typer.Option("--max-len", help="Tokens per input (default 128).")]
TrainBatchSizeOpt = Annotated[int | None, typer.Option("--batch-size", help="Batch size (default 8).")]
LrOpt = Annotated[float | None, typer.Option("--lr", help="Stage I learning rate (default 1e-4).")]
DeviceOpt = Annotated[str | None, typer.Option("--device", help="auto (CUDA if present) or cpu.")]
JobsOpt = Annotated[int, typer.Option("--jobs", help="Train that many runs at once (folds, cells or combinations), in "
                                     "worker processes (CPU cores shared; one GPU each where there are several).")]

F = TypeVar("F", bound=Callable[..., Any])


def _error_types() -> tuple[type[BaseException], ...]:
    """RubrictoolError, plus ReccbmError once reccbm is loaded (importing it loads torch: seconds that
    `rubrictool --help` and the non-training commands should not pay)."""
    reccbm_errors = sys.modules.get("reccbm.errors")
    extra: tuple[type[BaseException], ...] = (reccbm_errors.ReccbmError,) if reccbm_errors else ()
    return (RubrictoolError, *extra)


def handle_errors(fn: F) -> F:
    """Turn library errors into ``error: <message>`` on stderr and exit code 1 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:  # a context of its own: settings a command makes for its run (e.g. --verify) end with it
            return contextvars.copy_context().run(fn, *args, **kwargs)
        except _error_types() as e:
            hint = getattr(e, "hint", None)  # how to fix it on the command line (RubrictoolError)
            err_console.print(f"[bold red]error:[/] {shown(e)}" + (f"; {shown(hint)}" if hint else ""), highlight=False,
                              soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("interrupted; everything already written is kept (re-run to resume)")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def print_warnings(warnings: list[str]) -> None:
    """Print a run's warnings (e.g. "… changed since this run was trained") to stderr, one line each."""
    for w in warnings:
        err_console.print(f"[yellow]warning:[/] {shown(w)}", soft_wrap=True, highlight=False)


class ProgressView:
    """Renders :class:`~rubrictool.progress.Progress` events: one bar per task, added when a task first
    reports. ``start_on_first`` shows nothing until an event arrives (a download that turns out to be
    unnecessary draws no bar)."""

    def __init__(
        self,
        target: Console,
        *columns: str | ProgressColumn,
        transient: bool = False,
        start_on_first: bool = False,
    ) -> None:
        cols = columns or (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bar = RichProgress(*cols, console=target, transient=transient)
        self.tasks: dict[str, Any] = {}
        self.notes: set[str] = set()
        self.start_on_first = start_on_first

    def __enter__(self) -> ProgressView:  # noqa: PYI034
        if not self.start_on_first:
            self.bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.bar.live.is_started:
            self.bar.stop()

    def __call__(self, ev: Progress | None) -> None:
        if ev is None:
            return
        if ev.kind == "warning":
            self.bar.console.print(f"[yellow]warning:[/] {shown(ev.info)}", soft_wrap=True)
            return
        if ev.kind == "note":  # a fact about the run (the device it trains on): once, however many runs repeat it
            if ev.info not in self.notes:
                self.notes.add(ev.info)
                self.bar.console.print(shown(ev.info), soft_wrap=True, highlight=False)
            return
        if not self.bar.live.is_started:
            self.bar.start()
        task = self.tasks.get(ev.task)
        if task is None:
            task = self.tasks[ev.task] = self.bar.add_task(ev.task, total=ev.total, info="")
        self.bar.update(task, completed=ev.done, total=ev.total, info=ev.info)
