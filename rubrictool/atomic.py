"""Atomic file writes whose files get the mode a new file would have (the process umask respected).

Kept free of heavy imports (the rubric commands use it and must start fast); :mod:`rubrictool.io`
re-exports these for the table writers.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_text", "new_file_mode", "publish"]


def new_file_mode() -> int:
    """The mode a plain ``open(path, "w")`` gives a new file: 0o666 less the process umask.

    ``tempfile.mkstemp`` always makes 0600 files; a file renamed into place keeps that mode, so an
    atomic writer would leave outputs that colleagues sharing a server cannot read. Read from
    /proc/self/status where it exists (Linux), else by setting and restoring the umask.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def publish(tmp: str | Path, path: str | Path) -> Path:
    """Give a finished temporary file the mode a new file would have (umask respected), then rename
    it onto ``path`` (atomic on one file system). Every atomic writer ends with this."""
    os.chmod(tmp, new_file_mode())
    os.replace(tmp, path)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically, with a umask-respecting mode; folders are created."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        publish(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p
