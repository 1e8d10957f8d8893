"""What every command module shares: the consoles, the error handler, options defined once, and the
one renderer of :class:`rubrictool.progress.Progress` events as Rich progress bars."""

from __future__ import annotations

import contextvars
import errno
import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any, NoReturn, TypeVar

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
    "AgreementOpt",
    "BackboneOpt",
    "BenchmarkOpt",
    "ConfigOpt",
    "DataDirOpt",
    "DeviceOpt",
    "EpochsOpt",
    "JobsOpt",
    "LrOpt",
    "MaxLenOpt",
    "OldDataOpt",
    "OldRubricArg",
    "OptionalRunOpt",
    "OutOpt",
    "PresetOpt",
    "ProgressView",
    "RubricOpt",
    "RunOpt",
    "RunTableOpt",
    "SafeConsole",
    "TableOpt",
    "TableRubricOpt",
    "TrainBatchSizeOpt",
    "VerifyOpt",
    "at_least",
    "console",
    "err_console",
    "finite",
    "folds_or_none",
    "given",
    "handle_errors",
    "print_warnings",
    "renamed",
    "retired",
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
RubricOpt = Annotated[str, typer.Option(
    "--rubric", "-r", help="Bundled rubric name (mohler, asap2, mocha) or a YAML path.",
)]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output file or folder.")]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Folder holding benchmark data (default: $RUBRICTOOL_DATA, else ./data)."),
]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="Check the run by the full sha256 of every file, weights included (what every open does now; "
    "kept so that scripts that pass it keep working).")]
BenchmarkOpt = Annotated[str | None, typer.Option(
    "--benchmark", "-b", help="Bundled benchmark: mohler, asap2 or mocha.",
)]

# A trained run is always --run (-m is an LLM in `annotate`, never a run).
_RUN_HELP = "Run directory written by `rubrictool train`."
RunOpt = Annotated[Path, typer.Option("--run", help=_RUN_HELP)]
OptionalRunOpt = Annotated[Path | None, typer.Option("--run", help=_RUN_HELP)]

# Two tables, two words: --items are the answers (to annotate, grade, push for review, explain), --table is
# an adjudicated table (items + one column per concept) that trains, evaluates or diagnoses.
RunTableOpt = Annotated[Path | None, typer.Option(
    "--table", help="The adjudicated table the run was trained on (default: the run's own copy of it, else "
    "the file it recorded).")]
TableOpt = Annotated[Path | None, typer.Option(
    "--table", help="Adjudicated table: items + one column per concept.")]
TableRubricOpt = Annotated[str | None, typer.Option(
    "--rubric", "-r", help="Rubric of --table (name or YAML).")]
AgreementOpt = Annotated[Path | None, typer.Option(
    "--agreement", help="agreement.json for the α column (default: beside --table).")]

# Old spellings, accepted for one release: hidden from help, a note when used (renamed).
OldDataOpt = Annotated[Path | None, typer.Option(
    "--data", hidden=True, help="The old name of --items or --table (removed in the next release).")]
OldRubricArg = Annotated[str | None, typer.Argument(
    hidden=True, metavar="RUBRIC", show_default=False,
    help="The old place of --rubric (removed in the next release).")]
PresetOpt = Annotated[str, typer.Option("--preset", help=(
    "default (measured best), plain (the default before its concept reader: no answer-reference alignment, "
    "hard concept targets, LCEC learned) or paper (the paper's recipe)."))]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", help="YAML with sections model, stage1, joint, stage2 (docs/training.md lists every field).")]
BackboneOpt = Annotated[str | None, typer.Option("--backbone", help="HF name/path (default MiniLM).")]
def _refuse(param: typer.CallbackParam, value: object, fix: str) -> None:
    """A numeric option out of range: one line naming it and the fix, exit 1, before any work."""
    name = param.opts[0] if param.opts else str(param.name)
    err_console.print(f"[bold red]error:[/] {name} {shown(value, one_line=True)}: {fix}",
                      highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def at_least(lo: int, hi: int | None = None) -> Callable[[typer.CallbackParam, int | None], int | None]:
    """An option callback: a whole number of at least ``lo`` (and at most ``hi``); else one line, exit 1."""
    def check(param: typer.CallbackParam, value: int | None) -> int | None:
        if value is not None and (value < lo or (hi is not None and value > hi)):
            _refuse(param, value, f"give a whole number from {lo} to {hi}" if hi is not None
                    else f"give a whole number of at least {lo}")
        return value

    return check


def finite(lo: float | None = None, hi: float | None = None, *, open_lo: bool = False,
           open_hi: bool = False) -> Callable[[typer.CallbackParam, float | None], float | None]:
    """An option callback: the number is finite (no nan, no inf) and inside [lo, hi] (``open_lo``/``open_hi``: the
    bound itself excluded); else one line naming the range, exit 1."""
    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        if value is None:
            return value
        low = lo is not None and (value <= lo if open_lo else value < lo)
        high = hi is not None and (value >= hi if open_hi else value > hi)
        if not math.isfinite(value) or low or high:
            lo_s = "" if lo is None else f"{'above' if open_lo else 'at least'} {lo:g}"
            hi_s = "" if hi is None else f"{'below' if open_hi else 'at most'} {hi:g}"
            _refuse(param, value, "give a finite number " + " and ".join(x for x in (lo_s, hi_s) if x))
        return value

    return check


def folds_or_none(param: typer.CallbackParam, value: int | None) -> int | None:
    """An option callback for a number of folds: 0 (none) or 2 or more; else one line, exit 1."""
    if value is not None and (value < 0 or value == 1):
        _refuse(param, value, "give 0 (none) or 2 or more folds")
    return value


EpochsOpt = Annotated[int | None, typer.Option(
    "--epochs", callback=at_least(1), help="Stage I epochs (preset default 3, paper 6).",
)]
MaxLenOpt = Annotated[int | None, typer.Option(
    "--max-len", callback=at_least(8), help="Tokens per input (default 128).",
)]
TrainBatchSizeOpt = Annotated[int | None, typer.Option(
    "--batch-size", callback=at_least(1), help="Batch size (default 8).",
)]
LrOpt = Annotated[float | None, typer.Option(
    "--lr", callback=finite(0, open_lo=True), help="Stage I learning rate (default 1e-4).",
)]
DeviceOpt = Annotated[str | None, typer.Option("--device", help="auto (CUDA if present) or cpu.")]
JobsOpt = Annotated[int, typer.Option(
    "--jobs", callback=at_least(1), help="Train that many runs at once (folds, cells or combinations), in "
                                         "worker processes (CPU cores shared; one GPU each where there are several).",
)]

F = TypeVar("F", bound=Callable[..., Any])


def _error_types() -> tuple[type[BaseException], ...]:
    """RubrictoolError, plus ReccbmError once reccbm is loaded (importing it loads torch: seconds that
    `rubrictool --help` and the non-training commands should not pay)."""
    reccbm_errors = sys.modules.get("reccbm.errors")
    extra: tuple[type[BaseException], ...] = (reccbm_errors.ReccbmError,) if reccbm_errors else ()
    return (RubrictoolError, *extra)


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}  # a full disk, a quota, a size limit, read-only
_KEPT_ON_INTERRUPT = {  # what a command keeps when it is interrupted; any other command: nothing half-written
    "train_cmd": "the run was not written (a retrain leaves the old run as it was; train --folds keeps the folds it "
                 "finished, and a re-run resumes from them)",
    "learning_curve_cmd": "the cells that finished are kept, and a re-run resumes from them",
    "annotate_cmd": "the replies received are kept in the reply cache, and a re-run does not pay for them again",
}


def _interrupted(command: str) -> str:
    """The line Ctrl-C prints: what was kept, and only what was."""
    return "interrupted; " + _KEPT_ON_INTERRUPT.get(
        command, "nothing was half-written: files are written whole or not at all, and the outputs not yet written "
                 "were not")


def _command_name(fn: Callable[..., Any]) -> str:
    """The command as typed ("rubrictool data import"), whatever the program was called (``python -m``)."""
    import click

    ctx = click.get_current_context(silent=True)
    words = []
    while ctx is not None and ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["rubrictool", *reversed(words)]) if words else f"rubrictool {fn.__name__}"


def _one_writer(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a command holding the lock of every output it checks (rubrictool.outputs), until it ends."""
    from rubrictool.outputs import one_writer_per_output

    with one_writer_per_output(_command_name(fn)):
        return fn(*args, **kwargs)


def run_script(main: Callable[[], int]) -> NoReturn:
    """Run a lab or benchmark script's ``main`` as a command runs: a library error is one line, ``error: <message>;
    <hint>``, on stderr with exit code 1, never a traceback; otherwise the exit code is ``main``'s."""
    try:
        code = main()
    except _error_types() as e:
        hint = getattr(e, "hint", None)
        print(f"error: {shown(e)}" + (f"; {shown(hint)}" if hint else ""), file=sys.stderr)
        raise SystemExit(1) from None
    raise SystemExit(code)


def handle_errors(fn: F) -> F:
    """Turn library errors into ``error: <message>`` on stderr and exit code 1 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:  # a context of its own: settings a command makes for its run (e.g. --verify) end with it
            return contextvars.copy_context().run(_one_writer, fn, args, kwargs)
        except _error_types() as e:
            hint = getattr(e, "hint", None)  # how to fix it on the command line (RubrictoolError)
            err_console.print(f"[bold red]error:[/] {shown(e)}" + (f"; {shown(hint)}" if hint else ""), highlight=False,
                              soft_wrap=True)
            raise typer.Exit(1) from None
        except OSError as e:
            if e.errno not in _WRITE_ERRNOS:
                raise
            where = f" {e.filename}" if e.filename else ""
            err_console.print(f"[bold red]error:[/] cannot write{shown(where, one_line=True)} "
                              f"({shown(e.strerror or e)}); "
                              "every file is written whole or not at all, so nothing half-written was left; free space "
                              "(or pass --out a folder you can write), then run it again",
                              highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print(_interrupted(fn.__name__), soft_wrap=True, highlight=False)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


T = TypeVar("T")
_GOES = "will be removed in the next release"


def _usage_error(message: str) -> NoReturn:
    """A command line that cannot mean anything: one line, exit 2 (click's code for usage errors), before
    any work."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def renamed(new_name: str, new: T | None, old_name: str, old: T | None, *,
            note: str | None = None) -> T | None:
    """The value of an option given by its name, or by its old spelling (``old``: a hidden option or
    argument, kept for one release), which prints one note on stderr (``note``: its text, when the old
    spelling is not an option name). Both at once is a usage error: one line, exit 2."""
    if old is None:
        return new
    if new is not None:
        _usage_error(f"{old_name} is the old spelling of {new_name}: give {new_name} only")
    text = note or f"{old_name} is renamed {new_name} here; {old_name} {_GOES}"
    err_console.print(f"[yellow]note:[/] {text}", highlight=False, soft_wrap=True)
    return old


def given(name: str, value: T | None, fix: str) -> T:
    """The value of an option the command needs (one that was required before it got a new spelling);
    missing, a usage error: one line naming it and the fix, exit 2."""
    if value is None:
        _usage_error(f"{name} is missing: {fix}")
    return value


def retired(option: str, command: str, instead: str) -> None:
    """One note on stderr for an option that still works but leaves ``command`` in the next release: what
    to use instead."""
    err_console.print(f"[yellow]note:[/] {option} {_GOES} from `{command}`; instead: {instead}",
                      highlight=False, soft_wrap=True)


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
