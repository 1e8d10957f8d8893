"""One writer per file or folder: an advisory lock file beside it (annotate's reply cache and output, a learning
curve's folder).

``<cache>.lock`` (and ``<predictions>.lock`` beside the output) is held with ``fcntl.flock`` for the
whole run and names its holder (pid, host, start time). A second ``annotate`` on the same cache or
output stops at once with that name instead of paying for the same requests again and leaving a
prediction table that disagrees with the cache. The kernel releases a flock when its process dies, so
the file a killed run leaves behind never blocks the next one: only a lock that is *held* does.

Within one process the lock is re-entrant (``annotate()`` inside :func:`run_annotation` takes it
again), and worker processes forked by ``--workers`` drop their inherited copy at once, so a killed
parent's lock is free the moment the parent is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from rubrictool.errors import RubrictoolError

__all__ = ["LockHeld", "lock_path", "writer_lock"]

try:  # POSIX; elsewhere the lock is a no-op (documented in docs/annotate.md)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class LockHeld(RubrictoolError):
    """Another process is writing the same cache, output or folder."""


_SENT = "nothing was sent, and the cache and outputs are as they were"
_held: dict[str, tuple[int, int]] = {}  # resolved lock path -> (fd, depth) held by this process
_guard = threading.Lock()


def _close_inherited() -> None:
    """In a forked child: close the inherited lock descriptors (the parent keeps the locks)."""
    for fd, _ in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


def lock_path(target: str | Path) -> Path:
    """The lock file of ``target``: ``<target>.lock`` beside it."""
    p = Path(target)
    return p.with_name(p.name + ".lock")


def _holder(path: Path, by: str) -> tuple[str, str]:
    """(the command holding the lock, as it wrote itself, else ``by``; its pid, host and start) from the lock
    file."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(info["started"])))
        command = info.get("command")
        return (command[:80] if isinstance(command, str) and command else by,
                f"pid {int(info['pid'])} on {str(info['host'])[:64]}, running since {since}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return by, "a process that has not written its name yet"


def _acquire(path: Path, what: str, hint: str, by: str = "rubrictool annotate", kept: str = _SENT) -> int:
    """Open and flock ``path`` (non-blocking); return the descriptor. The file is re-opened when another
    holder unlinked it between our open and our lock, so two processes never lock two different files."""
    assert fcntl is not None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for every file
        except OSError as e:
            raise RubrictoolError(
                f"{path}: cannot create the lock file of {what} ({e.strerror or e}); {kept}",
                hint="make its folder writable, or pass another path",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            command, who = _holder(path, by)
            raise LockHeld(f"{what} is in use by another {command} ({who}; lock file {path})",
                           hint=hint) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # locked a file its holder had just removed: take the new one


def _write_holder(fd: int, by: str) -> None:
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": by}
    data = (json.dumps(info) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


@contextlib.contextmanager
def writer_lock(target: str | Path, what: str, hint: str, by: str = "rubrictool annotate",
                kept: str = _SENT) -> Iterator[Path]:
    """Hold ``<target>.lock`` exclusively for the block; :class:`LockHeld` (naming the holder) at once if
    another process holds it. ``what`` names the target in messages ("the reply cache x.sqlite"), ``by`` the
    command that holds such locks ("rubrictool learning-curve" for a curve's folder), ``kept`` what a lock file
    that cannot be created leaves as it was."""
    path = lock_path(target)
    if fcntl is None:  # pragma: no cover - no flock: no protection
        yield path
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = str(path.parent.resolve() / path.name)
    except OSError as e:
        raise RubrictoolError(f"{path.parent}: cannot create the folder of {what} ({e.strerror or e})") from None
    with _guard:
        held = _held.get(key)
        if held is not None:
            _held[key] = (held[0], held[1] + 1)
        else:
            fd = _acquire(path, what, hint, by, kept)
            try:
                _write_holder(fd, by)
            except OSError:
                pass  # a full disk: the lock holds all the same, only its holder's name is missing
            _held[key] = (fd, 1)
    try:
        yield path
    finally:
        with _guard:
            fd, depth = _held[key]
            if depth > 1:
                _held[key] = (fd, depth - 1)
            else:
                del _held[key]
                with contextlib.suppress(OSError):
                    os.unlink(path)  # while still holding it: a waiter re-checks the inode and retries
                os.close(fd)
