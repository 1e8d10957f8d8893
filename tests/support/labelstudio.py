"""A real Label Studio for the review tests: migrated once per session, copied per module.

The first start on an empty data directory runs ~40 s of migrations (minutes on a loaded machine),
so :func:`migrated_template` does it once per test session (memoised at module level, so it runs
once however many test modules import the fixtures) and every module server starts from a
``shutil.copytree`` of it in a few seconds. Servers listen on 127.0.0.1 and a free port and are
stopped with SIGTERM. The admin token is the one ``rubrictool.review.start_server`` generated in the
template folder (copied along with the database).

Reviewer accounts are made with the open sign-up form over HTTP (GET the form for the CSRF cookie,
POST email/password with a Referer, then GET /api/current-user/token), as a reviewer would.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import httpx

from rubrictool.review import LabelStudioServer, free_port, start_server

__all__ = ["LS_BIN", "have_label_studio", "migrated_template", "server_from_template", "signup"]

ROOT = Path(__file__).resolve().parents[2]
LS_BIN = ROOT / ".venv-ls" / "bin" / "label-studio"
START_TIMEOUT = 900.0  # first start under heavy load (other suites running on 2 cores) can take minutes

_template: Path | None = None


def have_label_studio() -> bool:
    return LS_BIN.is_file() and os.access(LS_BIN, os.X_OK)


def migrated_template() -> Path:
    """A Label Studio data folder with the migrations done and an admin token (made once per session)."""
    global _template
    if _template is None:
        base = Path(tempfile.mkdtemp(prefix="rubrictool-ls-template-"))
        atexit.register(shutil.rmtree, base, True)
        folder = base / "ls"
        with start_server(folder, port=free_port(), bin=LS_BIN, timeout=START_TIMEOUT):
            pass
        _template = folder
    return _template


def server_from_template(dest: Path) -> LabelStudioServer:
    """Copy the migrated template to ``dest`` and start a server on it (a few seconds)."""
    shutil.copytree(migrated_template(), dest)
    for stale in ("server.json", "server.log"):
        (dest / stale).unlink(missing_ok=True)
    return start_server(dest, port=free_port(), bin=LS_BIN, timeout=START_TIMEOUT)


def signup(url: str, email: str, password: str) -> str:
    """Create a reviewer account with the sign-up form; return the reviewer's own API token."""
    with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as c:
        c.get("/user/signup/")
        csrf = c.cookies.get("csrftoken")
        r = c.post(
            "/user/signup/",
            data={"email": email, "password": password, "csrfmiddlewaretoken": csrf},
            headers={"Referer": f"{url}/user/signup/"},
        )
        assert r.status_code in (200, 302), r.text[:300]
        tok = c.get("/api/current-user/token")
        assert tok.status_code == 200, f"sign-up of {email} failed: {tok.status_code} {tok.text[:200]}"
        return str(tok.json()["token"])
