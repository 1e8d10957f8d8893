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
    "BenchmarkOpt",
    "DataDirOpt",
    "OutOpt",
    "ProgressView",
    "RubricOpt",
    "SafeConsole",
    "VerifyOpt",
    "console",
    "err_console",
    "handle_errors",
    "hidden_alias",
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


def hidden_alias(new: Any, old: Any, new_flag: str, old_flag: str, default: Any = None) -> Any:
    """The value of an option renamed from ``old_flag`` to ``new_flag`` (whose default is ``default``).
    The old spelling stays a hidden alias for one release (docs/cli.md lists the renames); giving both
    is an error."""
    if old is None:
        return new
    if new != default:
        raise typer.BadParameter(f"{old_flag} is the old name of {new_flag}; give only {new_flag}")
    return old


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
        if not self.bar.live.is_started:
            self.bar.start()
        task = self.tasks.get(ev.task)
        if task is None:
            task = self.tasks[ev.task] = self.bar.add_task(ev.task, total=ev.total, info="")
        self.bar.update(task, completed=ev.done, total=ev.total, info=ev.info)
