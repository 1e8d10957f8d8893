"""`rubrictool annotate` for a real course under hostile conditions: draft rubrics
refused, cached failures re-sent on request only, exit codes that mean something, early stop when the
endpoint is unreachable or every reply fails, one writer per cache and output, one-line errors for a
full disk, numeric options checked.

Everything runs on a small chemistry-lab course that is not Mohler (concepts SAFE, METH, UNIT on
levels 0..2, a 0..10 grade) against the scripted OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.annotate import ReplyCache, draft_problems
from rubrictool.cli import app
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_predictions
from tests.support.courses import COURSE_RUBRIC
from tests.support.faults import read_only
from tests.support.llm_server import MODEL, Reply, ScriptedLLMServer, Seen, free_port, line_reply

ROOT = Path(__file__).resolve().parent.parent
KEYS = ["SAFE", "METH", "UNIT"]
LO, HI = 0, 2


def course(tmp_path: Path, n: int, tags: list[str] | None = None) -> tuple[Path, Path]:
    """(rubric file, item table) of the chemistry-lab course: n answers, the i-th ending in tags[i]."""
    rubric = tmp_path / "chemlab.yaml"
    rubric.write_text(COURSE_RUBRIC, encoding="utf-8")
    tags = tags or ["good"] * n
    items = pd.DataFrame({
        "id": [f"lab2.q{i % 3}.{i}" for i in range(n)],
        "question": "How do you prepare 0.1 M HCl safely?",
        "response": [f"answer {i} dilute the acid into water {tags[i]}" for i in range(n)],
        "reference": "Add acid to water slowly in a fume hood, wearing goggles; 8.3 mL of 12 M HCl per litre.",
    })
    data = tmp_path / "lab2.csv"
    items.to_csv(data, index=False)
    return rubric, data


def good(seen: Seen) -> Reply:
    return Reply(content=line_reply(seen.response, KEYS, LO, HI))


def cli(*args: str | Path) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["annotate", *map(str, args)])
    return r.exit_code, r.output


def base_args(rubric: Path, data: Path, url: str, tmp_path: Path, out: str = "out") -> list[str | Path]:
    return ["--rubric", rubric, "--items", data, "--model", MODEL, "--api-base", url, "--backoff", "0.01",
            "--cache", tmp_path / "cache.sqlite", "--out", tmp_path / out]


# -- draft rubrics ------------------------------------------------------------------------------------------


def test_a_draft_rubric_is_refused_unless_allow_draft(tmp_path: Path) -> None:
    _, data = course(tmp_path, 4)
    draft = tmp_path / "draft.yaml"
    r = CliRunner().invoke(app, ["rubric", "new", "--name", "chemdraft", "--concepts", ",".join(KEYS), "--levels", "3",
                                 "--grade-min", "0", "--grade-max", "10", "--out", str(draft)])
    assert r.exit_code == 0, r.output
    assert draft_problems(load_rubric(draft))  # the scaffold validates but is full of TODOs
    with ScriptedLLMServer(lambda s: Reply(content="???")) as srv:
        code, out = cli(*base_args(draft, data, srv.url, tmp_path))
        assert srv.count() == 0  # nothing was sent
        flat = " ".join(out.split())
        assert code == 1 and flat.count("error:") == 1 and "Traceback" not in out
        assert flat.startswith(f"error: {draft}: a draft, not sent to any model: concepts.SAFE: placeholder:"), flat
        assert flat.endswith("or pass --allow-draft")
        code, out = cli(*base_args(draft, data, srv.url, tmp_path), "--dry-run")  # shows a draft's prompts
        assert code == 0 and "a real run refuses this rubric, a draft" in " ".join(out.split()) and srv.count() == 0
        code, out = cli(*base_args(draft, data, srv.url, tmp_path), "--allow-draft", "--limit", "2", "--max-failures",
                        "1")
        assert code == 0, out
        assert srv.count() == 4  # sent on request: a first reply and a repair per item, all unusable
    # two levels of one concept with the same anchor: nothing tells them apart
    same = tmp_path / "same.yaml"
    same.write_text(COURSE_RUBRIC.replace("Units present with errors", "Units absent"), encoding="utf-8")
    assert any("same anchor" in p for p in draft_problems(load_rubric(same)))
    # the finished course rubric and the bundled ones (levels without examples are for reviewers) are ready
    assert draft_problems(load_rubric(course(tmp_path, 1)[0])) == []
    assert all(draft_problems(load_rubric(name)) == [] for name in ("mohler", "asap2", "mocha"))


# -- --retry-failed and --max-failures -------------------------------------------------------------------


def test_retry_failed_resends_only_cached_failures(tmp_path: Path) -> None:
    tags = ["good"] * 38 + ["flaky"] * 2
    rubric, data = course(tmp_path, 40, tags)
    broken = threading.Event()
    broken.set()

    def responder(seen: Seen) -> Reply:
        if seen.response.endswith("flaky") and broken.is_set():
            return Reply(content="I cannot grade this.")
        return good(seen)

    with ScriptedLLMServer(responder) as srv:
        args = base_args(rubric, data, srv.url, tmp_path)
        code, out = cli(*args)
        first = srv.count()
        # 2 of 40 failed = 5 %: not more than the default --max-failures
        assert code == 0, out
        assert first == 38 + 2 * 2  # the failures got a repair round each
        broken.clear()  # the cause is fixed
        code, out = cli(*args)  # a plain re-run reads everything from the cache, failures included
        assert code == 0 and srv.count() == first
        pred = read_predictions(tmp_path / "out" / "predictions.jsonl", load_rubric(rubric))
        assert pred.groupby("item")["raw_ok"].first().sum() == 38
        code, out = cli(*args, "--retry-failed")
        assert code == 0, out
        resent = srv.seen[first:]
        # only the two failed items went out again (one request each, now answered); no success paid twice
        assert len(resent) == 2 and all(s.response.endswith("flaky") for s in resent)
        assert "sent again 2 item(s)" in out
        pred = read_predictions(tmp_path / "out" / "predictions.jsonl", load_rubric(rubric), valid_only=True)
        assert pred["item"].nunique() == 40 and set(pred["level"]) <= {0, 1, 2}
        code, out = cli(*args, "--retry-failed")  # nothing failed any more: nothing to send
        assert code == 0 and srv.count() == first + 2
        # the threshold: 1 failure in 40 (2.5 %) passes at 5 %, not at 1 %
        broken.set()
        (tmp_path / "c2").mkdir()
        rubric2, data2 = course(tmp_path / "c2", 40, ["ok"] * 39 + ["flaky"])
        args2 = base_args(rubric2, data2, srv.url, tmp_path / "c2")
        code, out = cli(*args2, "--out", tmp_path / "o2")
        assert code == 0, out
        code, out = cli(*args2, "--out", tmp_path / "o3", "--max-failures", "0.01")
        assert code == 3, out
        assert "1 of 40 item × model annotations failed" in out.replace("\n", " ")
        summary = json.loads((tmp_path / "o3" / "summary.json").read_text())
        assert summary["failure_share"] == pytest.approx(1 / 40)


# -- early stop ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_an_unreachable_endpoint_stops_early_with_an_error(tmp_path: Path, workers: int) -> None:
    """Connection refused on every request: stopped after a few attempts, not 150 items × 5 attempts."""
    rubric, data = course(tmp_path, 150)
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    t0 = time.monotonic()
    code, out = cli(*base_args(rubric, data, url, tmp_path), "--backoff", "0.2", "--workers", str(workers),
                    "--concurrency", "8")
    took = time.monotonic() - t0
    assert code == 1, out
    flat = " ".join(out.split())
    assert "stopped early, its endpoint is unreachable" in flat and "Traceback" not in out
    assert took < 60, took  # 150 items × 5 attempts with back-off would take minutes
    # what was in flight is recorded; the items never sent are not in the table
    fails = pd.read_json(tmp_path / "out" / "failures.jsonl", lines=True)
    assert 1 <= len(fails) <= 8 * workers, len(fails)


def test_repeated_timeouts_on_the_first_requests_stop_early(tmp_path: Path) -> None:
    rubric, data = course(tmp_path, 60)
    with ScriptedLLMServer(lambda s: Reply(content="late", delay=6)) as srv:
        t0 = time.monotonic()
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path), "--timeout", "1", "--concurrency", "4")
        took = time.monotonic() - t0
        n = srv.count()
    assert code == 1, out
    assert "stopped early, its endpoint is unreachable" in " ".join(out.split())
    assert n <= 12 and took < 60, (n, took)  # not 60 items × 5 attempts of a second each


@pytest.mark.parametrize("workers", [1, 2])
def test_almost_every_reply_failing_stops_early(tmp_path: Path, workers: int) -> None:
    rubric, data = course(tmp_path, 200)
    with ScriptedLLMServer(lambda s: Reply(content="As an AI I cannot grade.")) as srv:
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path), "--workers", str(workers), "--concurrency", "4")
        n = srv.count()
    assert code == 1, out
    assert "almost every reply fails" in " ".join(out.split())
    assert n < 2 * 60, n  # stopped after ~20 items per process, not 200 items × 2 requests
    # the raw replies are written, to find out why they fail, and the summary says why the run stopped
    assert "almost every reply fails" in json.loads((tmp_path / "out" / "summary.json").read_text())["stopped"][MODEL]
    fails = pd.read_json(tmp_path / "out" / "failures.jsonl", lines=True)
    assert (fails["reply"] == "As an AI I cannot grade.").sum() >= 20


def test_a_server_that_answers_some_requests_is_not_stopped(tmp_path: Path) -> None:
    """A 503 on the first request of every item, and a first item that fails: retried, not an early stop."""
    rubric, data = course(tmp_path, 30, ["bad"] + ["good"] * 29)
    asked: set[str] = set()
    lock = threading.Lock()

    def responder(seen: Seen) -> Reply:
        with lock:
            first = seen.response not in asked
            asked.add(seen.response)
        if first:
            return Reply(status=503)
        return Reply(content="no idea") if seen.response.endswith("bad") else good(seen)

    with ScriptedLLMServer(responder) as srv:
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path), "--max-failures", "0.1")
    assert code == 0, out
    pred = read_predictions(tmp_path / "out" / "predictions.jsonl", load_rubric(rubric), valid_only=True)
    assert pred["item"].nunique() == 29


# -- one writer per cache and output ------------------------------------------------------------------------


def _cmd(rubric: Path, data: Path, url: str, cache: Path, out: Path) -> list[str]:
    exe = ROOT / ".venv" / "bin" / "rubrictool"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "rubrictool.cli"]
    return [*head, "annotate", "--rubric", str(rubric), "--items", str(data), "--model", MODEL, "--api-base", url,
            "--cache", str(cache), "--out", str(out), "--concurrency", "2", "--timeout", "60"]


def test_a_second_annotate_on_the_same_cache_or_output_stops_at_once(tmp_path: Path) -> None:
    rubric, data = course(tmp_path, 6)
    gate = threading.Event()

    def responder(seen: Seen) -> Reply:
        return Reply(content=line_reply(seen.response, KEYS, LO, HI), hang=gate)  # hangs until released

    cache, out = tmp_path / "cache.sqlite", tmp_path / "out"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    with ScriptedLLMServer(responder) as srv:
        first = subprocess.Popen(_cmd(rubric, data, srv.url, cache, out), env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while srv.count() < 1:  # the first run holds its locks and has a request in flight
                assert first.poll() is None, first.stdout.read() if first.stdout else ""
                assert time.monotonic() < deadline
                time.sleep(0.1)
            n = srv.count()
            for c, o, what in ((cache, tmp_path / "other", f"the reply cache {cache}"),
                               (tmp_path / "other.sqlite", out, f"the output {out / 'predictions.jsonl'}")):
                t0 = time.monotonic()
                second = subprocess.run(_cmd(rubric, data, srv.url, c, o), env=env, capture_output=True, text=True,
                                        timeout=120, check=False)
                msg = " ".join((second.stdout + second.stderr).split())
                assert second.returncode == 1, msg
                assert f"{what} is in use by another rubrictool annotate (pid {first.pid} on " in msg, msg
                assert "Traceback" not in msg and time.monotonic() - t0 < 60
            assert srv.count() == n  # the second runs sent nothing
            # a killed holder leaves its lock file behind; the kernel released the lock, so it does not block
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            assert (tmp_path / "cache.sqlite.lock").exists()
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
            gate.set()
        again = subprocess.run(_cmd(rubric, data, srv.url, cache, out), env=env, capture_output=True, text=True,
                               timeout=300, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
    pred = read_predictions(out / "predictions.jsonl", load_rubric(rubric), valid_only=True)
    assert pred["item"].nunique() == 6
    assert not (tmp_path / "cache.sqlite.lock").exists()  # released and removed at the end of the run


# -- full disk, read-only folders ---------------------------------------------------------------------------


def test_a_cache_that_cannot_be_written_is_one_line_and_keeps_what_was_paid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rubric, data = course(tmp_path, 10)
    real_put = ReplyCache.put
    stored = {"n": 0}

    def put(self: ReplyCache, *a: object, **kw: object) -> None:
        if stored["n"] >= 3:
            raise sqlite3.OperationalError("database or disk is full")
        real_put(self, *a, **kw)  # type: ignore[arg-type]
        stored["n"] += 1

    with ScriptedLLMServer(good) as srv:
        monkeypatch.setattr(ReplyCache, "put", put)
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path), "--concurrency", "1")
        flat = " ".join(out.split())
        assert code == 1 and "Traceback" not in out, out
        assert f"{tmp_path / 'cache.sqlite'}: cannot write the reply cache (database or disk is full)" in flat
        assert "the 3 replies stored before are kept in it" in flat
        assert not (tmp_path / "out" / "predictions.jsonl").exists()
        sent = srv.count()
        assert sent == 4  # stopped at the first reply it could not store
        monkeypatch.setattr(ReplyCache, "put", real_put)
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path))
        assert code == 0, out
        assert srv.count() - sent == 10 - 3  # the three stored replies are not paid for again


def test_a_file_size_limit_during_annotate_is_one_line_and_a_rerun_pays_nothing_twice(tmp_path: Path) -> None:
    """A real process under RLIMIT_FSIZE (the cache's write-ahead log cannot grow: what a full disk does to
    SQLite): one line, no traceback; the re-run sends only what the cache did not keep."""
    import resource

    rubric, data = course(tmp_path, 40)
    cache, out = tmp_path / "cache.sqlite", tmp_path / "out"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    limit = 64 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with ScriptedLLMServer(good) as srv:
        cmd = [*_cmd(rubric, data, srv.url, cache, out), "--concurrency", "1"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False,
                           preexec_fn=small_files)  # the limit holds in the child only
        msg = " ".join((r.stdout + r.stderr).split())
        assert r.returncode == 1 and "Traceback" not in msg, msg
        assert f"{cache}: cannot write the reply cache" in msg and "replies stored before are kept in it" in msg, msg
        con = sqlite3.connect(str(cache))
        try:
            kept = int(con.execute("SELECT COUNT(*) FROM replies").fetchone()[0])
        finally:
            con.close()
        first = srv.count()
        assert 0 < kept < 40 and first == kept + 1  # stopped at the first reply it could not store
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert srv.count() - first == 40 - kept  # nothing stored is paid for again
    pred = read_predictions(out / "predictions.jsonl", load_rubric(rubric), valid_only=True)
    assert pred["item"].nunique() == 40


def test_outputs_that_cannot_be_written_are_one_line_and_the_cache_keeps_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rubrictool.annotate import outputs

    rubric, data = course(tmp_path, 5)

    def full(df: pd.DataFrame, path: str | Path) -> Path:
        raise OSError(28, "No space left on device")

    with ScriptedLLMServer(good) as srv:
        monkeypatch.setattr(outputs, "write_table", full)
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path))
        flat = " ".join(out.split())
        assert code == 1 and "Traceback" not in out, out
        assert f"{tmp_path / 'out' / 'predictions.jsonl'}: cannot write it (No space left on device)" in flat
        assert f"every reply is kept in the cache {tmp_path / 'cache.sqlite'}" in flat
        monkeypatch.undo()
        n = srv.count()
        code, out = cli(*base_args(rubric, data, srv.url, tmp_path))
        assert code == 0 and srv.count() == n  # written from the cache, nothing sent


def test_a_read_only_cache_folder_is_one_line(tmp_path: Path) -> None:
    """The cache's folder is read-only (chmod; chattr +i as root, where chmod does not stop writes)."""
    rubric, data = course(tmp_path, 2)
    ro = tmp_path / "ro"
    ro.mkdir()
    with read_only(ro):
        code, out = cli(*base_args(rubric, data, "http://127.0.0.1:9/v1", tmp_path), "--cache", ro / "c.sqlite")
    flat = " ".join(out.split())
    assert code == 1 and "Traceback" not in out
    assert f"{ro / 'c.sqlite.lock'}: cannot create the lock file of the reply cache {ro / 'c.sqlite'} (" in flat, flat
    assert "); nothing was sent, and the cache and outputs are as they were" in flat, flat
    assert list(ro.iterdir()) == []


# -- numeric options ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "name"),
    [("--backoff", "-1", "backoff"), ("--temperature", "-5", "temperature"), ("--temperature", "3", "temperature"),
     ("--timeout", "0", "timeout"), ("--timeout", "nan", "timeout"), ("--max-retries", "-1", "max_retries"),
     ("--workers", "0", "workers"), ("--max-tokens", "0", "max_tokens"), ("--concurrency", "0", "concurrency"),
     ("--budget", "-2", "budget"), ("--max-failures", "1.5", "max_failures"), ("--limit", "0", "limit")],
)
def test_numeric_options_out_of_range_are_refused_with_one_line(tmp_path: Path, flag: str, value: str,
                                                                name: str) -> None:
    rubric, data = course(tmp_path, 2)
    code, out = cli(*base_args(rubric, data, "http://127.0.0.1:9/v1", tmp_path), flag, value)
    assert code == 1, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {name} must") and flag in lines[0], out
    assert not (tmp_path / "cache.sqlite").exists()


def test_a_lock_is_free_once_its_holder_dies_even_with_forked_workers_alive(tmp_path: Path) -> None:
    """A holder that forks (as --workers does) and dies: its children do not keep the lock."""
    from rubrictool.annotate import LockHeld, writer_lock

    target = tmp_path / "cache.sqlite"
    script = (
        "import os, sys, time\n"
        "from rubrictool.locks import writer_lock\n"
        f"with writer_lock({str(target)!r}, 'the cache', 'wait'):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(20); os._exit(0)\n"  # a worker outliving its parent
        "    print('locked', flush=True)\n"
        "    sys.stdin.readline()\n"
        "    os._exit(0)\n"  # dies holding the lock: no release, no unlink
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "locked"
    held = rf"the cache is in use by another rubrictool annotate \(pid {holder.pid} on "
    with pytest.raises(LockHeld, match=held), writer_lock(target, "the cache", "wait"):
        pass
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(timeout=30)
    assert (tmp_path / "cache.sqlite.lock").exists()  # left behind, with its child still running
    with writer_lock(target, "the cache", "wait") as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()
