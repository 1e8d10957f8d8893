"""`rubrictool annotate` on the command line: files written (checked through the library), keys never
leaked, dry runs that send nothing, and resumption after the client process is killed."""

from __future__ import annotations

import json
import os
import re
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

from rubrictool.cli import app
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_predictions
from tests.support.llm_server import MODEL, Reply, ScriptedLLMServer, Seen, line_reply, make_items

ROOT = Path(__file__).resolve().parent.parent


def test_cli_writes_table_and_never_leaks_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-DO-NOT-LEAK-7f3a9c"
    monkeypatch.setenv("MY_LLM_KEY", secret)
    data = tmp_path / "items.jsonl"
    items = make_items(["good", "malformed", "good", "wrongkey"])
    items.to_json(data, orient="records", lines=True)

    def responder(seen: Seen) -> Reply:
        if "wrongkey" in seen.response:  # providers echo (part of) a bad key in their error message
            return Reply(status=400, content=f"bad request for key {secret}")
        assert seen.headers.get("authorization") == f"Bearer {secret}"
        return Reply(content=line_reply(seen.response) if not seen.response.endswith("malformed") else "???")

    out = tmp_path / "out"
    with ScriptedLLMServer(responder) as srv:
        result = CliRunner().invoke(
            app,
            ["annotate", "--rubric", "mohler", "--items", str(data), "--model", MODEL, "--api-base", srv.url,
             "--api-key-env", "MY_LLM_KEY", "--cache", str(tmp_path / "cache.sqlite"), "--backoff", "0.01",
             "--out", str(out)],
        )
    # 2 of 4 annotations failed: above --max-failures (5 %), so exit 3, with every output written
    assert result.exit_code == 3, result.output
    assert "2 of 4 item × model annotations failed" in result.output
    pred = read_predictions(out / "predictions.jsonl", load_rubric("mohler"))
    assert sorted(pred.loc[pred.raw_ok, "item"].unique()) == ["it0", "it2"]
    fails = pd.read_json(out / "failures.jsonl", lines=True)
    assert set(fails["item"]) == {"it1", "it3"} and "***" in str(fails.set_index("item").loc["it3", "error"])
    # the key is in no output, no cache file, no log line
    texts = [result.output, getattr(result, "stderr", "") or ""]
    for f in list(out.iterdir()) + list(tmp_path.glob("cache.sqlite*")):
        texts.append(f.read_bytes().decode("utf-8", "replace"))
    assert all(secret not in t for t in texts)
    assert (tmp_path / "cache.sqlite").exists()


def test_cli_dry_run_sends_nothing(tmp_path: Path) -> None:
    data = tmp_path / "items.csv"
    make_items(["good"] * 5).to_csv(data, index=False)
    with ScriptedLLMServer() as srv:
        result = CliRunner().invoke(
            app,
            ["annotate", "--rubric", "mohler", "--items", str(data), "--model", "gpt-4o", "--model", MODEL,
             "--api-base", srv.url, "--dry-run", "--cache", str(tmp_path / "c.sqlite"), "--out", str(tmp_path / "o")],
        )
        assert srv.count() == 0
    assert result.exit_code == 0, result.output
    # the dry run shows the prompt as it is sent: the response quoted between this request's boundary lines
    m = re.search(r"Student response \(r\): \[BEGIN DATA ([0-9a-f]{24})\]\s+answer 0 good\s+\[END DATA \1\]",
                  result.output)
    assert m, result.output
    assert "estimated cost of the whole run" in result.output and "gpt-4o" in result.output
    assert not (tmp_path / "o").exists()


def _cache_rows(path: Path) -> int:
    if not path.exists():
        return 0
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return int(con.execute("SELECT COUNT(*) FROM replies").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def _children(pid: int) -> list[int]:
    """Live child processes of pid (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_resume_after_the_client_is_killed(tmp_path: Path, workers: int) -> None:
    """SIGKILL the CLI after 6 answered requests; the re-run asks only for what was never answered.
    With worker processes, they end with the killed CLI instead of carrying on as orphans."""
    n_items, answer_first = 16, 6
    data = tmp_path / "items.jsonl"
    make_items(["good"] * n_items).to_json(data, orient="records", lines=True)
    gate = threading.Event()
    lock = threading.Lock()
    answered: list[str] = []

    def responder(seen: Seen) -> Reply:
        with lock:
            if not gate.is_set() and len(answered) >= answer_first:
                return Reply(content=line_reply(seen.response), hang=gate)  # hangs until after the kill
            answered.append(seen.response)
        return Reply(content=line_reply(seen.response))

    cache, out = tmp_path / "cache.sqlite", tmp_path / "out"
    cmd = [str(ROOT / ".venv" / "bin" / "rubrictool"), "annotate", "--rubric", "mohler", "--items", str(data),
           "--model", MODEL, "--concurrency", "3", "--cache", str(cache), "--out", str(out), "--timeout", "60",
           "--workers", str(workers)]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if not Path(cmd[0]).exists():
        cmd[0:1] = [sys.executable, "-m", "rubrictool.cli"]
    with ScriptedLLMServer(responder) as srv:
        cmd += ["--api-base", srv.url]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while _cache_rows(cache) < answer_first:  # every answered reply is committed
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the client never got 6 replies"
            time.sleep(0.1)
        while srv.count() <= answer_first:  # kill it mid-run: with a request in flight, hanging
            assert time.monotonic() < deadline, "the client sent nothing after its 6th reply"
            time.sleep(0.05)
        workers_pids = _children(proc.pid)
        assert len(workers_pids) == (workers if workers > 1 else 0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        in_flight = srv.count() - answer_first
        assert not (out / "predictions.jsonl").exists()
        if workers > 1:  # orphaned workers notice within 0.25 s and exit before anything is released
            time.sleep(1.5)
            assert not [p for p in workers_pids if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
        gate.set()  # release the hung handlers (their client is gone)
        first = list(answered)
        with lock:
            answered.clear()
            gate.set()
        rerun = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert len(first) == answer_first and in_flight >= 1
    # no answered request is asked again; the hung in-flight ones (never answered, never paid) are
    assert not set(first) & set(answered) and len(answered) == n_items - answer_first
    pred = read_predictions(out / "predictions.jsonl", load_rubric("mohler"), valid_only=True)
    assert len(pred) == n_items * 8 and pred["item"].nunique() == n_items
    summary = json.loads((out / "summary.json").read_text())["models"][MODEL]
    assert summary["cached_items"] == answer_first and summary["ok"] == n_items
