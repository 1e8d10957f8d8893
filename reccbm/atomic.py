"""reccbm's atomic file writer (reccbm never imports rubrictool, so it keeps this one copy of
:mod:`rubrictool.atomic`): a temporary file in the same folder, the mode a new file would have (umask respected),
then one rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "new_file_mode"]


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0o666 less the process umask (read from /proc on Linux, where
    setting the umask to read it would race with other threads)."""
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


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Write ``path`` through ``write(tmp)`` (safetensors, onnx and json write to a path), then give the file a new
    file's mode and rename it onto ``path``; when ``write`` fails the temporary file is removed."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p
