"""Three-expert review in Label Studio: interface generation, push, status, pull and a local server.

The flow, one function per command:

1. :func:`render_label_config` turns a rubric into a Label Studio labelling interface (the template
   ``templates/label_studio.xml.j2``): the question, reference answer, context and response, then one
   single-choice control per concept whose choices show every level's anchor and store the bare level.
2. :func:`push` creates (or finds) the project, imports the items as tasks keyed by ``data.item_id``
   with one prediction per LLM model (``model_version`` = the model) and never imports an item twice:
   the item ids already on the server are read back before every import.
3. :func:`status` counts reviews per task and per reviewer, and reviews that changed an LLM label.
4. :func:`pull` turns every submitted annotation into the tidy ReviewTable
   ``item, reviewer, concept, level, source, lead_time, annotation, differs_<model>...`` that
   ``rubrictool adjudicate`` reads. Skipped (cancelled) annotations and drafts are not reviews.
5. :func:`serve` runs a Label Studio for one researcher on 127.0.0.1 with everything under a folder of
   the working directory (``.rubrictool/label-studio/``) and a generated admin token stored 0600.

The REST API is called with httpx (the same endpoints label-studio-sdk 2.1.2 wraps), so every failure
maps to one :class:`~rubrictool.errors.ReviewError` message. The API key is never printed, logged or
written by this module (``Connection.__repr__`` hides it).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import jinja2
import pandas as pd

from rubrictool.errors import ReviewError
from rubrictool.io import write_table
from rubrictool.progress import Progress, ProgressFn
from rubrictool.rubric import Rubric, load_rubric
from rubrictool.tables import read_items, read_predictions

__all__ = [
    "ADMIN_EMAIL",
    "DEFAULT_DIR",
    "ENV_KEY",
    "ENV_URL",
    "TEMPLATE",
    "Connection",
    "LabelStudioServer",
    "PullResult",
    "PushResult",
    "ReviewStatus",
    "build_tasks",
    "check_interface",
    "find_label_studio",
    "find_project",
    "free_port",
    "parse_label_config",
    "port_is_free",
    "pull",
    "push",
    "render_label_config",
    "resolve_connection",
    "reviews_from_tasks",
    "serve",
    "start_server",
    "status",
    "task_data",
]

ENV_URL = "LABEL_STUDIO_URL"
ENV_KEY = "LABEL_STUDIO_API_KEY"
DEFAULT_DIR = Path(".rubrictool") / "label-studio"
"""Where ``review serve`` keeps the server's data, token and log (relative to the working folder)."""
ADMIN_EMAIL = "admin@example.com"
TEMPLATE = Path(__file__).resolve().parent / "templates" / "label_studio.xml.j2"
STATE_NAME = ".rubrictool-review.json"
"""The push state file, next to the item table: server URL → project title → project id."""

_TOKEN_FILE = "admin-token"
_PASSWORD_FILE = "admin-password"
_SERVER_FILE = "server.json"
_LOG_FILE = "server.log"
_STARTED = re.compile(r"Starting development server at (http://\S+?)/?\s*$", re.MULTILINE)
_PAGE = 500


# == connection =============================================================================================


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
                f"cannot reach Label Studio at {self.url} ({e.__class__.__name__}) while {what}; is the server "
                f"running? start one with `rubrictool review serve` or check --url / ${ENV_URL}"
            ) from None
        if r.status_code in (401, 403):
            raise ReviewError(
                f"Label Studio at {self.url} refused the API key ({r.status_code}) while {what}; check --api-key / "
                f"${ENV_KEY} (Account & Settings → Access Token in the web UI; legacy tokens must be enabled)"
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
        raise ReviewError(f"cannot reach Label Studio at {conn.url} ({e.__class__.__name__}); is the server running?") from None
    if r.status_code != 200 or "access" not in r.text:
        raise ReviewError(
            f"Label Studio at {conn.url} refused the personal access token ({r.status_code}); create a new one "
            f"in Account & Settings and pass it with --api-key / ${ENV_KEY}"
        )
    access = str(r.json()["access"])
    _JWT_CACHE[(conn.url, refresh)] = (time.time() + 240, access)
    return access


def resolve_connection(url: str | None = None, api_key: str | None = None, folder: str | Path = DEFAULT_DIR) -> Connection:
    """Connection settings: the options, else ``$LABEL_STUDIO_URL`` / ``$LABEL_STUDIO_API_KEY``, else the
    server that ``rubrictool review serve`` is running from ``folder`` (its URL and admin token file)."""
    url = url or os.environ.get(ENV_URL) or None
    api_key = api_key or os.environ.get(ENV_KEY) or None
    served = _served(Path(folder))
    if url is None and served is not None:
        url = str(served["url"])
    if url is None:
        raise ReviewError(
            f"no Label Studio URL: pass --url http://HOST:PORT or set ${ENV_URL} "
            "(or start a local server with `rubrictool review serve`)"
        )
    url = url.rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ReviewError(f"Label Studio URL {url!r} is not an http(s) URL; use e.g. http://127.0.0.1:8080")
    if api_key is None and served is not None and str(served["url"]).rstrip("/") == url:
        token_file = Path(folder) / _TOKEN_FILE
        if token_file.is_file():
            api_key = token_file.read_text().strip()
    if not api_key:
        raise ReviewError(
            f"no Label Studio API key for {url}: pass --api-key or set ${ENV_KEY} "
            "(Account & Settings → Access Token in the web UI)"
        )
    return Connection(url=url, api_key=api_key)


def _served(folder: Path) -> dict[str, Any] | None:
    """The URL of a running ``review serve`` in ``folder`` (None when it is not running)."""
    f = folder / _SERVER_FILE
    try:
        info = json.loads(f.read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if isinstance(info, dict) and "url" in info else None


# == the labelling interface ================================================================================


def render_label_config(rubric: Rubric, template: str | Path | None = None) -> str:
    """The Label Studio XML for a rubric (question / reference / context shown when the rubric has them)."""
    reserved = {"item_id", "question", "reference", "context", "response"}
    clash = [k for k in rubric.keys if k in reserved or k.startswith("definition_")]
    if clash:
        raise ReviewError(
            f"rubric {rubric.name}: concept key(s) {', '.join(clash)} clash with the interface's own names "
            f"({', '.join(sorted(reserved))}, definition_*); rename them in the rubric YAML"
        )
    path = Path(template) if template else TEMPLATE
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path.parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["static"] = lambda s: str(s).replace("$", "＄")  # "$x" would be read as task data
    try:
        xml = env.get_template(path.name).render(rubric=rubric, show=_shown_fields(rubric))
    except jinja2.TemplateError as e:
        line = getattr(e, "lineno", None)
        raise ReviewError(f"{path}{f':{line}' if line else ''}: template error: {e}") from None
    parse_label_config(xml)  # our own output must satisfy the contract
    return xml


def _shown_fields(rubric: Rubric) -> list[str]:
    return [f for f in ("question", "reference", "context") if f in rubric.fields]


def parse_label_config(xml: str) -> dict[str, list[int]]:
    """The concept controls of an interface: ``{concept key: [levels]}`` from each ``<Choices>`` whose
    choices all store an integer level (via ``alias``, else ``value``)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ReviewError(f"the labelling interface is not valid XML ({e})") from None
    out: dict[str, list[int]] = {}
    for el in root.iter("Choices"):
        name = el.get("name") or ""
        levels: list[int] = []
        for ch in el.iter("Choice"):
            stored = ch.get("alias") or ch.get("value") or ""
            if not re.fullmatch(r"-?\d+", stored.strip()):
                break
            levels.append(int(stored))
        else:
            if name and levels:
                out[name] = levels
    return out


def check_interface(rubric: Rubric, xml: str, project: str) -> None:
    """Raise if the project's interface no longer matches the rubric (concept keys and levels)."""
    have = parse_label_config(xml)
    want = {c.key: c.values for c in rubric.concepts}
    if have == want:
        return
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    changed = [k for k in want if k in have and have[k] != want[k]]
    parts = []
    if missing:
        parts.append(f"concepts not in the project: {', '.join(missing)}")
    if extra:
        parts.append(f"concepts not in the rubric: {', '.join(extra)}")
    if changed:
        parts.append("different levels for " + ", ".join(f"{k} ({have[k]} vs {want[k]})" for k in changed))
    raise ReviewError(
        f"project {project} does not match rubric {rubric.name} ({'; '.join(parts)}); push this rubric to a new "
        "project with --project NEW-TITLE, or pass the rubric the project was made with"
    )


# == tasks ==================================================================================================


def _text(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


def task_data(item: dict[str, Any], rubric: Rubric) -> dict[str, Any]:
    """The ``data`` of one task: the item id and every field the interface shows (empty string when absent)."""
    data: dict[str, Any] = {"item_id": str(item["id"]), "response": _text(item.get("response"))}
    for f in _shown_fields(rubric):
        data[f] = _text(item.get(f))
    return data


def _prediction(model: str, rows: pd.DataFrame) -> dict[str, Any]:
    result = [
        {"from_name": c, "to_name": "response", "type": "choices", "value": {"choices": [str(int(lv))]}}
        for c, lv in zip(rows["concept"], rows["level"])
    ]
    return {"model_version": str(model), "result": result}


def build_tasks(items: pd.DataFrame, predictions: pd.DataFrame | None, rubric: Rubric) -> list[dict[str, Any]]:
    """Import payloads: one task per item with one prediction per model that has a valid label for it."""
    by_item: dict[str, pd.DataFrame] = {}
    if predictions is not None and len(predictions):
        by_item = {str(k): g for k, g in predictions.groupby("item", sort=False)}
    order = {k: i for i, k in enumerate(rubric.keys)}
    tasks = []
    for item in items.to_dict(orient="records"):
        task: dict[str, Any] = {"data": task_data({str(k): v for k, v in item.items()}, rubric)}
        preds = by_item.get(str(item["id"]))
        if preds is not None:
            preds = preds.assign(_o=preds["concept"].map(order)).sort_values("_o")
            task["predictions"] = [_prediction(str(m), g) for m, g in preds.groupby("model", sort=True)]
        tasks.append(task)
    return tasks


def _read_predictions(path: str | Path, rubric: Rubric, item_ids: set[str]) -> tuple[pd.DataFrame, int]:
    """The valid rows (``raw_ok``) of a PredictionTable for the given items, checked against the rubric,
    and how many valid rows were for other items (a table made for a whole benchmark may be pushed
    for a subset of its items)."""
    df = read_predictions(path, rubric, valid_only=True)
    ours = df["item"].isin(item_ids)
    return df[ours].reset_index(drop=True), int((~ours).sum())


# == projects ===============================================================================================


def _all_projects(conn: Connection, title: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    page = 1
    while True:
        body = conn.get("/api/projects", "listing projects", title=title, page=page, page_size=100)
        rows = body.get("results", []) if isinstance(body, dict) else list(body or [])
        out += rows
        if not isinstance(body, dict) or not body.get("next"):
            return out
        page += 1


def _get_project(conn: Connection, project_id: int) -> dict[str, Any] | None:
    found = conn.request("GET", f"/api/projects/{project_id}", f"reading project {project_id}", missing_ok=True)
    return found if isinstance(found, dict) else None


def find_project(conn: Connection, project: str | int) -> dict[str, Any] | None:
    """A project by numeric id or exact title (None when there is none; an error when titles are ambiguous)."""
    if isinstance(project, int) or str(project).isdigit():
        return _get_project(conn, int(project))
    hits = [p for p in _all_projects(conn, str(project)) if p.get("title") == project]
    if len(hits) > 1:
        ids = ", ".join(str(p["id"]) for p in hits)
        raise ReviewError(f"{len(hits)} projects are titled {project!r} (ids {ids}); pass --project <id> to pick one")
    return _get_project(conn, int(hits[0]["id"])) if hits else None


def _require_project(conn: Connection, project: str | int) -> dict[str, Any]:
    conn.get("/api/current-user/whoami", "checking the API key")
    found = find_project(conn, project)
    if found is None:
        titles = [str(p.get("title")) for p in _all_projects(conn, "")][:10]
        raise ReviewError(
            f"no project {project!r} on {conn.url}; projects there: {', '.join(titles) or 'none'} "
            "(create one with `rubrictool review push`)"
        )
    return found


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, payload: dict[str, Any], mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=1)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _list_tasks(
    conn: Connection, project_id: int, with_annotations: bool, progress: ProgressFn | None = None
) -> list[dict[str, Any]]:
    """Every task of a project: id and data, plus annotations when asked.

    Only these fields are requested (``include``): the full task rows with predictions and drafts are
    3–6 times slower to serialise on the server (measured: 6.5 s vs 1.0 s per 500 tasks).
    """
    tasks: list[dict[str, Any]] = []
    page = 1
    while True:
        body = conn.get(
            "/api/tasks", f"reading the tasks of project {project_id}", project=project_id,
            fields="all" if with_annotations else "task_only",
            include="id,data,annotations" if with_annotations else "id,data", page=page, page_size=_PAGE,
            **({"expand": "annotations"} if with_annotations else {}),  # full annotations, not just their ids
        )
        rows = body.get("tasks", []) if isinstance(body, dict) else []
        total = int(body.get("total", 0)) if isinstance(body, dict) else 0
        tasks += rows
        if progress:
            progress(Progress("reading tasks", len(tasks), total))
        if not rows or len(tasks) >= total:
            return tasks
        page += 1


def _attach_predictions(conn: Connection, project_id: int, tasks: list[dict[str, Any]]) -> None:
    """Add each task's predictions (one request for the whole project)."""
    body = conn.get("/api/predictions", f"reading the predictions of project {project_id}", project=project_id)
    rows = body.get("results", []) if isinstance(body, dict) else list(body or [])
    by_task: dict[int, list[dict[str, Any]]] = {}
    for p in rows:
        by_task.setdefault(int(p.get("task") or 0), []).append(p)
    for t in tasks:
        t["predictions"] = by_task.get(int(t["id"]), [])


@dataclass
class PushResult:
    """What one push did."""

    project_id: int
    title: str
    url: str
    created: bool
    items: int
    already: int
    imported: int
    predictions: int
    models: list[str]
    state_file: Path
    other_predictions: int = 0  # valid prediction rows for items not in the pushed table (left out)

    @property
    def project_url(self) -> str:
        return f"{self.url}/projects/{self.project_id}/data"

    def summary(self) -> str:
        verb = "created" if self.created else "found"
        return (
            f"project {self.title!r} (id {self.project_id}, {verb}): {self.imported} new task(s) imported, "
            f"{self.predictions} prediction(s) added (models: {', '.join(self.models) or 'none'}); {self.already} of "
            f"{self.items} item(s) were already there"
            + (f"; {self.other_predictions} prediction row(s) for other items left out" if self.other_predictions else "")
            + f". Open {self.project_url}"
        )


def _add_missing_predictions(
    conn: Connection, project_id: int, task_of: dict[str, int], preds: pd.DataFrame, rubric: Rubric
) -> int:
    """Predictions of models that tasks already on the server do not have yet (e.g. a model annotated
    after the first push); the key is (item, model), so nothing is ever sent twice."""
    body = conn.get("/api/predictions", f"reading the predictions of project {project_id}", project=project_id)
    rows = body.get("results", []) if isinstance(body, dict) else list(body or [])
    have = {(int(p.get("task") or 0), str(p.get("model_version"))) for p in rows}
    order = {k: i for i, k in enumerate(rubric.keys)}
    ours = preds[preds["item"].isin(task_of)]
    ours = ours.assign(_o=ours["concept"].map(order)).sort_values(["item", "model", "_o"])
    payload = []
    for (item, model), g in ours.groupby(["item", "model"], sort=True):
        task = task_of[str(item)]
        if (task, str(model)) not in have:
            payload.append({"task": task, **_prediction(str(model), g)})
    for start in range(0, len(payload), 500):
        conn.request("POST", f"/api/projects/{project_id}/import/predictions", "importing predictions",
                     json=payload[start : start + 500])
    return len(payload)


def push(
    conn: Connection,
    rubric: Rubric,
    items_path: str | Path,
    predictions_path: str | Path | None = None,
    project: str | None = None,
    max_annotations: int = 3,
    batch_size: int = 200,
    state_file: str | Path | None = None,
    progress: ProgressFn | None = None,
) -> PushResult:
    """Create or find the review project and import the items it does not hold yet, with predictions.

    The project is found by the id stored in the state file (``.rubrictool-review.json`` next to the
    items), else by its exact title (default ``<rubric>-review``), else created. The items already on
    the server are read from its tasks (``data.item_id``) before importing, so a re-run, an interrupted
    run or a run after adding items imports each item exactly once.
    """
    if max_annotations < 1:
        raise ReviewError(f"--max-annotations must be at least 1 (got {max_annotations})")
    items = read_items(items_path)
    preds, other = _read_predictions(predictions_path, rubric, set(items["id"])) if predictions_path else (None, 0)
    title = project or f"{rubric.name}-review"
    if not 3 <= len(title) <= 50:
        raise ReviewError(f"project title {title!r} has {len(title)} characters; Label Studio needs 3 to 50 (--project)")
    state_path = Path(state_file) if state_file else Path(items_path).parent / STATE_NAME
    xml = render_label_config(rubric)

    conn.get("/api/current-user/whoami", "checking the API key")
    state = _read_state(state_path)
    known = state.get(conn.url, {}).get(title, {})
    found = _get_project(conn, int(known["id"])) if isinstance(known, dict) and "id" in known else None
    if found is None:
        found = find_project(conn, title)
    created = found is None
    if found is None:
        found = conn.request(
            "POST", "/api/projects", f"creating project {title!r}",
            json={
                "title": title, "label_config": xml, "maximum_annotations": max_annotations,
                "description": f"rubrictool review of rubric {rubric.name} v{rubric.version}: {rubric.title}",
                "show_collab_predictions": True, "show_skip_button": True,
            },
        )
    else:
        check_interface(rubric, str(found.get("label_config", "")), f"{title!r} (id {found['id']})")
        if int(found.get("maximum_annotations") or 0) != max_annotations:
            conn.request("PATCH", f"/api/projects/{found['id']}", "updating maximum_annotations",
                         json={"maximum_annotations": max_annotations})
    pid = int(found["id"])
    state.setdefault(conn.url, {})[title] = {"id": pid, "rubric": rubric.name, "rubric_version": rubric.version}
    _write_json(state_path, state)

    existing = {str(t.get("data", {}).get("item_id")): int(t["id"]) for t in _list_tasks(conn, pid, False)}
    new_items = items[~items["id"].isin(existing)]
    tasks = build_tasks(new_items, preds, rubric)
    n_pred = _add_missing_predictions(conn, pid, existing, preds, rubric) if preds is not None and existing else 0
    if progress:
        progress(Progress("importing tasks", 0, len(tasks)))
    for start in range(0, len(tasks), batch_size):
        batch = tasks[start : start + batch_size]
        body = conn.request("POST", f"/api/projects/{pid}/import", f"importing tasks into project {pid}",
                            params={"return_task_ids": "true"}, json=batch)
        n_pred += int((body or {}).get("prediction_count") or 0)
        if progress:
            progress(Progress("importing tasks", start + len(batch), len(tasks)))
    models = sorted(preds["model"].astype(str).unique()) if preds is not None else []
    return PushResult(pid, title, conn.url, created, len(items), len(items) - len(new_items), len(tasks), n_pred,
                      models, state_path, other)


# == reading reviews back ===================================================================================


def _users(conn: Connection) -> dict[int, str]:
    body = conn.get("/api/users", "listing users", page_size=1000)
    rows = body.get("results", []) if isinstance(body, dict) else list(body or [])
    return {int(u["id"]): str(u.get("email") or u.get("username") or u["id"]) for u in rows}


def _choices(
    result: Sequence[dict[str, Any]], schema: dict[str, list[int]], where: str, strict: bool = True
) -> dict[str, int]:
    """``{concept: level}`` from an annotation or prediction result (choices stored as the level alias).

    A value that is not one level of the interface is an error (``strict``), or left out (predictions:
    a malformed pre-annotation only loses its ``differs_<model>`` flag).
    """
    out: dict[str, int] = {}
    for r in result or []:
        name = r.get("from_name")
        if r.get("type") != "choices" or name not in schema:
            continue
        picked = (r.get("value") or {}).get("choices") or []
        text = str(picked[0]).strip() if len(picked) == 1 else ""
        if not re.fullmatch(r"-?\d+", text) or int(text) not in schema[name]:
            if strict:
                raise ReviewError(f"{where}: concept {name} holds {picked!r}, not one level of {schema[name]}; "
                                  "fix it in Label Studio (or delete that annotation) and pull again")
            continue
        out[str(name)] = int(text)
    return out


def reviews_from_tasks(
    tasks: Sequence[dict[str, Any]], users: dict[int, str], schema: dict[str, list[int]]
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The tidy ReviewTable from tasks read with ``fields=all``, and counts of what was left out.

    One row per (item, reviewer, concept) with ``level``, ``source`` = ``human``, the annotation's
    ``lead_time`` (seconds), its id, and per model ``differs_<model>`` (True/False, missing when that
    model had no label for the concept). Cancelled (skipped) annotations are left out, and so are drafts
    (they are never annotations). When one reviewer submitted several annotations for a task, the
    latest one counts.
    """
    rows: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    models: set[str] = set()
    for t in tasks:
        item = str((t.get("data") or {}).get("item_id", t.get("id")))
        preds: dict[str, dict[str, int]] = {}
        for p in t.get("predictions") or []:
            model = str(p.get("model_version") or "model")
            preds[model] = _choices(p.get("result") or [], schema, "", strict=False)
            models.add(model)
        latest: dict[int, dict[str, Any]] = {}
        for a in sorted(t.get("annotations") or [], key=lambda a: int(a.get("id", 0))):
            if "result" not in a or "completed_by" not in a:
                raise ReviewError(f"task {t.get('id')}: the server sent annotation {a.get('id')} without its result "
                                  "and reviewer; is this Label Studio 1.23.x (the version rubrictool is tested with)?")
            if a.get("was_cancelled"):
                counts["cancelled"] += 1
                continue
            who = int(a.get("completed_by") or 0)
            if who in latest:
                counts["superseded"] += 1
            latest[who] = a
        if "drafts" in t:  # (not requested by pull: drafts never are annotations)
            counts["drafts"] += len(t["drafts"] or [])
        for who, a in latest.items():
            labels = _choices(a.get("result") or [], schema, f"task {t.get('id')} annotation {a.get('id')}")
            if not labels:
                counts["empty"] += 1
                continue
            counts["annotations"] += 1
            for concept, level in labels.items():
                row: dict[str, Any] = {
                    "item": item, "reviewer": users.get(who, f"user-{who}"), "concept": concept, "level": level,
                    "source": "human", "lead_time": a.get("lead_time"), "annotation": int(a["id"]),
                }
                for m, pl in preds.items():
                    row[f"differs_{m}"] = (pl[concept] != level) if concept in pl else None
                rows.append(row)
    cols = ["item", "reviewer", "concept", "level", "source", "lead_time", "annotation"]
    cols += [f"differs_{m}" for m in sorted(models)]
    df = pd.DataFrame(rows, columns=cols)
    for m in sorted(models):
        df[f"differs_{m}"] = df[f"differs_{m}"].astype("boolean")
    df["level"] = df["level"].astype("int64")
    df["lead_time"] = pd.to_numeric(df["lead_time"], errors="coerce")
    order = {k: i for i, k in enumerate(schema)}
    df = df.assign(_o=df["concept"].map(order)).sort_values(["item", "reviewer", "_o"], kind="stable")
    return df.drop(columns="_o").reset_index(drop=True), dict(counts)


def _project_reviews(
    conn: Connection, project: str | int, rubric: Rubric | None, progress: ProgressFn | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]], pd.DataFrame, dict[str, int]]:
    proj = _require_project(conn, project)
    label = f"{proj.get('title')!r} (id {proj['id']})"
    xml = str(proj.get("label_config", ""))
    if rubric is not None:
        check_interface(rubric, xml, label)
    schema = parse_label_config(xml)
    if not schema:
        raise ReviewError(f"project {label} has no concept controls (<Choices> with integer levels); "
                          "was it made with `rubrictool review push`?")
    tasks = _list_tasks(conn, int(proj["id"]), True, progress)
    _attach_predictions(conn, int(proj["id"]), tasks)
    reviews, counts = reviews_from_tasks(tasks, _users(conn), schema)
    return proj, tasks, reviews, counts


@dataclass
class ReviewStatus:
    """Review progress of one project."""

    project_id: int
    title: str
    tasks: int
    reviews_per_task: dict[int, int]
    per_reviewer: pd.DataFrame  # reviewer, reviews, skipped
    changed: pd.DataFrame  # model, reviews, reviews_changed, labels, labels_changed
    max_annotations: int

    def lines(self) -> list[str]:
        """A plain-text report (the CLI prints it)."""
        head = f"project {self.title!r} (id {self.project_id}): {self.tasks} task(s), at most "
        out = [head + f"{self.max_annotations} review(s) each"]
        hist = ", ".join(f"{n} review(s): {c}" for n, c in sorted(self.reviews_per_task.items()))
        out.append(f"tasks by number of reviews — {hist}")
        for r in self.per_reviewer.itertuples(index=False):
            out.append(f"  {r.reviewer}: {r.reviews} review(s), {r.skipped} skipped")
        for c in self.changed.itertuples(index=False):
            out.append(
                f"  vs {c.model}: {c.reviews_changed} of {c.reviews} review(s) changed at least one label; "
                f"{c.labels_changed} of {c.labels} concept label(s) changed"
            )
        return out


def status(conn: Connection, project: str | int, rubric: Rubric | None = None) -> ReviewStatus:
    """Tasks with 0/1/2/3… reviews, reviews and skips per reviewer, and reviews that changed LLM labels."""
    proj, tasks, reviews, _ = _project_reviews(conn, project, rubric)
    users = _users(conn)
    n_done = reviews.drop_duplicates("annotation").groupby("item").size() if len(reviews) else pd.Series(dtype=int)
    per_task: Counter[int] = Counter(int(n_done.get(str((t.get("data") or {}).get("item_id")), 0)) for t in tasks)
    top = max([int(proj.get("maximum_annotations") or 3), *per_task])
    hist = {n: per_task.get(n, 0) for n in range(top + 1)}
    skipped: Counter[str] = Counter()
    for t in tasks:
        for a in t.get("annotations") or []:
            if a.get("was_cancelled"):
                who = int(a.get("completed_by") or 0)
                skipped[users.get(who, f"user-{who}")] += 1
    n_rev = reviews.drop_duplicates("annotation").groupby("reviewer").size() if len(reviews) else pd.Series(dtype=int)
    names = sorted(set(n_rev.index) | set(skipped))
    per_reviewer = pd.DataFrame(
        {"reviewer": names, "reviews": [int(n_rev.get(n, 0)) for n in names], "skipped": [skipped[n] for n in names]}
    )
    rows = []
    for col in [c for c in reviews.columns if c.startswith("differs_")]:
        d = reviews[reviews[col].notna()]
        by_ann = d.groupby("annotation")[col].any() if len(d) else pd.Series(dtype=bool)
        rows.append({"model": col.removeprefix("differs_"), "reviews": len(by_ann),
                     "reviews_changed": int(by_ann.sum()), "labels": len(d), "labels_changed": int(d[col].sum())})
    changed = pd.DataFrame(rows, columns=["model", "reviews", "reviews_changed", "labels", "labels_changed"])
    return ReviewStatus(int(proj["id"]), str(proj.get("title")), len(tasks), hist, per_reviewer, changed,
                        int(proj.get("maximum_annotations") or 0))


@dataclass
class PullResult:
    """The ReviewTable of one project and what was left out of it."""

    project_id: int
    title: str
    table: pd.DataFrame
    path: Path | None
    counts: dict[str, int]

    def summary(self) -> str:
        c = self.counts
        where = f" to {self.path}" if self.path else ""
        reviewers = self.table["reviewer"].nunique() if len(self.table) else 0
        return (
            f"project {self.title!r} (id {self.project_id}): {c.get('annotations', 0)} review(s) by {reviewers} "
            f"reviewer(s) → {len(self.table)} row(s){where}; left out: {c.get('cancelled', 0)} skipped, "
            f"{c.get('superseded', 0)} superseded by the same reviewer's later review, {c.get('empty', 0)} empty "
            "(drafts are never reviews)"
        )


def pull(
    conn: Connection,
    project: str | int,
    out: str | Path | None = None,
    rubric: Rubric | None = None,
    progress: ProgressFn | None = None,
) -> PullResult:
    """Export every submitted review of a project as the tidy ReviewTable (written with ``write_table``)."""
    proj, _, reviews, counts = _project_reviews(conn, project, rubric, progress)
    path = write_table(reviews, out) if out is not None else None
    return PullResult(int(proj["id"]), str(proj.get("title")), reviews, path, counts)


# == a local server =========================================================================================


def find_label_studio(bin: str | Path | None = None) -> Path:
    """The ``label-studio`` executable: the option, else ``.venv-ls/bin`` (here or in the repository), else PATH."""
    if bin is not None:
        p = Path(bin)
        if p.is_file() and os.access(p, os.X_OK):
            return p.resolve()  # the server runs with its data folder as the working directory
        raise ReviewError(f"{p}: not an executable; pass the path of the label-studio command to --label-studio-bin")
    here = Path(__file__).resolve().parent.parent
    for cand in (Path(".venv-ls") / "bin" / "label-studio", here / ".venv-ls" / "bin" / "label-studio"):
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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
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
        return self.folder / _TOKEN_FILE

    @property
    def password_file(self) -> Path:
        return self.folder / _PASSWORD_FILE

    @property
    def log_file(self) -> Path:
        return self.folder / _LOG_FILE

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
        info = self.folder / _SERVER_FILE
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
        raise ReviewError(f"port {port} on {host} is already in use; pass another --port or stop what runs there")
    root = Path(folder).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    token = _secret_file(root / _TOKEN_FILE, lambda: secrets.token_hex(20))
    password = _secret_file(root / _PASSWORD_FILE, lambda: secrets.token_urlsafe(18))
    log_path = root / _LOG_FILE
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
                m = _STARTED.search(log_path.read_bytes()[start_offset:].decode("utf-8", "replace"))
                if m:
                    url = m.group(1).rstrip("/")
                    if url != server.url:  # it silently moves to the next port when ours was taken
                        raise ReviewError(f"port {port} was taken while Label Studio started (it chose {url}); "
                                          "pass another --port")
            if url is not None:
                try:
                    if httpx.get(url + "/health", timeout=5).status_code == 200:
                        _write_json(root / _SERVER_FILE, {"url": url, "pid": os.getpid(), "admin_email": ADMIN_EMAIL})
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

    previous = signal.signal(signal.SIGTERM, _term)
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
        signal.signal(signal.SIGTERM, previous)


# == what the commands share =================================================================================


def project_and_rubric(project: str | None, rubric: str | Path | None) -> tuple[Rubric | None, str]:
    """The rubric (when named) and the project title: ``project``, else ``<rubric>-review``."""
    rb = load_rubric(rubric) if rubric is not None else None
    if project is not None:
        return rb, project
    if rb is None:
        raise ReviewError("which project? pass --project TITLE|ID (or --rubric R for the default title R-review)")
    return rb, f"{rb.name}-review"


def pull_for_adjudicate(project: str, rubric: str | Path | None, out: str | Path) -> Path:
    """``adjudicate --from-label-studio PROJECT``: pull the project's reviews (connection from
    ``$LABEL_STUDIO_URL`` / ``$LABEL_STUDIO_API_KEY`` or the local ``review serve``) into
    ``<out>/reviews_label_studio.csv`` and return that path, for adjudicate to read like any review file."""
    rb = load_rubric(rubric) if rubric is not None else None
    path = Path(out) / "reviews_label_studio.csv"
    result = pull(resolve_connection(), project, path, rb)
    if result.counts.get("annotations", 0) == 0:
        raise ReviewError(f"project {result.title!r} (id {result.project_id}) has no submitted reviews yet; "
                          "check `rubrictool review status` first")
    return path
