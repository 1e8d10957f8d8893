"""One rule for every command's ``--out``, checked before any work: nothing a command writes may replace one of its
inputs, or a file or folder that the command did not write itself.

:func:`check_output` refuses, in one line naming both paths,

* an output that resolves (``./``, ``..``, symlinks, hard links) to an input, an input inside a folder the command
  replaces whole (a run), or an output that lands on a file a run recorded (``--out RUN/model.safetensors``);
* a run folder (``kind="run"``, replaced whole by ``train``) over an existing file, or over an existing folder that
  is not a run, a k-fold run or empty; the current folder or one above it;
* a k-fold folder (``kind="kfold"``) over anything but a k-fold run or an empty folder;
* a folder of outputs (``kind="folder"``) over an existing file; a file (``kind="file"``) over an existing folder,
  or over an existing file that ``own`` says this command did not write;
* an output into a trained run (a run folder or a k-fold run, or any file or folder inside one: ``data import --out
  RUN/table.csv``, ``adjudicate --out RUN``), which would change what the run recorded; only the commands that write
  about the run (report, explain, intervene, audit: ``in_run=True``) may write a folder of their own inside it;
* an input named in ``required`` that does not exist, before anything is created.

A symlinked ``--out`` is resolved first: the returned path is where the command writes (``train --out L``, L a link
to a run, retrains the run L points to, and L keeps pointing at it). :func:`output_lock` holds the one lock per
output file (rubrictool.locks, the trainers' lock), so two commands writing the same file cannot both win.

Then it checks that the output's folder can be written (a read-only folder, a full disk), so a command that works
for minutes fails before the work, not after it: :func:`writable_parent`.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from rubrictool.errors import DataError

__all__ = ["OutputError", "check_output", "enclosing_run", "has_columns", "is_kfold_folder", "is_run_folder",
           "is_split_file", "one_writer_per_output", "output_lock", "table_columns", "writable_parent"]

KINDS = ("run", "kfold", "folder", "file")
_claims: contextvars.ContextVar[tuple[str, contextlib.ExitStack] | None] = contextvars.ContextVar(
    "rubrictool_output_claims", default=None)
# the folders a command's write probe passed in, before it took their outputs' locks: not probed again while the
# command runs (its own lock file may hold the last free block of a nearly full disk)
_probed: contextvars.ContextVar[set[Path] | None] = contextvars.ContextVar("rubrictool_probed_folders", default=None)


class OutputError(DataError):
    """``--out`` would overwrite an input, or a file or folder the command did not write."""


def is_run_folder(path: Path) -> bool:
    """A folder ``train`` wrote as one run (model.json or run.json)."""
    return (path / "model.json").is_file() or (path / "run.json").is_file()


def is_kfold_folder(path: Path) -> bool:
    """A folder ``train --folds`` wrote (folds.json, pooled predictions, fold-N runs, or — a k-fold run killed before
    its first fold finished — the fold-N.split.json files it writes before any training)."""
    if (path / "folds.json").is_file() or (path / "pooled_predictions.csv").is_file():
        return True
    try:
        entries = list(path.iterdir())
    except OSError:
        return False
    return any((p.is_dir() and p.name.startswith("fold-")) or (p.is_file() and p.name.startswith("fold-")
                                                                 and p.name.endswith(".split.json"))
               for p in entries)


def enclosing_run(path: Path) -> Path | None:
    """The trained run (or k-fold run) ``path`` is, or lies inside (``path`` resolved), else None."""
    for d in (path, *path.parents):
        try:
            if d.is_dir() and (is_run_folder(d) or ((d / "folds.json").is_file()
                                                   or (d / "pooled_predictions.csv").is_file())):
                return d
        except OSError:
            return None
    return None


def _resolved(p: str | Path) -> Path:
    return Path(os.path.abspath(Path(p).expanduser())).resolve()


def _same(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _inside(child: Path, parent: Path) -> bool:
    return child != parent and parent in child.parents


def _recorded(run: Path) -> set[str]:
    """The files a run's completion record lists (and the record itself)."""
    try:
        record = json.loads((run / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"model.json"} if (run / "model.json").is_file() else set()
    files = record.get("files") if isinstance(record, dict) else None
    return {"run.json", *(files if isinstance(files, dict) else {})}


def _sample(path: Path) -> str:
    try:
        names = sorted(p.name for p in path.iterdir())
    except OSError:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f" (it holds {shown})" if names else ""


def _own_folder(path: Path, writes: Sequence[str], own: Callable[[Path], bool] | None) -> bool:
    """An existing folder a command may write into: empty, or its own earlier output (one of the names it
    writes there, the lock or temporary file of one, or ``own(path)``)."""
    try:
        names = [p.name for p in path.iterdir()]
    except OSError:
        return False
    ours = {*writes, *(f"{n}.lock" for n in writes)}
    return (not names or any(n in ours or any(n.startswith(f".{w}.") for w in writes) for n in names)
            or (own is not None and own(path)))


def check_output(
    out: str | Path,
    inputs: Iterable[str | Path | None],
    kind: str,
    *,
    writes: Sequence[str] = (),
    own: Callable[[Path], bool] | None = None,
    what: str = "the output",
    in_run: bool = False,
    required: Iterable[str | Path | None] = (),
    lock: bool = True,
) -> Path:
    """Refuse ``out`` when writing it would lose an input or something this command did not write (module doc).

    ``inputs``: the paths the command reads (None skipped; a ``NAME=PATH`` review spec is read as PATH).
    ``kind``: "run", "kfold", "folder" or "file". ``writes``: for a folder, the names written into it; for a file,
    the sibling files written beside it. ``own(path)``: whether an existing file is this command's earlier output.
    ``in_run``: a folder of the command's own inside a run is allowed (report, explain, intervene, audit).
    ``required``: inputs that must exist (a one-line "no such file" before anything is created).
    ``lock``: inside :func:`one_writer_per_output` (every CLI command), hold ``out``'s :func:`output_lock`
    until the command ends; False where the library takes the output's own lock at once (train's run, a
    learning curve).
    Returns ``out`` with its symlinks resolved (where the command writes)."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    _check_required(required)
    given = Path(out)
    dst = _resolved(given)
    if kind == "folder":
        targets = [dst / name for name in writes]
    else:
        targets = [dst, *(dst.parent / name for name in writes)]
    _check_inputs(given, dst, inputs, targets, kind in ("run", "kfold"), what)
    _refuse_inside_a_run(given, dst, kind, in_run, what)
    _check_existing(given, dst, kind, writes, own, what)
    where = dst if Path(os.path.abspath(given.expanduser())) != dst else given  # a link: where it points
    claim = _claims.get()
    if lock and claim is not None:
        writable_parent(where)  # after the checks, before the lock: a read-only folder or a full disk named as such
        claim[1].enter_context(output_lock(where, claim[0]))
    return where


def _check_required(required: Iterable[str | Path | None]) -> None:
    """A one-line "no such file" for an input that must exist, before anything is created."""
    for need in required:
        if need is not None and "=" in str(need) and not Path(need).exists():
            need = str(need).split("=", 1)[1]  # a NAME=PATH review spec
        if need is not None and not Path(need).exists():
            raise DataError(f"{need}: no such file or folder; nothing was written", hint="check the path")


def _check_inputs(given: Path, dst: Path, inputs: Iterable[str | Path | None], targets: list[Path],
                  replaced_whole: bool, what: str) -> None:
    """Refuse an output that is an input, writes over one, replaces the folder holding one, or writes over a file a
    run recorded."""
    for raw in inputs:
        if raw is None or str(raw) == "":
            continue
        text = str(raw)
        if "=" in text and not Path(text).exists():
            text = text.split("=", 1)[1]
        src = _resolved(text)
        if not src.exists():  # a bundled rubric's name, a cache not made yet: nothing there to lose
            continue
        hit = next((t for t in targets if _same(t, src)), None)
        why = None
        if hit is not None:
            why = "" if hit == dst else f" (it writes {hit.name} there)"
        elif _same(dst, src):
            why = ""
        elif replaced_whole and _inside(src, dst):
            why = f" ({what} replaces the folder that holds it)"
        if why is not None:
            raise OutputError(f"--out {given} would overwrite the input {raw}{why}",
                              hint="pass --out a path that is not one of the command's inputs")
        if src.is_dir():
            recorded = _recorded(src)
            for t in targets:
                if _inside(t, src) and t.relative_to(src).as_posix() in recorded:
                    raise OutputError(f"--out {given} would overwrite {t.relative_to(src).as_posix()} of the run {raw}",
                                      hint="pass --out a path outside the run's files")


def _check_existing(given: Path, dst: Path, kind: str, writes: Sequence[str], own: Callable[[Path], bool] | None,
                    what: str) -> None:
    """Refuse an existing file or folder at ``dst`` that is not this command's own earlier output."""
    if kind in ("run", "kfold"):
        _check_run_folder(given, dst, kind)
    elif kind == "folder":
        if dst.exists() and not dst.is_dir():
            raise OutputError(f"--out {given} is an existing file, not a folder: {what} would replace it",
                              hint="pass --out a folder")
        if dst.is_dir() and not _own_folder(dst, writes, own):
            raise OutputError(f"--out {given} is an existing folder this command did not write"
                              f"{_sample(dst)}: {what} would be mixed with its files",
                              hint="pass --out a new or empty folder (or an earlier output of this "
                                   "command, which it replaces)")
    else:
        if dst.is_dir():
            raise OutputError(f"--out {given} is an existing folder, not a file", hint="pass --out a file path")
        if dst.exists() and own is not None and not own(dst):
            raise OutputError(f"--out {given} exists and is not {what}: writing would replace it",
                              hint="pass --out a new file, or remove it first")


def _check_run_folder(given: Path, dst: Path, kind: str) -> None:
    """A run or k-fold folder replaces its folder whole: never the current folder, a file, or a folder that is not
    a run of its kind."""
    cwd = _resolved(Path.cwd())
    if dst == cwd or _inside(cwd, dst):
        raise OutputError(f"--out {given} is the current folder{' or one above it' if dst != cwd else ''}: a run "
                          "replaces its folder whole", hint="pass --out a new folder, e.g. --out runs/NAME")
    if dst.is_file() or (dst.exists() and not dst.is_dir()):
        raise OutputError(f"--out {given} is an existing file, not a run folder: training would replace it",
                          hint="pass --out a new folder, e.g. --out runs/NAME")
    if dst.is_dir() and any(dst.iterdir()):
        run, kfold = is_run_folder(dst), is_kfold_folder(dst)
        if kind == "run" and not (run or kfold):
            raise OutputError(f"--out {given} is an existing folder that is not a run{_sample(dst)}: training "
                              "would replace it whole", hint="pass --out a new folder (or an earlier run to retrain)")
        if kind == "kfold" and not kfold:
            what_is = "a run of one split" if run else "a folder that is not a k-fold run"
            raise OutputError(f"--out {given} is {what_is}{_sample(dst)}: k-fold training writes fold-N runs into "
                              "it", hint="pass --out a new folder (or an earlier k-fold run to resume)")


@contextlib.contextmanager
def one_writer_per_output(command: str) -> Iterator[None]:
    """One writer per output: every output :func:`check_output` accepts inside the block keeps its
    :func:`output_lock` until the block ends, so a second command writing the same file or folder stops at
    once, naming the first (``command``, e.g. "rubrictool report", and its pid). rubrictool.cli runs every
    command in one."""
    with contextlib.ExitStack() as stack:
        token = _claims.set((command, stack))
        probed = _probed.set(set())
        try:
            yield
        finally:
            _probed.reset(probed)
            _claims.reset(token)


def _refuse_inside_a_run(given: Path, dst: Path, kind: str, in_run: bool, what: str) -> None:
    """A command's output in a trained run (a run or k-fold folder, or inside one), refused unless it is the run
    itself retrained (``kind`` "run"/"kfold") or a folder of its own inside the run (``in_run``)."""
    if kind in ("run", "kfold"):
        run = enclosing_run(dst.parent) if dst.parent != dst else None
        if run is not None and not (kind == "run" and is_kfold_folder(run) and not is_run_folder(run)):
            raise OutputError(f"--out {given} is inside the trained run {run}: a run inside a run would change the "
                              "files it recorded", hint="pass --out a folder outside every run, e.g. runs/NAME")
        return
    run = enclosing_run(dst)
    if run is None:
        return
    if in_run and kind == "folder" and dst != run and not _holds_recorded(run, dst):
        return
    inside = "is the trained run" if run == dst else f"is inside the trained run {run}"
    raise OutputError(f"--out {given} {inside}: writing {what} there would change the files the run recorded "
                      "(every later command would refuse the run)",
                      hint="pass --out a path outside the run's folder")


def _holds_recorded(run: Path, folder: Path) -> bool:
    """Whether ``folder`` (inside ``run``) is, or holds, a file the run recorded."""
    rel = folder.relative_to(run).as_posix()
    return any(name == rel or name.startswith(rel + "/") for name in _recorded(run))


def output_lock(out: str | Path, command: str) -> contextlib.AbstractContextManager[Path]:
    """The one writer of an output file: ``<out>.lock`` held while ``command`` computes and writes ``out``; a second
    command on the same file stops at once, naming the first (rubrictool.locks)."""
    from rubrictool.locks import writer_lock

    by = command if command.startswith("rubrictool") else f"rubrictool {command}"
    return writer_lock(out, f"the output {out}", "wait for it to finish, or pass another --out",
                       by=by, kept=f"nothing was written to {out}")


def writable_parent(out: str | Path, *, folder: bool = False, kept: str | None = None) -> Path:
    """The folder a command writes ``out`` into (``out`` itself when ``folder``), created, with a probe file written
    and removed in it: one :class:`OutputError` naming it for a read-only folder (Errno 30, EACCES/EPERM), a full disk
    (Errno 28) or a path under a regular file, before any work. Inside :func:`one_writer_per_output` a folder is
    probed once per command."""
    p = Path(out)
    d = p if folder else (p.parent if str(p.parent) else Path("."))
    probed = _probed.get()
    if probed is not None and d.is_dir() and d.resolve() in probed:
        return d
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".rubrictool-probe-", dir=d)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        why = exc.strerror or str(exc)
        hint = ("free space (or raise the file-size limit), then run it again"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                else "pass --out DIR, a folder you can write" if folder
                else "pass --out a path in a folder you can write")
        raise OutputError(f"cannot write into {d} ({why}); nothing was written"
                          + (f", {kept}" if kept else ""), hint=hint) from None
    if probed is not None:
        probed.add(d.resolve())
    return d


def table_columns(path: Path) -> set[str]:
    """The column names of a CSV, JSONL or Parquet file, read from its header only (empty when unreadable)."""
    try:
        suffix = path.suffix.lower()
        if suffix == ".csv":
            import csv

            with path.open(encoding="utf-8-sig", newline="") as fh:
                return {c.strip() for c in next(csv.reader(fh), [])}
        if suffix in (".jsonl", ".json"):
            with path.open(encoding="utf-8") as fh:
                first = json.loads(fh.readline() or "{}")
            return set(first) if isinstance(first, dict) else set()
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return set(pq.read_schema(path).names)
    except (OSError, ValueError, UnicodeDecodeError, ImportError):
        return set()
    except Exception:  # noqa: BLE001 - pyarrow's errors for a file that is not parquet: not our output
        return set()
    return set()


def is_split_file(path: Path) -> bool:
    """An ``own`` test for :func:`check_output`: the existing file is a split (JSON with train, dev and test lists,
    what ``data split`` writes), or empty."""
    try:
        if path.stat().st_size == 0:
            return True
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and {"train", "dev", "test"} <= set(doc)


def has_columns(*names: str) -> Callable[[Path], bool]:
    """An ``own`` test for :func:`check_output`: the existing file is a table with all of ``names`` (an earlier output
    of the command), or an empty file."""

    def own(path: Path) -> bool:
        try:
            if path.stat().st_size == 0:
                return True
        except OSError:
            return False
        return set(names) <= table_columns(path)

    return own
