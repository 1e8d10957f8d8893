"""One rule for every command's ``--out``, checked before any work: nothing a command writes may replace one of its
inputs, or a file or folder that the command did not write itself.

:func:`check_output` refuses, in one line naming both paths,

* an output that resolves (``./``, ``..``, symlinks, hard links) to an input, an input inside a folder the command
  replaces whole (a run), or an output that lands on a file a run recorded (``--out RUN/model.safetensors``);
* a run folder (``kind="run"``, replaced whole by ``train``) over an existing file, or over an existing folder that
  is not a run, a k-fold run or empty; the current folder or one above it;
* a k-fold folder (``kind="kfold"``) over anything but a k-fold run or an empty folder;
* a folder of outputs (``kind="folder"``) over an existing file; a file (``kind="file"``) over an existing folder,
  or over an existing file that ``own`` says this command did not write.

Then it checks that the output's folder can be written (a read-only folder, a full disk), so a command that works
for minutes fails before the work, not after it: :func:`writable_parent`.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rubrictool.errors import DataError

__all__ = ["OutputError", "check_output", "has_columns", "is_kfold_folder", "is_run_folder", "table_columns", "writable_parent"]

KINDS = ("run", "kfold", "folder", "file")


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
    return any((p.is_dir() and p.name.startswith("fold-")) or (p.is_file() and p.name.startswith("fold-")
                                                                 and p.name.endswith(".split.json"))
               for p in path.iterdir())


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


def check_output(
    out: str | Path,
    inputs: Iterable[str | Path | None],
    kind: str,
    *,
    writes: Sequence[str] = (),
    own: Callable[[Path], bool] | None = None,
    what: str = "the output",
) -> Path:
    """Refuse ``out`` when writing it would lose an input or something this command did not write (module doc).

    ``inputs``: the paths the command reads (None skipped; a ``NAME=PATH`` review spec is read as PATH).
    ``kind``: "run", "kfold", "folder" or "file". ``writes``: for a folder, the names written into it; for a file,
    the sibling files written beside it. ``own(path)``: whether an existing file is this command's earlier output.
    Returns ``out``."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    given = Path(out)
    dst = _resolved(given)
    if kind == "folder":
        targets = [dst / name for name in writes]
    else:
        targets = [dst, *(dst.parent / name for name in writes)]
    replaced_whole = kind in ("run", "kfold")
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
    if replaced_whole:
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
    elif kind == "folder":
        if dst.exists() and not dst.is_dir():
            raise OutputError(f"--out {given} is an existing file, not a folder: {what} would replace it",
                              hint="pass --out a folder")
    else:
        if dst.is_dir():
            raise OutputError(f"--out {given} is an existing folder, not a file", hint="pass --out a file path")
        if dst.exists() and own is not None and not own(dst):
            raise OutputError(f"--out {given} exists and is not {what}: writing would replace it",
                              hint="pass --out a new file, or remove it first")
    return given


def writable_parent(out: str | Path, *, folder: bool = False, kept: str | None = None) -> Path:
    """The folder a command writes ``out`` into (``out`` itself when ``folder``), created, with a probe file written
    and removed in it: one :class:`OutputError` naming it for a read-only folder (Errno 30, EACCES/EPERM), a full disk
    (Errno 28) or a path under a regular file, before any work."""
    p = Path(out)
    d = p if folder else (p.parent if str(p.parent) else Path("."))
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
    return d


def table_columns(path: Path) -> set[str]:
    """The column names of a CSV, JSONL or Parquet file, read from its header only (empty when unreadable)."""
    try:
        suffix = path.suffix.lower()
        if suffix == ".csv":
            import csv

            with path.open(encoding="utf-8", newline="") as fh:
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
