"""Fault injection for the CLI: run ``python -m rubrictool.cli`` in a child process (this checkout on PYTHONPATH) and
stop it with a signal once it has written N files under a folder, stored N replies in a cache, or after a delay; or
run it under a file-size limit (RLIMIT_FSIZE with SIGXFSZ ignored: every write past the limit fails with EFBIG, what
a full disk does). Used by tests/test_faults.py.

    res = run_cli(["train", ...], stop=Stop(signal.SIGKILL, files=5, watch=tmp_path))
    assert res.stopped and res.returncode == -signal.SIGKILL
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ROOT",
    "Result",
    "Stop",
    "cache_rows",
    "cli_env",
    "count_files",
    "fsize_limit",
    "one_line_error",
    "run_cli",
]

ROOT = Path(__file__).resolve().parent.parent.parent


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def count_files(folder: Path) -> int:
    """Regular files under ``folder`` (hidden staging folders included), 0 if it does not exist."""
    n = 0
    for _dirpath, _dirs, files in os.walk(folder):
        n += len(files)
    return n


def cache_rows(cache: Path) -> int:
    """Replies stored in an annotate reply cache (0 if it does not exist or cannot be read yet)."""
    if not cache.is_file():
        return 0
    try:
        con = sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM replies").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@dataclass(frozen=True)
class Stop:
    """When to signal the child: after ``files`` files exist under ``watch``, after ``rows`` replies are stored in
    the cache ``watch``, or after ``delay`` seconds (whichever is given; the first met wins)."""

    sig: int
    files: int | None = None
    rows: int | None = None
    delay: float | None = None
    watch: Path | None = None

    def due(self, t: float) -> bool:
        if self.delay is not None and t >= self.delay:
            return True
        if self.files is not None and self.watch is not None and count_files(self.watch) >= self.files:
            return True
        return self.rows is not None and self.watch is not None and cache_rows(self.watch) >= self.rows


@dataclass
class Result:
    returncode: int
    output: str
    stopped: bool  # the signal was sent before the child exited on its own
    seconds: float  # how long the child ran


def fsize_limit(limit: int) -> Callable[[], None]:
    """A preexec_fn: files of the child (and only the child) cannot grow past ``limit`` bytes."""

    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write raises EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def run_cli(args: list[str], *, stop: Stop | None = None, preexec: Callable[[], None] | None = None,
            timeout: float = 300.0) -> Result:
    """``rubrictool ARGS`` in a child process; with ``stop``, signalled when it is due (then waited for)."""
    cmd = [sys.executable, "-m", "rubrictool.cli", *args]
    # output through a pipe (a file-size limit does not apply to it), drained by a thread so the child never blocks
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=preexec, cwd=str(ROOT))  # noqa: PLW1509 - signal + setrlimit only
    chunks: list[bytes] = []
    pipe = proc.stdout
    assert pipe is not None

    def drain() -> None:
        while chunk := pipe.read(4096):
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    t0 = time.monotonic()
    stopped = False
    try:
        while proc.poll() is None:
            t = time.monotonic() - t0
            if t > timeout:
                raise AssertionError(f"{' '.join(args[:1])} did not finish in {timeout:.0f} s")
            if stop is not None and not stopped and stop.due(t):
                proc.send_signal(stop.sig)
                stopped = True
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=30)
    seconds = time.monotonic() - t0
    text = b"".join(chunks).decode("utf-8", "replace")
    return Result(proc.returncode, text, stopped, seconds)


def one_line_error(output: str) -> bool:
    """The CLI's error is one line (Rich may wrap it; a traceback never appears)."""
    return "Traceback" not in output and "error" in output.lower()
