"""Helpers for the rubric/data tests: edited copies of a bundled rubric, a local Mohler archive, a
local HTTP server. Nothing here reaches the network."""

from __future__ import annotations

import contextlib
import functools
import http.server
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

from rubrictool.rubric import BUNDLED_DIR

__all__ = ["build_archive", "edited", "line_of", "mohler_text", "serve_folder"]


def mohler_text() -> str:
    return (BUNDLED_DIR / "mohler.yaml").read_text(encoding="utf-8")


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line number of the ``nth`` line containing ``needle``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) > nth, f"{needle!r} not found {nth + 1} times"
    return hits[nth]


def edited(old: str, new: str, text: str | None = None) -> str:
    """The Mohler rubric with one exact, unique substring replaced."""
    base = mohler_text() if text is None else text
    assert base.count(old) == 1, f"{old!r} occurs {base.count(old)} times"
    return base.replace(old, new)


def build_archive(mohler_dir: Path, out: Path, kind: str = "zip", prefix: str = "ShortAnswerGrading_v2.0") -> Path:
    """Pack a Mohler folder (``README`` + ``data/``) the way the authors ship it: ``<prefix>/data/...``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    files = [p for p in sorted(mohler_dir.rglob("*")) if p.is_file()]
    if kind == "zip":
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                zf.write(p, f"{prefix}/{p.relative_to(mohler_dir)}")
    else:
        with tarfile.open(out, "w:gz") as tf:
            for p in files:
                tf.add(p, f"{prefix}/{p.relative_to(mohler_dir)}")
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve ``folder`` over HTTP on 127.0.0.1 at a free port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
