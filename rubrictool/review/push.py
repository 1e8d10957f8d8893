"""Creating or finding the review project and importing each item exactly once."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rubrictool.atomic import atomic_write_json
from rubrictool.errors import ReviewError
from rubrictool.io import write_table
from rubrictool.progress import Progress, ProgressFn, warn
from rubrictool.review.client import Connection
from rubrictool.review.interface import check_interface, render_label_config
from rubrictool.review.routing import Routing, route
from rubrictool.review.settings import PAGE, STATE_NAME
from rubrictool.review.tasks import build_tasks, prediction_payload, read_task_predictions
from rubrictool.rubric import Rubric
from rubrictool.tables import read_items

__all__ = [
    "PushOptions",
    "PushResult",
    "attach_predictions",
    "find_project",
    "list_tasks",
    "push",
    "require_project",
]


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
        raise ReviewError(f"{len(hits)} projects are titled {project!r} (ids {ids})",
                          hint="pass --project <id> to pick one")
    return _get_project(conn, int(hits[0]["id"])) if hits else None


def require_project(conn: Connection, project: str | int) -> dict[str, Any]:
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


def _writable_folder(path: Path) -> None:
    """One line before any server call when the folder of the state file cannot be written (read-only, not a
    folder): nothing on the server changes."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise ReviewError(f"{path}: cannot write the review state file there ({exc.strerror or exc}); nothing was sent "
                          "to Label Studio",
                          hint="make the folder of --items writable, or copy the items elsewhere") from None


def _write_local(path: Path, what: str, kept: str, write: Callable[[], object]) -> None:
    """A local file push writes, as one line naming it and what was kept when it cannot be written (disk full)."""
    try:
        write()
    except OSError as exc:
        raise ReviewError(f"{path}: cannot write {what} ({exc.strerror or exc}); {kept}",
                          hint="free space, then run the same push again: it imports only what is missing") from None


def list_tasks(
    conn: Connection, project_id: int, with_annotations: bool, progress: ProgressFn | None = None
) -> list[dict[str, Any]]:
    """Every task of a project: id and data, plus annotations when asked.

    Only these fields are requested (``include``): the full task rows with predictions and drafts are
    several times slower to serialise on the server (docs/design.md).
    """
    tasks: list[dict[str, Any]] = []
    page = 1
    while True:
        body = conn.get(
            "/api/tasks", f"reading the tasks of project {project_id}", project=project_id,
            fields="all" if with_annotations else "task_only",
            include="id,data,annotations" if with_annotations else "id,data", page=page, page_size=PAGE,
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


def attach_predictions(conn: Connection, project_id: int, tasks: list[dict[str, Any]]) -> None:
    """Add each task's predictions (one request for the whole project)."""
    body = conn.get("/api/predictions", f"reading the predictions of project {project_id}", project=project_id)
    rows = body.get("results", []) if isinstance(body, dict) else list(body or [])
    by_task: dict[int, list[dict[str, Any]]] = {}
    for p in rows:
        by_task.setdefault(int(p.get("task") or 0), []).append(p)
    for t in tasks:
        t["predictions"] = by_task.get(int(t["id"]), [])


def _has_reviews(conn: Connection, task_id: int) -> bool:
    task = conn.get(f"/api/tasks/{task_id}", f"reading task {task_id}")
    task = task if isinstance(task, dict) else {}
    return bool(task.get("annotations") or task.get("drafts") or int(task.get("total_annotations") or 0)
                or int(task.get("cancelled_annotations") or 0))


def _one_task_per_item(
    conn: Connection, pid: int, tasks: list[dict[str, Any]], progress: ProgressFn | None
) -> tuple[dict[str, int], int]:
    """The task of each item, after deleting the extra copies an interrupted push can leave (a killed run's import
    that the server finished after the rerun had read the tasks). The oldest copy is kept, or the ones with reviews;
    a copy with reviews is never deleted. Returns (item → task id, copies deleted)."""
    by_item: dict[str, list[int]] = {}
    for t in tasks:
        by_item.setdefault(str(t.get("data", {}).get("item_id")), []).append(int(t["id"]))
    task_of: dict[str, int] = {}
    removed = 0
    for item, ids in by_item.items():
        ids.sort()
        if len(ids) > 1:
            reviewed = [i for i in ids if _has_reviews(conn, i)]
            keep = reviewed or ids[:1]
            for i in ids:
                if i not in keep:
                    conn.request("DELETE", f"/api/tasks/{i}", f"deleting task {i}, a second copy of item {item}",
                                 missing_ok=True)
                    removed += 1
            if len(keep) > 1:
                warn(progress, f"item {item} is in project {pid} as {len(keep)} tasks that each have reviews (tasks "
                               f"{', '.join(map(str, keep))}); all kept, so it gets more reviews than the others")
            ids = keep
        task_of[item] = ids[0]
    return task_of, removed


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
    routing: Routing | None = None  # the --select/--budget selection, when routed
    routing_file: Path | None = None
    model_predictions_file: Path | None = None  # the grader's PredictionTable (for adjudicate --pre-annotations)
    prefill_model: str | None = None  # None: blind review (no predictions sent); else the model_version pre-filled
    kept_rows: int = 0  # blind review: the usable prediction rows kept out of Label Studio
    duplicates_removed: int = 0  # extra copies of an item (left by an interrupted push) deleted

    @property
    def blind(self) -> bool:
        return self.prefill_model is None

    @property
    def project_url(self) -> str:
        return f"{self.url}/projects/{self.project_id}/data"

    def summary(self) -> str:
        verb = "created" if self.created else "found"
        return (
            f"project {self.title!r} (id {self.project_id}, {verb}): {self.imported} new task(s) imported"
            + (", blind review: no predictions sent, reviewers see no model's levels"
               + (f" ({self.kept_rows} prediction row(s) of {', '.join(self.models)} kept out of Label Studio, for "
                  "`adjudicate --predictions`)" if self.kept_rows else "")
               if self.blind else
               f", {self.predictions} prediction(s) added (models: {', '.join(self.models) or 'none'}); reviewers see "
               f"the levels of {self.prefill_model} pre-selected, marked as pre-filled by it")
            + f"; {self.already} of {self.items} item(s) were already there"
            + (f"; {self.duplicates_removed} second copy(ies) of an item, left by an interrupted push, deleted"
               if self.duplicates_removed else "")
            + (f"; {self.other_predictions} prediction row(s) for other items left out" if self.other_predictions
               else "")
            + (
                f"; routed by {self.routing.how} (seed {self.routing.seed}): {len(self.routing.selected)} of "
                f"{len(self.routing.table)} item(s) sent to review, ranking in {self.routing_file}"
                if self.routing is not None else ""
            )
            + (f"; the grader's predictions (for adjudicate --pre-annotations) in {self.model_predictions_file}"
               if self.model_predictions_file is not None else "")
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
            payload.append({"task": task, **prediction_payload(str(model), g)})
    for start in range(0, len(payload), 500):
        conn.request("POST", f"/api/projects/{project_id}/import/predictions", "importing predictions",
                     json=payload[start : start + 500])
    return len(payload)


def _push_inputs(
    rubric: Rubric, items_path: str | Path, predictions_path: str | Path | None, model_predictions: pd.DataFrame | None
) -> tuple[pd.DataFrame, pd.DataFrame | None, int]:
    """The items, their predictions (with the grader's) and how many prediction rows were for other items."""
    items = read_items(items_path)
    preds, other = read_task_predictions(predictions_path, rubric, set(items["id"])) if predictions_path else (None, 0)
    if model_predictions is not None and len(model_predictions):
        mp = model_predictions.astype({"item": str})
        unknown = set(mp["concept"]) - set(rubric.keys)
        if unknown:
            raise ReviewError(f"the grader's concepts {sorted(unknown)} are not in rubric {rubric.name}",
                              hint="pass a run trained on this rubric")
        mp = mp[mp["item"].isin(set(items["id"]))]
        preds = mp if preds is None else pd.concat([preds, mp], ignore_index=True)
    return items, preds, other


def _project_title(project: str | None, rubric: Rubric) -> str:
    """The project's title (default ``<rubric>-review``), checked against Label Studio's length limits."""
    title = project or f"{rubric.name}-review"
    if not 3 <= len(title) <= 50:
        raise ReviewError(f"project title {title!r} has {len(title)} characters; Label Studio needs 3 to 50",
                          hint="pass another --project")
    return title


def _route_items(
    items: pd.DataFrame, preds: pd.DataFrame | None, select: str | None, budget: int | None, seed: int,
    state_path: Path, title: str,
) -> tuple[pd.DataFrame, Routing | None, Path | None]:
    """The items to send (the routed ones with ``select``/``budget``), the routing and its ranking file."""
    routing, routing_file = None, None
    if select is not None and budget is not None:  # before any server call: a bad selection changes nothing
        routing = route(items["id"].tolist(), preds, select, budget, seed)
        routing_file = state_path.parent / f"{title}.routing.csv"
        _write_local(routing_file, "the routing table", "nothing was sent to Label Studio",
                     lambda: write_table(routing.table.assign(how=select, seed=seed), routing_file))
        items = items[items["id"].isin(set(routing.selected))]
    return items, routing, routing_file


def _open_project(
    conn: Connection, state: dict[str, Any], title: str, rubric: Rubric, xml: str, max_annotations: int,
    prefill: str | None,
) -> tuple[dict[str, Any], bool]:
    """The project (by the state file's id, else its title, else created) with its settings brought up to date,
    and whether it was created."""
    blind = {"show_collab_predictions": prefill is not None, "show_annotation_history": False}
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
                "show_skip_button": True, **blind,
            },
        )
    else:
        check_interface(rubric, str(found.get("label_config", "")), f"{title!r} (id {found['id']})")
        _check_mode(found, prefill, title)
        want: dict[str, Any] = {"maximum_annotations": max_annotations, **blind}
        if str(found.get("label_config", "")).strip() != xml.strip():  # examples or the pre-filling model changed
            want["label_config"] = xml
        if any(found.get(k) != v for k, v in want.items()):
            conn.request("PATCH", f"/api/projects/{found['id']}", "updating the project's review settings", json=want)
    return found, created


def _save_state(
    conn: Connection, state: dict[str, Any], state_path: Path, title: str, pid: int, rubric: Rubric,
    model_predictions: pd.DataFrame | None,
) -> Path | None:
    """Record the project in the state file and write the grader's predictions beside it (their path, if any)."""
    state.setdefault(conn.url, {})[title] = {"id": pid, "rubric": rubric.name, "rubric_version": rubric.version}
    kept = (f"project {title!r} (id {pid}) is kept on {conn.url} with the tasks it had (none imported by this run); "
            "the next push finds it by its title")
    _write_local(state_path, "the review state file", kept, lambda: atomic_write_json(state_path, state))
    model_file = None
    if model_predictions is not None and len(model_predictions):
        model_file = state_path.parent / f"predictions-{model_predictions['model'].iloc[0]}.csv"
        _write_local(model_file, "the grader's predictions", kept, lambda: write_table(model_predictions, model_file))
    return model_file


def _import_missing(
    conn: Connection, pid: int, items: pd.DataFrame, shown: pd.DataFrame | None, rubric: Rubric, batch_size: int,
    progress: ProgressFn | None,
) -> tuple[int, int, int, int]:
    """Import the items the project lacks, and the predictions its tasks lack: (items already there, tasks
    imported, predictions added, second copies deleted)."""
    existing, removed = _one_task_per_item(conn, pid, list_tasks(conn, pid, False), progress)
    new_items = items[~items["id"].isin(existing)]
    tasks = build_tasks(new_items, shown, rubric)
    wanted = set(items["id"])
    on_server = {i: t for i, t in existing.items() if i in wanted}
    n_pred = _add_missing_predictions(conn, pid, on_server, shown, rubric) if shown is not None and on_server else 0
    if progress:
        progress(Progress("importing tasks", 0, len(tasks)))
    for start in range(0, len(tasks), batch_size):
        batch = tasks[start : start + batch_size]
        body = conn.request("POST", f"/api/projects/{pid}/import", f"importing tasks into project {pid}",
                            params={"return_task_ids": "true"}, json=batch)
        n_pred += int((body or {}).get("prediction_count") or 0)
        if progress:
            progress(Progress("importing tasks", start + len(batch), len(tasks)))
    return len(items) - len(new_items), len(tasks), n_pred, removed


@dataclass(frozen=True)
class PushOptions:
    """How the review project is set up and which items go to it: ``review push``'s options, built once."""

    project: str | None = None  # the project's title (None: <rubric>-review)
    max_annotations: int = 3  # reviewers per task
    batch_size: int = 200  # tasks per import request
    select: str | None = None  # the routing rule (uncertain, disagreement, random); goes with budget
    budget: int | None = None  # items the routing rule picks
    seed: int = 0  # the routing's seed (random, ties)
    show_predictions: bool = False  # anchored review: the tasks carry the predictions (default: blind)
    prefill_model: str | None = None  # anchored review: the model whose levels are pre-selected


def push(
    conn: Connection,
    rubric: Rubric,
    items_path: str | Path,
    predictions_path: str | Path | None = None,
    options: PushOptions = PushOptions(),
    state_file: str | Path | None = None,
    progress: ProgressFn | None = None,
    model_predictions: pd.DataFrame | None = None,
) -> PushResult:
    """Create or find the review project and import the items it does not hold yet (blind by default).

    The project is found by the id stored in the state file (``.rubrictool-review.json`` next to the
    items), else by its exact title (default ``<rubric>-review``), else created. The items already on
    the server are read from its tasks (``data.item_id``) before importing, so a re-run, an interrupted
    run or a run after adding items imports each item exactly once. A killed run's batch that the server stored
    only after this run read the tasks puts some items there twice; the tasks are read again after the import and
    the second copies deleted (:func:`_one_task_per_item`), so the project ends with each item once. The folder of
    the state file is checked before any server call; a local file that cannot be written is one line naming it
    and what was kept.

    ``model_predictions`` (a trained grader's PredictionTable, :func:`rubrictool.grade.grader_predictions`)
    ranks items for ``select="uncertain"`` and, in anchored review only, adds one more prediction per task
    (``model_version`` = its model name) whose ``score`` is the grader's confidence (1 − uncertainty); it is also
    written next to the state file for ``adjudicate --pre-annotations``. A prediction is never sent twice for the same
    task and model, so a re-push is a no-op. ``select`` (uncertain, disagreement, random) with ``budget`` imports only
    the ``budget`` items :func:`~rubrictool.review.routing.route` picks (the full ranking goes to
    ``<title>.routing.csv``).

    Blind review is the default, as far as Label Studio's community edition allows: the tasks carry no
    predictions at all (the PredictionTable stays here, for ``adjudicate --predictions``), the project
    shows no pre-annotations and no annotation history, and the interface says the review is blind.
    Each reviewer's label stream shows only their own annotation; the Data Manager still shows
    everyone's (docs/review.md). ``show_predictions=True`` (anchored review, an explicit opt-in) sends
    the predictions, and Label Studio pre-selects the levels of ``prefill_model`` (default: the grader
    when ``model_predictions`` is given, else the first model by name), the project's ``model_version``;
    the interface names that model on a banner and on every concept. A project keeps the mode it was
    made with: pushing blind into an anchored project, or the other way round, is refused (one α would
    mix both). ``options``: the project, its reviewers per task, the import batch, the routing and the review's mode
    (:class:`PushOptions`).
    """
    o = options
    project, max_annotations, batch_size = o.project, o.max_annotations, o.batch_size
    select, budget = o.select, o.budget
    if max_annotations < 1:
        raise ReviewError(f"max_annotations must be at least 1 (got {max_annotations})", hint="set --max-annotations")
    items, preds, other = _push_inputs(rubric, items_path, predictions_path, model_predictions)
    if (select is None) != (budget is None):
        raise ReviewError("--select and --budget go together", hint="e.g. --select uncertain --budget 200")
    models = sorted(preds["model"].astype(str).unique()) if preds is not None else []
    prefill = _prefill(o.show_predictions, o.prefill_model, models,
                       str(model_predictions["model"].iloc[0]) if model_predictions is not None
                       and len(model_predictions) else None)
    title = _project_title(project, rubric)
    state_path = Path(state_file) if state_file else Path(items_path).parent / STATE_NAME
    xml = render_label_config(rubric, prefilled_by=prefill)
    _writable_folder(state_path)
    items, routing, routing_file = _route_items(items, preds, select, budget, o.seed, state_path, title)
    conn.get("/api/current-user/whoami", "checking the API key")
    state = _read_state(state_path)
    found, created = _open_project(conn, state, title, rubric, xml, max_annotations, prefill)
    pid = int(found["id"])
    model_file = _save_state(conn, state, state_path, title, pid, rubric, model_predictions)
    shown = preds if prefill is not None else None  # blind review: no task carries a prediction
    already, n_tasks, n_pred, removed = _import_missing(conn, pid, items, shown, rubric, batch_size, progress)
    if prefill is not None and found.get("model_version") != prefill:  # after the import: it must exist by now
        conn.request("PATCH", f"/api/projects/{pid}", f"setting the pre-filling model to {prefill}",
                     json={"model_version": prefill})
    if n_tasks:  # a killed run's import the server finished after this run read the tasks: its items are here twice
        removed += _one_task_per_item(conn, pid, list_tasks(conn, pid, False), progress)[1]
    n_kept = len(preds) if preds is not None and prefill is None else 0
    return PushResult(pid, title, conn.url, created, len(items), already, n_tasks, n_pred,
                      models, state_path, other, routing, routing_file, model_file, prefill, n_kept, removed)


def _prefill(show: bool, model: str | None, models: list[str], grader: str | None) -> str | None:
    """The model whose levels Label Studio pre-selects (None: blind review), checked before any server call."""
    if not show:
        if model is not None:
            raise ReviewError(f"--prefill-model {model} only makes sense with --show-predictions (the default is blind "
                              "review: no model's levels shown)",
                              hint="add --show-predictions, or drop --prefill-model")
        return None
    if not models:
        raise ReviewError("--show-predictions: there are no predictions to show",
                          hint="pass --predictions FILE and/or --run RUN, or drop --show-predictions for blind review")
    chosen = model or grader or models[0]
    if chosen not in models:
        raise ReviewError(f"--prefill-model {chosen!r} has no predictions for these items; the models are "
                          f"{', '.join(models)}", hint="pass one of them")
    return chosen


def _check_mode(found: dict[str, Any], prefill: str | None, title: str) -> None:
    """Refuse to switch a project between blind and anchored review (its α would mix the two)."""
    label = f"project {title!r} (id {found['id']})"
    if prefill is None and found.get("show_collab_predictions"):
        raise ReviewError(
            f"{label} shows the model's levels to its reviewers (anchored review); pushing blind review into it "
            "would mix blind and anchored reviews in one α",
            hint="push blind review to a new project with --project NEW-TITLE, or pass --show-predictions to keep "
                 "adding to this one",
        )
    if prefill is not None and not found.get("show_collab_predictions"):
        raise ReviewError(
            f"{label} is a blind-review project; showing the model's levels now would anchor the reviews still to "
            "come and mix both kinds in one α",
            hint="push anchored review to a new project with --project NEW-TITLE --show-predictions",
        )
