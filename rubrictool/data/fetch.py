"""Downloading and unpacking a benchmark's published archive into ``<data dir>/<name>``.

One path for every benchmark: the archive (http(s)://, file:// or a local path) is downloaded to a
temporary file, checked to hold the benchmark's marker file, extracted next to the target, loaded
with the benchmark's own loader, and only then moved into place in one rename. Nothing half-written
is ever left where a loader would read it.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import httpx
import pandas as pd

from rubrictool.data.base import resolve_data_dir
from rubrictool.errors import DataError
from rubrictool.progress import Progress, ProgressFn

__all__ = ["ArchiveSpec", "Credentials", "download", "fetch_archive", "local_source"]


@dataclass(frozen=True)
class Credentials:
    """Names of the environment variables holding a user name and a key (never the values)."""

    user_env: str
    key_env: str
    how: str  # where to get them, for the error message

    def read(self) -> tuple[str, str] | None:
        user, key = os.environ.get(self.user_env), os.environ.get(self.key_env)
        return (user, key) if user and key else None


@dataclass(frozen=True)
class ArchiveSpec:
    """What a benchmark's published archive must hold and how to check it."""

    name: str  # the folder under the data dir: mohler, asap2, mocha
    what: str  # "the UNT ShortAnswerGrading_v2.0 archive", for messages
    url: str  # default download
    markers: tuple[str, ...]  # member paths (any folder prefix) that identify the layout; the first is preferred
    load: Callable[[Path], pd.DataFrame]  # the loader, run on the extracted copy before it is kept
    manual: str  # how to place the files by hand, for messages
    credentials: Credentials | None = None  # needed for URLs that start with `credentials_for`
    credentials_for: str = ""


def download(url: str, dest_dir: Path, progress: ProgressFn | None, auth: tuple[str, str] | None = None) -> Path:
    """Stream ``url`` into a temporary file in ``dest_dir`` (removed again on any failure)."""
    fd, tmp = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as fh, httpx.stream(
            "GET", url, follow_redirects=True, timeout=60.0, auth=auth
        ) as resp:
            if resp.status_code != 200:
                refused = " (the server refused the credentials)" if auth and resp.status_code in (401, 403) else ""
                raise DataError(
                    f"{url}: HTTP {resp.status_code}{refused}",
                    hint="check the URL, or download the archive yourself and pass its path with --url",
                )
            total = int(resp.headers.get("content-length") or 0) or None
            done = 0
            for chunk in resp.iter_bytes(1 << 16):
                fh.write(chunk)
                done += len(chunk)
                if progress:
                    progress(Progress("downloading", done, total))
    except httpx.HTTPError as e:
        os.unlink(tmp)
        raise DataError(
            f"{url}: download failed ({e.__class__.__name__}: {e})",
            hint="check your connection, or download the archive yourself and pass its path with --url",
        ) from None
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def local_source(url: str) -> Path | None:
    """A local archive path for ``file://`` URLs and plain paths; None for http(s)."""
    if url.startswith(("http://", "https://")):
        return None
    if url.startswith("file://"):
        return Path(url2pathname(urlparse(url).path))
    if "://" in url:
        raise DataError(f"{url}: unsupported URL scheme; use http(s)://, file:// or a local archive path")
    return Path(url)


def _members(archive: Path, spec: ArchiveSpec) -> tuple[str, list[str]]:
    try:
        return _list_members(archive, spec)
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{archive}: cannot extract ({e.__class__.__name__}: {e}); the archive is damaged") from None


def _list_members(archive: Path, spec: ArchiveSpec) -> tuple[str, list[str]]:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            return "zip", zf.namelist()
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            return "tar", tf.getnames()
    if archive.name in spec.markers:  # the bare file itself (e.g. a CSV downloaded by hand)
        return "file", [archive.name]
    raise DataError(f"{archive}: not a zip or tar archive; expected {spec.what}")


def _root_of(name: str, marker: str) -> str | None:
    n = name.rstrip("/")
    if n == marker:
        return ""
    if n.endswith("/" + marker):
        return n[: -len(marker)]
    return None


def _extract(archive: Path, into: Path, spec: ArchiveSpec) -> Path:
    """Extract safely (no absolute or ``..`` paths); return the folder holding the first marker found."""
    kind, names = _members(archive, spec)
    roots: list[str] = []
    for marker in spec.markers:
        roots = [r for r in (_root_of(n, marker) for n in names) if r is not None and "__MACOSX" not in r]
        if roots:
            break
    if not roots:
        raise DataError(
            f"{archive}: the archive holds no {' or '.join(spec.markers)}; is it {spec.what}?",
            hint=spec.manual,
        )
    for n in names:
        if n.startswith("/") or ".." in Path(n).parts:
            raise DataError(f"{archive}: unsafe member path {n!r}; refusing to extract")
    into.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(into)
        elif kind == "tar":
            with tarfile.open(archive) as tf:
                tf.extractall(into, filter="data")
        else:
            shutil.copyfile(archive, into / archive.name)
    except RuntimeError as e:  # zipfile: "File ... is encrypted, password required"
        raise DataError(f"{archive}: cannot extract ({e}); unpack it by hand", hint=spec.manual) from None
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{archive}: cannot extract ({e.__class__.__name__}: {e}); the archive is damaged") from None
    return into / min(roots, key=len)


def fetch_archive(
    spec: ArchiveSpec,
    dest: str | Path | None = None,
    url: str | None = None,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> tuple[Path, bool]:
    """Download, check, extract, load and move a benchmark into ``<dest>/<name>``; (folder, fetched now?).

    Idempotent: an existing ``<dest>/<name>`` holding a marker is kept unless ``force``. A local archive
    is never deleted; a downloaded one always is.
    """
    base = resolve_data_dir(dest)
    target = base / spec.name
    if any((target / m).is_file() for m in spec.markers) and not force:
        return target, False
    src = url or spec.url
    local = local_source(src)
    if local is not None and not local.is_file():
        raise DataError(f"{local}: no such archive", hint="pass a zip/tar file or an http(s):// URL with --url")
    auth = None
    if local is None and spec.credentials is not None and spec.credentials_for and src.startswith(spec.credentials_for):
        c = spec.credentials
        auth = c.read()
        if auth is None:
            raise DataError(
                f"{src}: this download needs credentials: set {c.user_env} and {c.key_env} ({c.how})",
                hint=spec.manual,
            )
    base.mkdir(parents=True, exist_ok=True)
    archive = local if local is not None else download(src, base, progress, auth)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=base))
    try:
        root = _extract(archive, work / "x", spec)
        items = spec.load(root)  # the copy must load before it replaces anything
        if len(items) == 0:
            raise DataError(f"{src}: the archive's data set has no items")
        old = work / "old"
        if target.exists():
            os.replace(target, old)
        try:
            os.replace(root, target)
        except OSError:
            if old.exists():  # put the previous copy back before reporting
                os.replace(old, target)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if local is None and archive.exists():
            archive.unlink()
    return target, True
