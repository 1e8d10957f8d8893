"""Fault injection for the CLI: run ``python -m rubrictool.cli`` in a child process (this checkout on PYTHONPATH) and
stop it with a signal once it has written N files under a folder, stored N replies in a cache, after a delay, or when
an event is set (e.g. by :class:`HoldingProxy`, which sets it at one chosen HTTP request and holds that request while
the child is stopped); or run it under a file-size limit (RLIMIT_FSIZE with SIGXFSZ ignored: every write past the limit
fails with EFBIG, what a full disk does); or make a folder read-only (:func:`read_only`, ``chattr +i`` as root). Used
by tests/test_faults.py and tests/test_faults_push.py.

    res = run_cli(["train", ...], stop=Stop(signal.SIGKILL, files=5, watch=tmp_path))
    assert res.stopped and res.returncode == -signal.SIGKILL
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

__all__ = [
    "ROOT",
    "Hold",
    "HoldingProxy",
    "Result",
    "Stop",
    "cache_rows",
    "cli_env",
    "count_files",
    "fsize_limit",
    "one_line_error",
    "read_only",
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
    the cache ``watch``, after ``delay`` seconds, or once ``event`` is set (whichever is given; the first met wins)."""

    sig: int
    files: int | None = None
    rows: int | None = None
    delay: float | None = None
    watch: Path | None = None
    event: threading.Event | None = None

    def due(self, t: float) -> bool:
        if self.event is not None and self.event.is_set():
            return True
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

    def child_setup() -> None:
        # A suite started in the background (`pytest &` from a script) inherits SIGINT ignored, and Python keeps an
        # ignored SIGINT ignored: a Ctrl-C kill point would then test nothing. The child gets the default, as a
        # user's terminal gives it.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if preexec is not None:
            preexec()

    # output through a pipe (a file-size limit does not apply to it), drained by a thread so the child never blocks
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=child_setup, cwd=str(ROOT))  # noqa: PLW1509 - signal + setrlimit only
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


def _writable(folder: Path) -> bool:
    probe = folder / ".rubrictool-probe"
    try:
        probe.write_text("")
    except OSError:
        return False
    probe.unlink()
    return True


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[str]:
    """``folder`` read-only for the block, and how: ``chmod`` when not root, ``chattr +i`` as root (chmod does not
    stop root; an immutable folder does, on ext4 and most Linux file systems). Skips the test when neither stops a
    write; always undone."""
    import pytest

    mode = folder.stat().st_mode & 0o7777
    how = ""
    try:
        if os.geteuid() != 0:
            folder.chmod(0o500)
            how = "chmod"
        elif shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)], capture_output=True,
                                                         check=False).returncode == 0:
            how = "chattr +i"
        if not how or _writable(folder):
            pytest.skip(f"cannot make {folder} read-only here (not with chmod, not with chattr +i)")
        yield how
    finally:
        if how == "chattr +i":
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
        folder.chmod(mode)


@dataclass
class Hold:
    """The request :class:`HoldingProxy` holds: the ``nth`` (from 1) whose method is ``method`` and whose path (no
    query) matches the regular expression ``path``. ``when`` says what the server sees of it:

    * ``"before"``: nothing (never forwarded): the child is stopped before the server gets the request;
    * ``"after"``: all of it (forwarded and answered; the answer is withheld): the server did the work, the child
      never learns it;
    * ``"late"``: the request reaches the server only after the server has answered the next request matching
      ``late_after`` (a rerun's, say its task listing): a slow server still busy with a killed run's request.
    """

    method: str
    path: str
    nth: int = 1
    when: str = "after"
    late_after: tuple[str, str] = ("GET", r"/api/tasks")


@dataclass
class _Late:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class _ProxyState:
    upstream: str
    hold: Hold | None = None
    count: int = 0
    fired: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    late: _Late | None = None
    seen: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


_FORWARDED = ("authorization", "content-type", "accept")


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _ProxyServer

    def log_message(self, format: str, *args: object) -> None:
        return

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> httpx.Response:
        return httpx.request(method, self.server.state.upstream + path, headers=headers, content=body, timeout=300)

    def _handle(self) -> None:
        st = self.server.state
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARDED}
        method, bare = self.command, self.path.split("?", 1)[0]
        with st.lock:
            st.seen.append((method, self.path))
            hold = st.hold
            hit = False
            if hold is not None and method == hold.method and re.fullmatch(hold.path, bare) and not st.fired.is_set():
                st.count += 1
                hit = st.count == hold.nth
        if hit and hold is not None:
            if hold.when == "after":
                self._forward(method, self.path, headers, body)
            elif hold.when == "late":
                st.late = _Late(method, self.path, headers, body)
            st.fired.set()
            st.release.wait(300)
            self.close_connection = True
            return  # no answer: the child was stopped meanwhile
        r = self._forward(method, self.path, headers, body)
        with st.lock:
            late = st.late
            cue = hold is not None and method == hold.late_after[0] and re.fullmatch(hold.late_after[1], bare)
            if late is not None and cue:
                st.late = None
            else:
                late = None
        if late is not None:
            self._forward(late.method, late.path, late.headers, late.body)
        self.send_response(r.status_code)
        self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(r.content)))
        self.end_headers()
        self.wfile.write(r.content)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    state: _ProxyState


class HoldingProxy:
    """An HTTP proxy in front of a server (Label Studio) that holds one chosen request and sets an event when it does,
    so a kill lands at an exact point of a client's conversation with the server (no sleeps):

        with HoldingProxy(ls.url) as proxy:
            fired = proxy.arm(Hold("POST", r"/api/projects/\\d+/import", nth=2, when="after"))
            res = run_cli([... "--url", proxy.url], stop=Stop(signal.SIGKILL, event=fired))
            proxy.disarm()  # the held request ends; later requests pass through
    """

    def __init__(self, upstream: str) -> None:
        self._httpd = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self._httpd.state = _ProxyState(upstream.rstrip("/"))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def seen(self) -> list[tuple[str, str]]:
        with self._httpd.state.lock:
            return list(self._httpd.state.seen)

    @property
    def late_pending(self) -> bool:
        return self._httpd.state.late is not None

    def arm(self, hold: Hold) -> threading.Event:
        """Hold the request ``hold`` names; returns the event set when it arrives."""
        st = self._httpd.state
        with st.lock:
            st.hold, st.count, st.late = hold, 0, None
            st.fired, st.release = threading.Event(), threading.Event()
            return st.fired

    def disarm(self) -> None:
        """End the held request (the stopped child gets no answer); a ``late`` one still waits for its cue."""
        st = self._httpd.state
        st.release.set()
        if st.late is None:
            st.hold = None

    def __enter__(self) -> HoldingProxy:  # noqa: PYI034
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.state.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
