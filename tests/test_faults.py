"""Fault injection: kill ``train``, ``train --folds``, ``annotate`` (one process and ``--workers``) and
``adjudicate`` at seeded points, or run them under a file-size limit, with --out under a regular file, or into a
read-only folder (``chmod``, or ``chattr +i`` as root, where chmod does not stop writes: CI runs as root), then rerun
and check the invariants:

* every directory a reader accepts is complete and consistent (``open_run`` accepts it only when its files match
  run.json; anything else is refused with one line), and every output file a reader opens is whole;
* nothing is paid for twice: after a kill, the rerun of ``annotate`` sends the scripted server only the items its
  reply cache did not keep;
* the rerun gives what an uninterrupted run gives (the same test predictions for a tiny model with a fixed seed,
  the same pooled k-fold predictions, the same predictions.jsonl, the same adjudicated.csv).

The course is the chemistry-lab one (SAFE, METH, UNIT on 0..2, a 0..10 grade), 40 answers. Kill points are drawn
from ``random.Random(26)``, so a failure names a point that reproduces. Each parametrised case is one kill point or
one bad input: ``pytest -m faults tests/test_faults.py`` reports how many were tried and how many failed. Here: 23
kill points (20 signals, 3 simulated) and 17 bad inputs (file-size limit 8, a path under a file 4, a read-only folder
5).

``review push`` is in tests/test_faults_push.py (it needs the Label Studio server; marked ``labelstudio`` too): 8 kill
points at exact requests (after the project is created, before the first import batch, after a batch was stored but
not answered, Ctrl-C before the last batch, a batch the server stores only after the rerun read the tasks, two in an
anchored project, after a second model's predictions were stored) and 2 bad inputs (a file-size limit on the state
file, a read-only state folder). The whole suite: 31 kill points and 19 bad inputs.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rubrictool.errors import RubrictoolError
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_predictions
from rubrictool.train.runs import open_run, run_is_complete
from tests.support.courses import COURSE_RUBRIC
from tests.support.faults import Result, Stop, cache_rows, fsize_limit, one_line_error, read_only, run_cli
from tests.support.llm_server import MODEL, Reply, ScriptedLLMServer, Seen, line_reply
from tests.support.tiny_models import build_backbone, mohler_like_table

pytestmark = [pytest.mark.faults]

KEYS = ["SAFE", "METH", "UNIT"]
N = 40
rng = random.Random(26)
KILL, INT = int(signal.SIGKILL), int(signal.SIGINT)


def _points(n: int, lo: int, hi: int, sig: int = KILL) -> list[tuple[int, int]]:
    return [(sig, rng.randint(lo, hi)) for _ in range(n)]


# kill points, drawn once (the order of these lines fixes the points)
TRAIN_FILES = _points(3, 1, 14) + _points(1, 2, 10, INT)  # files written under the output's parent
TRAIN_DELAY: list[tuple[int, float]] = [(KILL, round(rng.uniform(0.3, 0.9), 2))]  # share of an uninterrupted run
RETRAIN_FILES = _points(2, 1, 14)  # retraining into an existing run
FOLDS_DELAY = [(KILL, round(rng.uniform(0.2, 0.9), 2)) for _ in range(2)] + [(INT, round(rng.uniform(0.2, 0.9), 2))]
ANNOTATE_ROWS = [(w, *p) for w in (1, 2) for p in _points(2, 1, N - 2) + _points(1, 1, N - 2, INT)]
ADJUDICATE_DELAY = ([(KILL, round(rng.uniform(0.15, 0.6), 2)) for _ in range(3)]
                    + [(INT, round(rng.uniform(0.3, 0.6), 2))])
TRAIN_FSIZE = [0, 3_000, 60_000]  # bytes: nothing, the small files but not the table copy, all but the weights
FOLDS_FSIZE = [60_000]
ANNOTATE_FSIZE = [0, 24_000]
ADJUDICATE_FSIZE = [0, 2_000]


DURATION: dict[str, float] = {}  # seconds an uninterrupted run took (a delay is a share of it)


def _sig(s: int) -> str:
    return signal.Signals(s).name


# -- the course ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The rubric file, a 40-answer adjudicated table, the item table, three reviewers' labels and a tiny BERT."""
    d = tmp_path_factory.mktemp("course")
    (d / "chemlab.yaml").write_text(COURSE_RUBRIC, encoding="utf-8")
    df = mohler_like_table(N)
    c = df[["FC", "CC", "TU"]].to_numpy() - 1  # (N, 3) levels 0..2
    table = df[["id", "question", "response", "reference"]].assign(
        SAFE=c[:, 0], METH=c[:, 1], UNIT=c[:, 2], grade=np.rint(c.sum(1) * 10 / 6).astype(int))
    table.to_csv(d / "adjudicated.csv", index=False)
    table[["id", "question", "response", "reference", "grade"]].to_csv(d / "items.csv", index=False)
    r = np.random.default_rng(26)
    rows = [{"item": i, "reviewer": who, "concept": k, "level": int(np.clip(lv + r.integers(-1, 2), 0, 2))}
            for i, levels in zip(table["id"], c, strict=True) for who in ("ana", "ben", "chi")
            for k, lv in zip(KEYS, levels, strict=True)]
    pd.DataFrame(rows).to_csv(d / "reviews.csv", index=False)
    return {"dir": d, "rubric": d / "chemlab.yaml", "table": d / "adjudicated.csv", "items": d / "items.csv",
            "reviews": d / "reviews.csv", "backbone": Path(build_backbone(d, "bert"))}


def _train_args(course: dict[str, Path], out: Path, *extra: str, epochs: int = 2) -> list[str]:
    return ["train", "--table", str(course["table"]), "--rubric", str(course["rubric"]), "--backbone",
            str(course["backbone"]), "--epochs", str(epochs), "--max-len", "32", "--out", str(out), "--device", "cpu",
            "--lr", "3e-3", *extra]


def _ok(res: Result) -> None:
    assert res.returncode == 0 and not res.stopped, res.output[-3000:]


def _accepted_runs_are_whole(parent: Path) -> int:
    """Every directory under ``parent`` that open_run accepts matches its completion record; the rest are refused
    with one line. Returns how many were accepted."""
    accepted = 0
    for d in [parent, *(p for p in parent.rglob("*") if p.is_dir())]:
        if not (d / "model.json").is_file():
            continue
        try:
            open_run(d)
        except RubrictoolError as exc:
            assert "\n" not in str(exc), str(exc)
            continue
        assert run_is_complete(d), f"{d} is accepted by open_run but does not match a completion record"
        accepted += 1
    return accepted


def _killed_after(args: list[str], sig: int, delay: float, clear: Path) -> Result:
    """The CLI signalled ``delay`` seconds in. The delay is a share of a reference run's time; when the child finished
    first (a run faster than the reference on a machine whose load changes), ``clear`` is removed and the signal comes
    earlier, up to four tries."""
    res = run_cli(args, stop=Stop(sig, delay=delay))
    for _ in range(3):
        if res.stopped:
            break
        shutil.rmtree(clear, ignore_errors=True)
        delay /= 2
        res = run_cli(args, stop=Stop(sig, delay=delay))
    return res


def _stopped_cleanly(res: Result, sig: int) -> None:
    """The signal reached the child: SIGKILL ends it; after SIGINT (Ctrl-C) it stops without a traceback."""
    assert res.stopped, f"the child finished before the signal: {res.output[-1000:]}"
    if sig == KILL:
        assert res.returncode in (-KILL, 0), res.output[-3000:]
    else:
        assert "Traceback" not in res.output, res.output[-3000:]


# -- train --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def train_ref(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An uninterrupted run, and an older run (one epoch) to retrain over."""
    d = tmp_path_factory.mktemp("train-ref")
    res = run_cli(_train_args(course, d / "run"))
    _ok(res)
    DURATION["train"] = res.seconds
    _ok(run_cli(_train_args(course, d / "old", epochs=1)))
    return {"run": d / "run", "old": d / "old"}


def _same_as_reference(out: Path, ref: Path) -> None:
    assert run_is_complete(out)
    open_run(out)
    assert (out / "test_predictions.csv").read_bytes() == (ref / "test_predictions.csv").read_bytes()
    assert (out / "split.json").read_bytes() == (ref / "split.json").read_bytes()


@pytest.mark.parametrize(("sig", "at"), [*TRAIN_FILES, *TRAIN_DELAY],
                         ids=[f"{_sig(s)}-after-{n}-files" for s, n in TRAIN_FILES] +
                             [f"{_sig(s)}-at-{t}-of-a-run" for s, t in TRAIN_DELAY])
def test_train_killed_then_rerun(course: dict[str, Path], train_ref: dict[str, Path], tmp_path: Path,
                                 sig: int, at: float) -> None:
    out = tmp_path / "runs" / "run"
    files = isinstance(at, int)
    if files:
        res = run_cli(_train_args(course, out), stop=Stop(sig, files=int(at), watch=tmp_path / "runs"))
    else:
        res = _killed_after(_train_args(course, out), sig, at * DURATION["train"], tmp_path / "runs")
    _stopped_cleanly(res, sig)
    (tmp_path / "runs").mkdir(exist_ok=True)
    if out.exists():  # the kill came after the rename: a complete run
        assert run_is_complete(out), res.output[-2000:]
    _accepted_runs_are_whole(tmp_path / "runs")
    _ok(run_cli(_train_args(course, out)))
    _same_as_reference(out, train_ref["run"])
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["run"]  # the killed build's staging folder is gone


@pytest.mark.parametrize(("sig", "at"), RETRAIN_FILES, ids=[f"{_sig(s)}-after-{n}-files" for s, n in RETRAIN_FILES])
def test_retrain_over_a_run_killed_then_rerun(course: dict[str, Path], train_ref: dict[str, Path], tmp_path: Path,
                                              sig: int, at: int) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    out = runs / "run"
    shutil.copytree(train_ref["old"], out)
    old_record = (out / "run.json").read_bytes()
    base = len([p for p in runs.rglob("*") if p.is_file()])
    res = run_cli(_train_args(course, out), stop=Stop(sig, files=base + at, watch=runs))
    while not res.stopped and at > 1:
        # the last files came within one poll of each other (a loaded machine): the old run back, an earlier point
        assert run_is_complete(out)
        shutil.rmtree(out)
        shutil.copytree(train_ref["old"], out)
        at -= 3
        res = run_cli(_train_args(course, out), stop=Stop(sig, files=base + max(at, 1), watch=runs))
    _stopped_cleanly(res, sig)
    assert run_is_complete(out)  # the old run whole, or the new one whole: never a mix
    new = (out / "run.json").read_bytes() != old_record
    assert (out / "test_predictions.csv").read_bytes() == (
        (train_ref["run"] if new else train_ref["old"]) / "test_predictions.csv").read_bytes()
    _accepted_runs_are_whole(runs)
    _ok(run_cli(_train_args(course, out)))
    _same_as_reference(out, train_ref["run"])


def test_a_staging_folder_left_by_a_kill_is_never_read_as_a_run(course: dict[str, Path], train_ref: dict[str, Path],
                                                                tmp_path: Path) -> None:
    """A kill between model.json and run.json leaves a staging folder without a completion record, and a kill between
    building()'s two renames leaves the replaced run aside: both are refused in one line naming what they are, and
    the next build removes them."""
    runs = tmp_path / "runs"
    runs.mkdir()
    dead = 2**22 + 1  # above pid_max's default: no live process has it
    for aside in (f".run.building-{dead}-k1ll", f".run.old-{dead}-0123abcd"):
        shutil.copytree(train_ref["run"], runs / aside)
        (runs / aside / "run.json").unlink()
        with pytest.raises(RubrictoolError, match="being built or replaced") as exc:
            open_run(runs / aside)
        assert "\n" not in str(exc.value)
        res = run_cli(["grade", "--run", str(runs / aside), "--items", str(course["items"]), "--out",
                       str(tmp_path / "g.csv")])
        assert res.returncode == 1 and one_line_error(res.output) and not (tmp_path / "g.csv").exists(), res.output
    _ok(run_cli(_train_args(course, runs / "run")))
    assert [p.name for p in runs.iterdir()] == ["run"]  # what dead builds left beside it is removed
    _same_as_reference(runs / "run", train_ref["run"])


@pytest.mark.parametrize("limit", TRAIN_FSIZE)
def test_train_under_a_file_size_limit_then_rerun(course: dict[str, Path], train_ref: dict[str, Path], tmp_path: Path,
                                                  limit: int) -> None:
    out = tmp_path / "runs" / "run"
    res = run_cli(_train_args(course, out), preexec=fsize_limit(limit))
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert not out.exists()
    if (tmp_path / "runs").exists():
        assert _accepted_runs_are_whole(tmp_path / "runs") == 0
    _ok(run_cli(_train_args(course, out)))
    _same_as_reference(out, train_ref["run"])


def test_train_with_out_under_a_file_is_one_line(course: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    res = run_cli(_train_args(course, tmp_path / "a-file" / "run"))
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert (tmp_path / "a-file").read_text() == "not a folder\n"


def test_train_into_a_read_only_folder_keeps_the_old_run_then_rerun(course: dict[str, Path],
                                                                   train_ref: dict[str, Path], tmp_path: Path) -> None:
    """The folder of --out is read-only (chmod, or chattr +i as root): one line naming it and saying the old run there
    is as it was, before any training; once writable, the rerun gives the uninterrupted run."""
    runs = tmp_path / "runs"
    runs.mkdir()
    out = runs / "run"
    shutil.copytree(train_ref["old"], out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with read_only(runs):
        res = run_cli(_train_args(course, out))
    flat = " ".join(res.output.split())
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert f"cannot write the run into {runs} (" in flat and f"{out} is as it was" in flat, flat
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert run_is_complete(out)
    _ok(run_cli(_train_args(course, out)))
    _same_as_reference(out, train_ref["run"])


# -- train --folds ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folds_ref(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("folds-ref") / "kfold"
    res = run_cli(_train_args(course, out, "--folds", "2"))
    _ok(res)
    DURATION["folds"] = res.seconds
    return out


def _folds_whole(out: Path) -> None:
    """Each fold is complete or refused; pooled_predictions.csv and folds.json, when there, are whole."""
    _accepted_runs_are_whole(out.parent)
    with pytest.raises(RubrictoolError):
        open_run(out)  # the k-fold parent is never read as a run
    if (out / "pooled_predictions.csv").exists():
        pooled = pd.read_csv(out / "pooled_predictions.csv", dtype={"id": str})
        assert len(pooled) == N and pooled["id"].is_unique
    if (out / "folds.json").exists():
        assert json.loads((out / "folds.json").read_text())["n_items"] == N


def _same_folds(out: Path, ref: Path) -> None:
    for i in range(2):
        assert run_is_complete(out / f"fold-{i}")
        assert (out / f"fold-{i}" / "test_predictions.csv").read_bytes() == (
            ref / f"fold-{i}" / "test_predictions.csv").read_bytes()
    assert (out / "pooled_predictions.csv").read_bytes() == (ref / "pooled_predictions.csv").read_bytes()
    pooled = pd.read_csv(out / "pooled_predictions.csv", dtype={"id": str})
    assert len(pooled) == N and pooled["id"].is_unique


@pytest.mark.parametrize(("sig", "at"), FOLDS_DELAY, ids=[f"{_sig(s)}-at-{t}-of-a-run" for s, t in FOLDS_DELAY])
def test_train_folds_killed_then_rerun(course: dict[str, Path], folds_ref: Path, tmp_path: Path, sig: int,
                                       at: float) -> None:
    out = tmp_path / "runs" / "kfold"
    res = _killed_after(_train_args(course, out, "--folds", "2"), sig, at * DURATION["folds"], tmp_path / "runs")
    _stopped_cleanly(res, sig)
    if out.exists():
        _folds_whole(out)
    _ok(run_cli(_train_args(course, out, "--folds", "2")))
    _same_folds(out, folds_ref)


@pytest.mark.usefixtures("one_thread")
def test_a_kill_while_the_pooled_predictions_are_written_leaves_them_whole_or_absent(
        course: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pooled_predictions.csv is what ``compare`` reads as a finished k-fold run: a kill halfway through writing it
    (here: half the bytes written, then KeyboardInterrupt) must not leave a truncated table behind."""
    from typer.testing import CliRunner

    from rubrictool.cli import app

    real = pd.DataFrame.to_csv

    def half_then_killed(self: pd.DataFrame, path: Any = None, *args: Any, **kwargs: Any) -> Any:
        if path is not None and Path(str(path)).name.lstrip(".").startswith("pooled_predictions.csv"):
            text = real(self, None, *args, **kwargs)
            Path(str(path)).write_text(text[: len(text) // 2])
            raise KeyboardInterrupt
        return real(self, path, *args, **kwargs)

    out = tmp_path / "kfold"
    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_killed)
    res = CliRunner().invoke(app, _train_args(course, out, "--folds", "2"))
    assert res.exit_code != 0 and all(run_is_complete(out / f"fold-{i}") for i in range(2))
    assert not (out / "pooled_predictions.csv").exists() and not (out / "folds.json").exists()
    monkeypatch.setattr(pd.DataFrame, "to_csv", real)
    res = CliRunner().invoke(app, _train_args(course, out, "--folds", "2"))  # both folds read back
    assert res.exit_code == 0, res.output
    pooled = pd.read_csv(out / "pooled_predictions.csv", dtype={"id": str})
    assert len(pooled) == N and pooled["id"].is_unique


@pytest.mark.parametrize("limit", FOLDS_FSIZE)
def test_train_folds_under_a_file_size_limit_then_rerun(course: dict[str, Path], folds_ref: Path, tmp_path: Path,
                                                        limit: int) -> None:
    out = tmp_path / "runs" / "kfold"
    res = run_cli(_train_args(course, out, "--folds", "2"), preexec=fsize_limit(limit))
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert not (out / "fold-0").exists()  # the fold that failed writing its weights is not left behind
    _folds_whole(out)
    _ok(run_cli(_train_args(course, out, "--folds", "2")))
    _same_folds(out, folds_ref)


def test_train_folds_into_a_read_only_folder_is_one_line_then_rerun(course: dict[str, Path], folds_ref: Path,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "runs" / "kfold"
    out.mkdir(parents=True)
    with read_only(out):
        res = run_cli(_train_args(course, out, "--folds", "2"))
    flat = " ".join(res.output.split())
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert str(out) in flat and "nothing was written" in flat, flat
    assert list(out.iterdir()) == []
    _ok(run_cli(_train_args(course, out, "--folds", "2")))
    _same_folds(out, folds_ref)


# -- annotate -----------------------------------------------------------------------------------------------------


def _good(seen: Seen) -> Reply:
    return Reply(content=line_reply(seen.response, KEYS, 0, 2), delay=0.05)


def _annotate_args(course: dict[str, Path], url: str, cache: Path, out: Path, workers: int = 1) -> list[str]:
    return ["annotate", "--rubric", str(course["rubric"]), "--items", str(course["items"]), "--model", MODEL,
            "--api-base", url, "--cache", str(cache), "--out", str(out), "--concurrency", "2", "--timeout", "60",
            "--backoff", "0.01", "--workers", str(workers)]


def _labels(out: Path, rubric: Path) -> pd.DataFrame:
    pred = read_predictions(out / "predictions.jsonl", load_rubric(rubric), valid_only=True)
    return pred[["item", "model", "concept", "level", "evidence"]].sort_values(["item", "concept"]).reset_index(
        drop=True)


@pytest.fixture(scope="module")
def annotate_ref(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    d = tmp_path_factory.mktemp("annotate-ref")
    with ScriptedLLMServer(_good) as srv:
        _ok(run_cli(_annotate_args(course, srv.url, d / "cache.sqlite", d / "out")))
        assert srv.count() == N
    labels = _labels(d / "out", course["rubric"])
    assert labels["item"].nunique() == N
    return labels


@pytest.mark.parametrize(("workers", "sig", "rows"), ANNOTATE_ROWS,
                         ids=[f"workers{w}-{_sig(s)}-after-{n}-replies" for w, s, n in ANNOTATE_ROWS])
def test_annotate_killed_then_rerun_pays_nothing_twice(course: dict[str, Path], annotate_ref: pd.DataFrame,
                                                       tmp_path: Path, workers: int, sig: int, rows: int) -> None:
    cache, out = tmp_path / "cache.sqlite", tmp_path / "out"
    with ScriptedLLMServer(_good) as srv:
        args = _annotate_args(course, srv.url, cache, out, workers)
        res = run_cli(args, stop=Stop(sig, rows=rows, watch=cache))
        _stopped_cleanly(res, sig)
        if workers > 1:  # orphaned workers notice the parent is gone within 0.25 s and stop
            time.sleep(1.5)
        if (out / "predictions.jsonl").exists():  # written whole at the end, or not at all
            assert res.returncode == 0 or _labels(out, course["rubric"])["item"].nunique() == N
        kept = cache_rows(cache)
        first = srv.count()
        assert kept >= min(rows, N) or not res.stopped
        _ok(run_cli(args))
        assert srv.count() - first == N - kept  # the rerun sends only what the cache did not keep
    pd.testing.assert_frame_equal(_labels(out, course["rubric"]), annotate_ref)


@pytest.mark.parametrize("limit", ANNOTATE_FSIZE)
def test_annotate_under_a_file_size_limit_then_rerun(course: dict[str, Path], annotate_ref: pd.DataFrame,
                                                     tmp_path: Path, limit: int) -> None:
    cache, out = tmp_path / "cache.sqlite", tmp_path / "out"
    with ScriptedLLMServer(_good) as srv:
        args = _annotate_args(course, srv.url, cache, out)
        res = run_cli(args, preexec=fsize_limit(limit))
        assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
        assert not (out / "predictions.jsonl").exists()
        kept, first = cache_rows(cache), srv.count()
        _ok(run_cli(args))
        assert srv.count() - first == N - kept
    pd.testing.assert_frame_equal(_labels(out, course["rubric"]), annotate_ref)


@pytest.mark.parametrize("where", ["out", "cache"])
def test_annotate_with_a_path_under_a_file_is_one_line(course: dict[str, Path], tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    bad = tmp_path / "a-file" / "x"
    with ScriptedLLMServer(_good) as srv:
        cache, out = (tmp_path / "c.sqlite", bad) if where == "out" else (bad, tmp_path / "out")
        res = run_cli(_annotate_args(course, srv.url, cache, out))
        assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
        assert srv.count() == 0 or where == "out"


@pytest.mark.parametrize("where", ["out", "cache"])
def test_annotate_into_a_read_only_folder_pays_nothing_then_rerun(course: dict[str, Path], annotate_ref: pd.DataFrame,
                                                                  tmp_path: Path, where: str) -> None:
    """The folder of --out or of --cache is read-only (chmod, or chattr +i as root): one line naming the file, before
    any request; once writable, the rerun pays each item once."""
    cache, out = tmp_path / "c" / "cache.sqlite", tmp_path / "out"
    out.mkdir()
    cache.parent.mkdir()
    locked = out if where == "out" else cache.parent
    with ScriptedLLMServer(_good) as srv:
        args = _annotate_args(course, srv.url, cache, out)
        with read_only(locked):
            res = run_cli(args)
        flat = " ".join(res.output.split())
        assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
        named = out / "predictions.jsonl.lock" if where == "out" else cache.parent / "cache.sqlite.lock"
        assert f"{named}: cannot create the lock file" in flat, flat
        assert ("(Operation not permitted); nothing was sent" in flat
                or "(Permission denied); nothing was sent" in flat), flat
        assert list(locked.iterdir()) == [] and srv.count() == 0
        _ok(run_cli(args))
        assert srv.count() == N
    pd.testing.assert_frame_equal(_labels(out, course["rubric"]), annotate_ref)


# -- adjudicate ---------------------------------------------------------------------------------------------------


def _adjudicate_args(course: dict[str, Path], out: Path) -> list[str]:
    return ["adjudicate", "--rubric", str(course["rubric"]), "--reviews", str(course["reviews"]), "--items",
            str(course["items"]), "--out", str(out), "--bootstrap", "50"]


OUTPUTS = ["adjudicated.csv", "decisions.csv", "discussion_queue.csv", "discussion_queue.md", "agreement.json"]


@pytest.fixture(scope="module")
def adjudicate_ref(course: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("adjudicate-ref") / "adj"
    res = run_cli(_adjudicate_args(course, out))
    _ok(res)
    DURATION["adjudicate"] = res.seconds
    return {name: (out / name).read_bytes() for name in OUTPUTS}


def _outputs_whole(out: Path) -> None:
    if (out / "adjudicated.csv").exists():
        assert len(pd.read_csv(out / "adjudicated.csv")) == N
    if (out / "agreement.json").exists():
        json.loads((out / "agreement.json").read_text())


@pytest.mark.parametrize(("sig", "at"), ADJUDICATE_DELAY,
                         ids=[f"{_sig(s)}-at-{t}-of-a-run" for s, t in ADJUDICATE_DELAY])
def test_adjudicate_killed_then_rerun(course: dict[str, Path], adjudicate_ref: dict[str, bytes], tmp_path: Path,
                                      sig: int, at: float) -> None:
    out = tmp_path / "adj"
    res = _killed_after(_adjudicate_args(course, out), sig, at * DURATION["adjudicate"], out)
    _stopped_cleanly(res, sig)
    _outputs_whole(out)
    _ok(run_cli(_adjudicate_args(course, out)))
    for name in OUTPUTS:
        assert (out / name).read_bytes() == adjudicate_ref[name], name


@pytest.mark.parametrize("limit", ADJUDICATE_FSIZE)
def test_adjudicate_under_a_file_size_limit_then_rerun(course: dict[str, Path], adjudicate_ref: dict[str, bytes],
                                                       tmp_path: Path, limit: int) -> None:
    out = tmp_path / "adj"
    res = run_cli(_adjudicate_args(course, out), preexec=fsize_limit(limit))
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    _outputs_whole(out)
    _ok(run_cli(_adjudicate_args(course, out)))
    for name in OUTPUTS:
        assert (out / name).read_bytes() == adjudicate_ref[name], name


def test_adjudicate_with_out_under_a_file_is_one_line(course: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    res = run_cli(_adjudicate_args(course, tmp_path / "a-file" / "adj"))
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]


def test_adjudicate_into_a_read_only_folder_is_one_line_then_rerun(course: dict[str, Path],
                                                                   adjudicate_ref: dict[str, bytes],
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "adj"
    out.mkdir()
    with read_only(out):
        res = run_cli(_adjudicate_args(course, out))
    flat = " ".join(res.output.split())
    assert res.returncode == 1 and one_line_error(res.output), res.output[-3000:]
    assert f"{out / 'adjudicated.csv'}: cannot write it" in flat and "written before it: nothing" in flat, flat
    assert list(out.iterdir()) == []
    _ok(run_cli(_adjudicate_args(course, out)))
    for name in OUTPUTS:
        assert (out / name).read_bytes() == adjudicate_ref[name], name


def test_a_script_run_through_run_script_fails_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``rubrictool.cli.run_script`` (the lab's and benchmarks' entry): a library error is ``error: <message>;
    <hint>`` on stderr with exit code 1 and no traceback; otherwise the exit code is main's own."""
    from rubrictool.cli import run_script
    from rubrictool.errors import DataError

    def bad() -> int:
        raise DataError("no Mohler data in /nowhere", hint="point --data-dir at it")

    with pytest.raises(SystemExit) as exc:
        run_script(bad)
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: no Mohler data in /nowhere; point --data-dir at it" and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        run_script(lambda: 3)
    assert exc.value.code == 3 and capsys.readouterr().err == ""
