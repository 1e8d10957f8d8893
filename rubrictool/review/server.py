"""A local Label Studio for one researcher: start, wait until ready, stop."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from rubrictool.atomic import atomic_write_json, atomic_write_text
from rubrictool.errors import ReviewError
from rubrictool.review.client import Connection
from rubrictool.review.settings import (
    ADMIN_EMAIL,
    DEFAULT_DIR,
    ENV_KEY,
    ENV_URL,
    LOG_FILE,
    PASSWORD_FILE,
    SERVER_FILE,
    STARTED,
    TOKEN_FILE,
)

__all__ = [
    "LabelStudioServer",
    "find_label_studio",
    "free_port",
    "port_is_free",
    "serve",
    "start_server",
]


REPO_DIR = Path(__file__).resolve().parents[2]
"""The checkout rubrictool runs from (an editable install), where ``bash setup.sh --all`` puts ``.venv-ls``."""


def find_label_studio(bin: str | Path | None = None) -> Path:
    """The ``label-studio`` executable: the option, else ``.venv-ls/bin`` (here or in the repository), else PATH."""
    if bin is not None:
        p = Path(bin)
        if p.is_file() and os.access(p, os.X_OK):
            return p.resolve()  # the server runs with its data folder as the working directory
        raise ReviewError(f"{p}: not an executable",
                          hint="pass the path of the label-studio command to --label-studio-bin")
    for cand in (Path(".venv-ls") / "bin" / "label-studio", REPO_DIR / ".venv-ls" / "bin" / "label-studio"):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand.resolve()
    which = shutil.which("label-studio")
    if which:
        return Path(which)
    raise ReviewError(
        "the Label Studio server is not installed: run `bash setup.sh --all` (it makes .venv-ls), or "
        "`pip install label-studio==1.23.2` in a separate venv and pass its bin/label-studio to --label-studio-bin"
    )


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _secret_file(path: Path, make: Callable[[], str]) -> str:
    """Read a secret, or create it with mode 0600 (never group/world readable, even briefly)."""
    if path.is_file():
        os.chmod(path, 0o600)
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    atomic_write_text(path, value + "\n", mode=0o600)  # the temporary file is 0600 from its first byte
    return value


@dataclass
class LabelStudioServer:
    """A running local Label Studio (started by :func:`start_server`)."""

    url: str
    folder: Path
    process: subprocess.Popen[bytes]
    admin_email: str = ADMIN_EMAIL

    @property
    def token_file(self) -> Path:
        return self.folder / TOKEN_FILE

    @property
    def password_file(self) -> Path:
        return self.folder / PASSWORD_FILE

    @property
    def log_file(self) -> Path:
        return self.folder / LOG_FILE

    def connection(self) -> Connection:
        return Connection(self.url, self.token_file.read_text().strip())

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Label Studio may ignore SIGINT in the background), then SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        info = self.folder / SERVER_FILE
        if info.is_file():
            info.unlink()

    def __enter__(self) -> LabelStudioServer:  # noqa: PYI034 (a dataclass, never subclassed)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server_env(folder: Path, token: str, password: str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for k in ("USERNAME", "PASSWORD", "USER_TOKEN", "PORT", "HOST", ENV_KEY, ENV_URL):
        env.pop(k, None)  # the server falls back to these unprefixed names
    xdg = folder / "xdg"
    env.update(
        {
            "LABEL_STUDIO_BASE_DATA_DIR": str(folder),
            "XDG_CONFIG_HOME": str(xdg / "config"),
            "XDG_DATA_HOME": str(xdg / "data"),
            "XDG_CACHE_HOME": str(xdg / "cache"),
            "LABEL_STUDIO_USERNAME": ADMIN_EMAIL,
            "LABEL_STUDIO_PASSWORD": password,
            "LABEL_STUDIO_USER_TOKEN": token,
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "SENTRY_DSN": "",
            "FRONTEND_SENTRY_DSN": "",
            "LATEST_VERSION_CHECK": "false",
            "COLLECT_ANALYTICS": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start_server(
    folder: str | Path = DEFAULT_DIR,
    port: int = 8080,
    bin: str | Path | None = None,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
) -> LabelStudioServer:
    """Start Label Studio on 127.0.0.1:``port`` with its data, token and log in ``folder``; wait until healthy.

    The first start on an empty folder runs the database migrations (30–40 s on 2 idle cores; minutes
    under load); later starts take a few seconds. The admin token (40 hex characters) and password are
    generated once and kept in ``folder`` with mode 0600.
    """
    exe = find_label_studio(bin)
    host = "127.0.0.1"
    if not port_is_free(port, host):
        raise ReviewError(f"port {port} on {host} is already in use",
                          hint="pass another --port or stop what runs there")
    root = Path(folder).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    token = _secret_file(root / TOKEN_FILE, lambda: secrets.token_hex(20))
    password = _secret_file(root / PASSWORD_FILE, lambda: secrets.token_urlsafe(18))
    log_path = root / LOG_FILE
    with open(log_path, "ab") as log:
        start_offset = log.tell()
        proc = subprocess.Popen(
            [str(exe), "start", "--no-browser", "--internal-host", host, "--port", str(port)],
            cwd=root, env=_server_env(root, token, password, env), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,  # Ctrl-C reaches us, and we stop the server
        )
    server = LabelStudioServer(f"http://{host}:{port}", root, proc)
    deadline = time.monotonic() + timeout
    url: str | None = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = _log_tail(log_path, start_offset)
                raise ReviewError(f"Label Studio exited with code {proc.returncode} while starting; {tail} "
                                  f"(full log: {log_path})")
            if url is None:
                m = STARTED.search(log_path.read_bytes()[start_offset:].decode("utf-8", "replace"))
                if m:
                    url = m.group(1).rstrip("/")
                    if url != server.url:  # it silently moves to the next port when ours was taken
                        raise ReviewError(f"port {port} was taken while Label Studio started (it chose {url}); "
                                          "pass another --port")
            if url is not None:
                try:
                    if httpx.get(url + "/health", timeout=5).status_code == 200:
                        atomic_write_json(root / SERVER_FILE,
                                          {"url": url, "pid": os.getpid(), "admin_email": ADMIN_EMAIL})
                        return server
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        raise ReviewError(f"Label Studio did not become healthy within {timeout:.0f} s; see {log_path}")
    except BaseException:
        server.stop()
        raise


def _log_tail(path: Path, offset: int) -> str:
    lines = [ln for ln in path.read_bytes()[offset:].decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["no output"])[-1].strip()[:300]


def serve(
    folder: str | Path = DEFAULT_DIR,
    port: int = 8080,
    bin: str | Path | None = None,
    on_ready: Callable[[LabelStudioServer], None] | None = None,
    timeout: float = 600.0,
) -> int:
    """Run a local Label Studio until Ctrl-C (or SIGTERM); stop it cleanly and return its exit code."""

    def _term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a shell starts background jobs (`rubrictool review serve &`) with SIGINT ignored, and
    # Python then never raises KeyboardInterrupt, so `kill -INT` would leave the server running
    previous = {sig: signal.signal(sig, _term) for sig in (signal.SIGTERM, signal.SIGINT)}
    server: LabelStudioServer | None = None
    try:
        server = start_server(folder, port, bin, timeout)
        if on_ready:
            on_ready(server)
        return server.process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if server is not None:
            server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
