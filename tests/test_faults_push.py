"""Fault injection for ``review push``, against a real Label Studio (tests/support/labelstudio.py).

``rubrictool review push`` runs in a child process talking to the server through :class:`HoldingProxy`, which holds
one chosen request and sets the event that stops the child, so every kill lands at an exact point (no sleeps): right
after the project is created (before the state file is written), before an import batch is sent, after the server
stored a batch whose answer the child never got, with a batch the server stores only after the rerun has read the
tasks (a slow server), after the predictions of a second model were stored, and before the pre-filling model is set.
The bad inputs are a file-size limit (the state file cannot be written after the project was created) and a read-only
folder for the state file (chmod, or ``chattr +i`` as root). Then push runs again, and the invariants hold:

* the project holds every item exactly once (none twice, none missing), each task with each model's prediction once;
* there is one project of that title, and the state file is whole and names that project;
* the end state (tasks, their data and predictions, the project's settings) equals an uninterrupted push's.

20 items of the chemistry-lab course, four per import batch (five batches). Marked ``faults`` and ``labelstudio``.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rubrictool.review import Connection, LabelStudioServer, find_project
from rubrictool.review.push import _all_projects, attach_predictions, list_tasks
from rubrictool.review.settings import ENV_KEY, STATE_NAME
from tests.support.courses import COURSE_RUBRIC
from tests.support.faults import (
    Hold,
    HoldingProxy,
    Result,
    Stop,
    fsize_limit,
    one_line_error,
    read_only,
    run_cli,
)
from tests.support.tiny_models import mohler_like_table

pytestmark = [pytest.mark.faults, pytest.mark.labelstudio, pytest.mark.timeout(1200)]

N, BATCH = 20, 4
KILL, INT = int(signal.SIGKILL), int(signal.SIGINT)
MODELS = ("gpt-x", "llama-y")  # the anchored pushes' two models; the first by name is pre-filled
IMPORT = r"/api/projects/\d+/import"

# (name, hold, signal, anchored): every kill point, an exact request of the child's conversation with the server
KILLS: list[tuple[str, Hold, int, bool]] = [
    ("after-the-project-is-created", Hold("POST", r"/api/projects", 1, "after"), KILL, False),
    ("before-the-first-batch", Hold("POST", IMPORT, 1, "before"), KILL, False),
    ("after-batch-3-stored-unanswered", Hold("POST", IMPORT, 3, "after"), KILL, False),
    ("ctrl-c-before-batch-5", Hold("POST", IMPORT, 5, "before"), INT, False),
    ("batch-2-stored-after-the-rerun-read-the-tasks", Hold("POST", IMPORT, 2, "late"), KILL, False),
    ("anchored-after-batch-2-stored-unanswered", Hold("POST", IMPORT, 2, "after"), KILL, True),
    ("anchored-before-the-prefill-model-is-set", Hold("PATCH", r"/api/projects/\d+", 1, "before"), KILL, True),
]


# -- the course, the server, the proxy -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The rubric, 40 items and a PredictionTable of two models (0..2 levels on SAFE, METH, UNIT)."""
    d = tmp_path_factory.mktemp("push-course")
    (d / "chemlab.yaml").write_text(COURSE_RUBRIC, encoding="utf-8")
    df = mohler_like_table(N)
    df[["id", "question", "response", "reference"]].to_csv(d / "items.csv", index=False)
    c = df[["FC", "CC", "TU"]].to_numpy() - 1
    rows = [{"item": i, "model": m, "concept": k, "level": int(min(2, lv + j * (n % 2))), "evidence": "quoted",
             "raw_ok": True}
            for n, (i, levels) in enumerate(zip(df["id"], c, strict=True)) for j, m in enumerate(MODELS)
            for k, lv in zip(["SAFE", "METH", "UNIT"], levels, strict=True)]
    preds = pd.DataFrame(rows)
    preds.to_csv(d / "predictions.csv", index=False)
    preds[preds["model"] == MODELS[0]].to_csv(d / "predictions-first-model.csv", index=False)
    return {"rubric": d / "chemlab.yaml", "items": d / "items.csv", "predictions": d / "predictions.csv",
            "first-model": d / "predictions-first-model.csv"}


@pytest.fixture(scope="module")
def conn(ls_server: LabelStudioServer) -> Connection:
    return ls_server.connection()


@pytest.fixture(scope="module")
def proxy(ls_server: LabelStudioServer, conn: Connection) -> Iterator[HoldingProxy]:
    """The proxy every push goes through; the children read the API key from the environment, not their arguments."""
    with HoldingProxy(ls_server.url) as p, pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_KEY, conn.api_key)
        yield p


def _folder(course: dict[str, Path], where: Path) -> Path:
    """A folder with its own copy of the items (push keeps its state file beside them)."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(course["items"], where / "items.csv")
    return where / "items.csv"


def _push_args(course: dict[str, Path], items: Path, title: str, url: str, anchored: bool,
               predictions: str = "predictions") -> list[str]:
    return ["review", "push", "--rubric", str(course["rubric"]), "--items", str(items), "--project", title,
            "--batch-size", str(BATCH), "--url", url,
            *(["--predictions", str(course[predictions]), "--show-predictions"] if anchored else [])]


def _ok(res: Result) -> None:
    assert res.returncode == 0 and not res.stopped, res.output[-3000:]


# -- what the server holds -----------------------------------------------------------------------------------------


SETTINGS = ("label_config", "maximum_annotations", "show_collab_predictions", "show_annotation_history",
            "model_version", "description", "show_skip_button")


def _tasks_by_item(conn: Connection, pid: int) -> Counter[str]:
    return Counter(str(t["data"]["item_id"]) for t in list_tasks(conn, pid, False))


def _end_state(conn: Connection, title: str, items: Path, url: str) -> dict[str, Any]:
    """The project's settings and, per item, its task's data and predictions, after checking the invariants: one
    project of that title, every item exactly once, at most one prediction per model per task, and a whole state
    file that names the project."""
    same_title = [p for p in _all_projects(conn, title) if p.get("title") == title]
    assert len(same_title) == 1, f"{len(same_title)} projects titled {title!r}"
    project = find_project(conn, title)
    assert project is not None
    pid = int(project["id"])
    tasks = list_tasks(conn, pid, False)
    counts = Counter(str(t["data"]["item_id"]) for t in tasks)
    assert {i: n for i, n in counts.items() if n > 1} == {}, "items imported twice"
    want = set(pd.read_csv(items, dtype={"id": str})["id"])
    assert set(counts) == want, f"missing: {sorted(want - set(counts))[:5]}, unknown: {sorted(set(counts) - want)[:5]}"
    attach_predictions(conn, pid, tasks)
    by_item: dict[str, Any] = {}
    for t in tasks:
        preds = sorted((str(p["model_version"]), json.dumps(p["result"], sort_keys=True), p.get("score"))
                       for p in t["predictions"])
        assert len({m for m, _, _ in preds}) == len(preds), f"task {t['id']}: a model's prediction twice"
        by_item[str(t["data"]["item_id"])] = (t["data"], preds)
    state = json.loads((items.parent / STATE_NAME).read_text())
    assert state == {url: {title: {"id": pid, "rubric": "chemlab", "rubric_version": "1.0"}}}, state
    return {"settings": {k: project.get(k) for k in SETTINGS}, "tasks": by_item}


@pytest.fixture(scope="module")
def reference(course: dict[str, Path], conn: Connection, proxy: HoldingProxy,
              tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, Any]]:
    """What an uninterrupted push leaves, blind and anchored."""
    out: dict[bool, dict[str, Any]] = {}
    for anchored in (False, True):
        title = f"ref-{'anchored' if anchored else 'blind'}"
        items = _folder(course, tmp_path_factory.mktemp(title))
        _ok(run_cli(_push_args(course, items, title, proxy.url, anchored)))
        out[anchored] = _end_state(conn, title, items, proxy.url)
        n_preds = sum(len(p) for _, p in out[anchored]["tasks"].values())
        assert n_preds == (N * len(MODELS) if anchored else 0)
    return out


# -- kills ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "hold", "sig", "anchored"), KILLS, ids=[k[0] for k in KILLS])
def test_push_killed_then_rerun_imports_each_item_once(course: dict[str, Path], conn: Connection, proxy: HoldingProxy,
                                                       reference: dict[bool, dict[str, Any]], tmp_path: Path,
                                                       name: str, hold: Hold, sig: int, anchored: bool) -> None:
    title = f"k{KILLS.index((name, hold, sig, anchored))}-{name}"[:50]
    items = _folder(course, tmp_path)
    args = _push_args(course, items, title, proxy.url, anchored)
    fired = proxy.arm(hold)
    try:
        res = run_cli(args, stop=Stop(sig, event=fired), timeout=240)
    finally:
        proxy.disarm()
    assert res.stopped, f"push finished before {name}: {res.output[-2000:]}"
    assert res.returncode == (-KILL if sig == KILL else 130), res.output[-3000:]
    assert "Traceback" not in res.output, res.output[-3000:]
    if (items.parent / STATE_NAME).exists():  # written whole (or not at all)
        json.loads((items.parent / STATE_NAME).read_text())
    project = find_project(conn, title)
    if project is not None:  # an import batch is stored whole or not at all
        counts = _tasks_by_item(conn, int(project["id"]))
        assert sum(counts.values()) % BATCH == 0 and max(counts.values(), default=1) == 1, counts
    rerun = run_cli(args)
    _ok(rerun)
    assert not proxy.late_pending  # the late batch reached the server during the rerun
    assert _end_state(conn, title, items, proxy.url) == reference[anchored]
    if hold.when == "late":  # the rerun imported the late batch's items again, then deleted the second copies
        assert f"{BATCH} second copy(ies) of an item, left by an interrupted push, deleted" in " ".join(
            rerun.output.split()), rerun.output[-2000:]


def test_push_killed_while_a_second_models_predictions_are_stored(
        course: dict[str, Path], conn: Connection, proxy: HoldingProxy, reference: dict[bool, dict[str, Any]],
        tmp_path: Path) -> None:
    """Anchored review pushed with one model, then again with two: the second push is killed after the server stored
    the second model's predictions for the tasks already there; the rerun adds none of them twice."""
    title = "kill-after-a-second-models-predictions"
    items = _folder(course, tmp_path)
    _ok(run_cli(_push_args(course, items, title, proxy.url, True, "first-model")))
    fired = proxy.arm(Hold("POST", r"/api/projects/\d+/import/predictions", 1, "after"))
    try:
        res = run_cli(_push_args(course, items, title, proxy.url, True), stop=Stop(KILL, event=fired), timeout=240)
    finally:
        proxy.disarm()
    assert res.stopped and res.returncode == -KILL, res.output[-3000:]
    _ok(run_cli(_push_args(course, items, title, proxy.url, True)))
    assert _end_state(conn, title, items, proxy.url) == reference[True]


# -- bad inputs ----------------------------------------------------------------------------------------------------


def test_push_under_a_file_size_limit_then_rerun(course: dict[str, Path], conn: Connection, proxy: HoldingProxy,
                                                 reference: dict[bool, dict[str, Any]], tmp_path: Path) -> None:
    """The state file cannot be written once the project exists: one line naming the file and what was kept."""
    title = "fsize-limit-on-the-state-file"
    items = _folder(course, tmp_path)
    args = _push_args(course, items, title, proxy.url, False)
    res = run_cli(args, preexec=fsize_limit(0))
    flat = " ".join(res.output.split())
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    project = find_project(conn, title)
    assert project is not None
    assert f"{items.parent / STATE_NAME}: cannot write the review state file (File too large)" in flat, flat
    assert f"project {title!r} (id {project['id']}) is kept on {proxy.url}" in flat, flat
    assert not (items.parent / STATE_NAME).exists() and sum(_tasks_by_item(conn, int(project["id"])).values()) == 0
    _ok(run_cli(args))
    assert _end_state(conn, title, items, proxy.url) == reference[False]


def test_push_with_a_read_only_state_folder_changes_nothing_then_rerun(
        course: dict[str, Path], conn: Connection, proxy: HoldingProxy, reference: dict[bool, dict[str, Any]],
        tmp_path: Path) -> None:
    title = "read-only-state-folder"
    items = _folder(course, tmp_path / "ro")
    args = _push_args(course, items, title, proxy.url, False)
    with read_only(items.parent):
        res = run_cli(args)
    flat = " ".join(res.output.split())
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert f"{items.parent / STATE_NAME}: cannot write the review state file there" in flat, flat
    assert "nothing was sent to Label Studio" in flat and find_project(conn, title) is None
    _ok(run_cli(args))
    assert _end_state(conn, title, items, proxy.url) == reference[False]
