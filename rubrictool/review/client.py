"""The Label Studio REST client: a :class:`Connection` (httpx, one ReviewError per failure) and how it is resolved."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from rubrictool.errors import ReviewError
from rubrictool.review.settings import DEFAULT_DIR, ENV_KEY, ENV_URL, SERVER_FILE, TOKEN_FILE

__all__ = ["Connection", "resolve_connection"]


@dataclass(frozen=True)
class Connection:
    """A Label Studio URL and API key. The key never appears in ``repr``, messages or files."""

    url: str
    api_key: str = field(repr=False)
    timeout: float = 60.0

    def __repr__(self) -> str:
        return f"Connection(url={self.url!r}, api_key=<hidden>)"

    # -- HTTP ------------------------------------------------------------------------------------------
    def _auth(self) -> dict[str, str]:
        key = self.api_key
        if key.count(".") == 2:  # a personal access token (JWT refresh token): exchange it for an access token
            return {"Authorization": f"Bearer {_jwt_access(self, key)}"}
        return {"Authorization": f"Token {key}"}

    def request(self, method: str, path: str, what: str, missing_ok: bool = False, **kw: Any) -> Any:
        """One API call; connection problems and HTTP errors become a one-line :class:`ReviewError`
        (with ``missing_ok``, a 404 returns None)."""
        try:
            r = httpx.request(method, self.url + path, headers=self._auth(), timeout=self.timeout, **kw)
        except httpx.HTTPError as e:
            raise ReviewError(
                f"cannot reach Label Studio at {self.url} ({e.__class__.__name__}) while {what}",
                hint=f"is the server running? start one with `rubrictool review serve` or check --url / ${ENV_URL}",
            ) from None
        if r.status_code in (401, 403):
            raise ReviewError(
                f"Label Studio at {self.url} refused the API key ({r.status_code}) while {what}",
                hint=f"check --api-key / ${ENV_KEY} (Account & Settings → Access Token in the web UI; legacy tokens "
                "must be enabled)",
            )
        if r.status_code == 404 and missing_ok:
            return None
        if r.status_code >= 400:
            raise ReviewError(f"Label Studio at {self.url} answered {r.status_code} while {what}: {_detail(r)}")
        if not r.content:
            return None
        try:
            return r.json()
        except ValueError:
            raise ReviewError(
                f"{self.url} did not answer with JSON while {what}; is this the Label Studio URL (not its UI page)?"
            ) from None

    def get(self, path: str, what: str, **params: Any) -> Any:
        return self.request("GET", path, what, params=params or None)


def _detail(r: Any) -> str:
    try:
        body = r.json()
    except ValueError:
        return str(r.text)[:200]
    if isinstance(body, dict):
        errs = body.get("validation_errors") or body.get("detail") or body
        return json.dumps(errs, ensure_ascii=False)[:300]
    return str(body)[:300]


_JWT_CACHE: dict[tuple[str, str], tuple[float, str]] = {}


def _jwt_access(conn: Connection, refresh: str) -> str:
    cached = _JWT_CACHE.get((conn.url, refresh))
    if cached and cached[0] > time.time():
        return cached[1]
    try:
        r = httpx.post(conn.url + "/api/token/refresh", json={"refresh": refresh}, timeout=conn.timeout)
    except httpx.HTTPError as e:
        raise ReviewError(f"cannot reach Label Studio at {conn.url} ({e.__class__.__name__}); is the server "
                          "running?") from None
    if r.status_code != 200 or "access" not in r.text:
        raise ReviewError(
            f"Label Studio at {conn.url} refused the personal access token ({r.status_code})",
            hint=f"create a new one in Account & Settings and pass it with --api-key / ${ENV_KEY}",
        )
    access = str(r.json()["access"])
    _JWT_CACHE[(conn.url, refresh)] = (time.time() + 240, access)
    return access


def resolve_connection(url: str | None = None, api_key: str | None = None,
                       folder: str | Path = DEFAULT_DIR) -> Connection:
    """Connection settings: the options, else ``$LABEL_STUDIO_URL`` / ``$LABEL_STUDIO_API_KEY``, else the
    server that ``rubrictool review serve`` is running from ``folder`` (its URL and admin token file)."""
    url = url or os.environ.get(ENV_URL) or None
    api_key = api_key or os.environ.get(ENV_KEY) or None
    served = _served(Path(folder))
    if url is None and served is not None:
        url = str(served["url"])
    if url is None:
        raise ReviewError(
            "no Label Studio URL",
            hint=f"pass --url http://HOST:PORT or set ${ENV_URL} (or start a local server with `rubrictool review "
                 "serve`)",
        )
    url = url.rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ReviewError(f"Label Studio URL {url!r} is not an http(s) URL; use e.g. http://127.0.0.1:8080")
    if api_key is None and served is not None and str(served["url"]).rstrip("/") == url:
        token_file = Path(folder) / TOKEN_FILE
        if token_file.is_file():
            api_key = token_file.read_text().strip()
    if not api_key:
        raise ReviewError(
            f"no Label Studio API key for {url}",
            hint=f"pass --api-key or set ${ENV_KEY} (Account & Settings → Access Token in the web UI)",
        )
    return Connection(url=url, api_key=api_key)


def _served(folder: Path) -> dict[str, Any] | None:
    """The URL of a running ``review serve`` in ``folder`` (None when it is not running)."""
    f = folder / SERVER_FILE
    try:
        info = json.loads(f.read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if isinstance(info, dict) and "url" in info else None
