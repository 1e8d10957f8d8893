"""The one atomic file writer: every file rubrictool writes goes through :func:`atomic_write` (or its text, bytes
and JSON forms), so a reader sees the old file or the new one, never half of one, and the new file has the mode a
plain ``open(path, "w")`` would give it (the process umask respected).

Kept free of heavy imports (the rubric commands use it and must start fast; no torch, no pandas):
:mod:`rubrictool.io` builds the table writers on it. reccbm, which never imports rubrictool, keeps its own copy
(:mod:`reccbm.atomic`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "new_dir_mode",
    "new_file_mode",
    "publish",
    "remove_stale_temps",
]


def _umask() -> int:
    """The process umask: read from /proc/self/status where it exists (Linux), since setting the umask to read it
    races with other threads; else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode a plain ``open(path, "w")`` gives a new file: 0o666 less the process umask.

    ``tempfile.mkstemp`` always makes 0600 files; a file renamed into place keeps that mode, so an
    atomic writer would leave outputs that colleagues sharing a server cannot read."""
    return 0o666 & ~_umask()


def new_dir_mode() -> int:
    """The mode ``mkdir`` gives a new folder: 0o777 less the process umask (``tempfile.mkdtemp`` makes 0700)."""
    return 0o777 & ~_umask()


def publish(tmp: str | Path, path: str | Path, mode: int | None = None) -> Path:
    """Give a finished temporary file ``mode`` (default: the mode a new file would have, umask respected), then
    rename it onto ``path`` (atomic on one file system). :func:`atomic_write` ends with this."""
    os.chmod(tmp, new_file_mode() if mode is None else mode)
    os.replace(tmp, path)
    return Path(path)


def atomic_write(path: str | Path, write: Callable[[Path], object], *, mode: int | None = None) -> Path:
    """Write ``path`` atomically through ``write(tmp)``, which fills a temporary file in the same folder (the form
    for libraries that write to a path: pandas, matplotlib, safetensors). The file then gets ``mode`` (default:
    the mode a new file would have) and is renamed onto ``path``; folders are created. When ``write`` fails the
    temporary file is removed and ``path`` is as it was."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        publish(tmp, p, mode)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p


def atomic_write_bytes(path: str | Path, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_write`)."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data), mode=mode)


def atomic_write_text(path: str | Path, text: str, *, mode: int | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_write`)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), mode=mode)


def atomic_write_json(path: str | Path, payload: Any, *, indent: int | None = 1, mode: int | None = None,
                      **dumps: Any) -> Path:
    """Write ``payload`` as JSON (UTF-8, a final newline) atomically; ``dumps`` go to :func:`json.dumps`."""
    return atomic_write_text(path, json.dumps(payload, indent=indent, **dumps) + "\n", mode=mode)


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the temporary files :func:`atomic_write` left beside ``path`` when a writer of it was killed
    (``.<name>.*.tmp``); returns them. Call it only while holding ``path``'s writer lock (rubrictool.locks), so no
    live writer's file is taken."""
    p = Path(path)
    gone = []
    for tmp in p.parent.glob(f".{glob_escape(p.name)}.*.tmp"):
        try:
            tmp.unlink()
            gone.append(tmp)
        except OSError:
            pass
    return gone


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters escaped."""
    import glob

    return glob.escape(name)
