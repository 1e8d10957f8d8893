"""`rubrictool annotate` through litellm's real HTTP path against a scripted server on 127.0.0.1.

The server (tests/support/llm_server.py) decides each reply from the student response in the prompt, and
counts every request, so retries, cache hits and resumption are checked at the server.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import httpx
import pandas as pd
import pytest

from rubrictool.annotate import AnnotateConfig, annotate, write_outputs
from rubrictool.progress import Progress
from rubrictool.rubric import load_rubric
from rubrictool.tables import read_predictions
from tests.support.llm_server import (
    MODEL,
    MOHLER_KEYS,
    Reply,
    ScriptedLLMServer,
    Seen,
    json_reply,
    line_reply,
    make_items,
    scripted_level,
)

ROOT = Path(__file__).resolve().parent.parent


def expected_level(response: str, key: str) -> int:
    return scripted_level(response, key)


class Script:
    """Replies chosen by the tag at the end of the student response; counts per response."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n: Counter[str] = Counter()

    def __call__(self, seen: Seen) -> Reply:
        resp = seen.response
        with self.lock:
            self.n[resp] += 1
            k = self.n[resp]
        tag = resp.rsplit(" ", 1)[-1]
        good = line_reply(resp)
        if tag == "good":
            return Reply(content=good)
        if tag == "fenced":  # JSON in a code fence, with prose around it
            return Reply(content=f"Sure! Here is the annotation:\n```json\n{json_reply(resp)}\n```\nHope this helps.")
        if tag == "sloppy":  # bullets, bold, full names, odd spacing and case
            lines = []
            for key, c in zip(MOHLER_KEYS, load_rubric("mohler").concepts):
                lines.append(f"- **Concept = {c.name.upper()} ;  LABEL: {expected_level(resp, key)} ; Evidence: "
                             "\"x\"**")
            return Reply(content="Annotation:\n" + "\n".join(lines))
        if tag == "malformed":  # first reply useless, the repair round fixes it
            return Reply(content="The answer seems mostly fine to me." if not seen.is_repair else good)
        if tag == "partial":  # CC missing; the repair sends only CC
            if not seen.is_repair:
                return Reply(content="\n".join(ln for ln in good.splitlines() if not ln.startswith("concept=CC")))
            return Reply(content=f"concept=CC; label={expected_level(resp, 'CC')}; evidence=added")
        if tag == "outofrange":  # level 4 on a 1..3 scale, twice: a failure record
            return Reply(content=good.replace("concept=FC; label=" + str(expected_level(resp, "FC")),
                                              "concept=FC; label=4"))
        if tag == "ratelimit":
            return Reply(status=429, content="slow down") if k == 1 else Reply(content=good)
        if tag == "flaky":
            return Reply(status=500) if k <= 2 else Reply(content=good)
        if tag == "slow":
            return Reply(content=good, delay=9.0) if k == 1 else Reply(content=good)
        if tag == "down":
            return Reply(status=503, content="overloaded")
        return Reply(status=400, content=f"unexpected tag {tag}")


TAGS = ["good", "fenced", "sloppy", "malformed", "partial", "outofrange", "ratelimit", "flaky", "slow", "down", "good"]


def config(url: str, cache: Path | None, **kw: object) -> AnnotateConfig:
    base: dict[str, object] = {
        "models": (MODEL,), "api_base": url, "cache": cache, "concurrency": 4, "timeout": 3.0,
        "max_retries": 2, "backoff": 0.01,
    }
    base.update(kw)
    return AnnotateConfig(**base)  # type: ignore[arg-type]


# openai/ goes through the OpenAI SDK; hosted_vllm/ through litellm's own HTTP handler (less client CPU
# per call, README "LLM pre-annotation"): both must give the same table, retries and failure records.
@pytest.mark.parametrize("model", [MODEL, "hosted_vllm/scripted"])
def test_scripted_scenarios_table_failures_retries_and_cache(tmp_path: Path, mohler_rubric, model: str) -> None:  # type: ignore[no-untyped-def]
    items = make_items(TAGS)
    script = Script()
    cache = tmp_path / "cache.sqlite"
    events: list[Progress] = []
    with ScriptedLLMServer(script) as srv:
        res = annotate(items, mohler_rubric, config(srv.url, cache, models=(model,)), progress=events.append)
        first_run = srv.count()
        # a local alias has no price: the progress bars say so instead of a made-up $0.0000
        infos = [e.info for e in events if e.done > 0]
        assert infos and not any("$0.0000" in i for i in infos), infos
        assert any(i.startswith("no price ") for i in infos) and "cost unknown (no price)" in infos
        per_resp = Counter(s.response for s in srv.seen)

        pred = res.predictions
        assert len(pred) == len(items) * 8
        assert list(pred.columns[:6]) == ["item", "model", "concept", "level", "evidence", "raw_ok"]
        by_tag = {row.id: row.response.rsplit(" ", 1)[-1] for row in items.itertuples()}
        for row in pred.itertuples():
            tag = by_tag[row.item]
            resp = items.set_index("id").loc[row.item, "response"]
            if tag in ("outofrange", "down"):
                assert not row.raw_ok
                continue
            assert row.raw_ok, (tag, row)
            assert row.level == expected_level(resp, row.concept), (tag, row.concept)
        # malformed, partial, and it5, whose repair reply still failed: its rows' labels come from that reply
        assert set(pred.loc[pred.repaired, "item"]) == {"it3", "it4", "it5"}

        # failure records: the raw replies are kept, the run went on
        fails = {f["item"]: f for f in res.failures}
        assert set(fails) == {"it5", "it9"}
        assert "FC: label 4 is outside" in fails["it5"]["error"] and "concept=FC; label=4" in fails["it5"]["reply"]
        assert fails["it5"]["repair_reply"] is not None
        assert "503" in fails["it9"]["error"] or "ServiceUnavailable" in fails["it9"]["error"]
        # out of range: the other seven concepts are kept but the item is not ok
        oor = pred[pred.item == "it5"]
        assert oor.loc[oor.concept == "FC", "level"].isna().all() and oor.level.notna().sum() == 7

        # retries, counted at the server: 429 once, 500 twice, one timeout, 503 every time (1 + 2 retries)
        r = {tag: per_resp[items.response[i]] for i, tag in enumerate(TAGS) if tag != "good"}
        assert r == {"fenced": 1, "sloppy": 1, "malformed": 2, "partial": 2, "outofrange": 2,
                     "ratelimit": 2, "flaky": 3, "slow": 2, "down": 3}
        s = res.summary[model]
        assert (s.items, s.ok, s.failures, s.repaired) == (11, 9, 2, 2)
        assert not s.price_known and s.cost_usd == 0  # a local alias has no price in litellm's map
        assert s.requests == first_run and s.retries == 1 + 2 + 1 + 2
        assert s.prompt_tokens == 500 * sum(1 for x in srv.seen if x.status == 200)

        # second run: every good reply comes from the cache — only the still-failing 503 item is asked again
        res2 = annotate(items, mohler_rubric, config(srv.url, cache, models=(model,)))
        new = srv.seen[first_run:]
        assert {x.response for x in new} == {items.response[9]}
        assert res2.summary[model].cached_items == 10
        same = ["item", "concept", "level", "raw_ok"]
        pd.testing.assert_frame_equal(res.predictions[same], res2.predictions[same])

    out = write_outputs(res, tmp_path / "preds.parquet")
    back = read_predictions(out[0], mohler_rubric)
    assert len(back) == len(pred) and back.level.dropna().between(1, 3).all()
    assert len(read_predictions(out[0], mohler_rubric, valid_only=True)) == 9 * 8
    assert json.loads(out[2].read_text())["models"][model]["failures"] == 2


@pytest.mark.parametrize("model", [MODEL, "hosted_vllm/scripted"])
def test_second_run_sends_zero_requests(tmp_path: Path, mohler_rubric, model: str) -> None:  # type: ignore[no-untyped-def]
    items = make_items(["good"] * 6)
    with ScriptedLLMServer() as srv:
        cfg = config(srv.url, tmp_path / "c.sqlite", format="json", models=(model,))
        a = annotate(items, mohler_rubric, cfg)
        n = srv.count()
        b = annotate(items, mohler_rubric, cfg)
        assert n == 6 and srv.count() == n  # zero requests the second time
    assert b.summary[model].requests == 0 and b.summary[model].cached_items == 6
    assert a.predictions["level"].tolist() == b.predictions["level"].tolist()
    # JSON mode sends the schema as response_format (llama.cpp style for a local server)
    rf = srv.seen[0].body["response_format"]
    assert rf["type"] == "json_object" and rf["schema"]["required"] == MOHLER_KEYS


def test_budget_stops_before_it_is_exceeded_and_resumes(tmp_path: Path, mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    # "openai/gpt-4o" against the local server: litellm prices it as gpt-4o ($2.50 / $10 per 1M tokens)
    items = make_items(["good"] * 12)
    cache = tmp_path / "c.sqlite"
    with ScriptedLLMServer() as srv:
        cfg = config(srv.url, cache, models=("openai/gpt-4o",), concurrency=2, max_tokens=200, budget=0.02)
        res = annotate(items, mohler_rubric, cfg)
        s = res.summary["openai/gpt-4o"]
        per_request = 500 * 2.5e-6 + 100 * 10e-6
        assert res.stopped_by_budget and s.stopped_by_budget
        assert 0 < s.ok < 12 and s.requests == srv.count() == s.ok
        assert s.cost_usd == pytest.approx(per_request * s.requests)
        assert s.cost_usd <= 0.02
        # the items are taken in order and the budget refuses the next one: exactly the first s.ok are done
        assert set(res.predictions["item"]) == {f"it{i}" for i in range(s.ok)}
        assert len(res.predictions) == s.ok * len(MOHLER_KEYS) and res.predictions["raw_ok"].all()
        # a bigger budget finishes the run; nothing is paid twice
        done_first = {x.response for x in srv.seen}
        res2 = annotate(items, mohler_rubric, config(srv.url, cache, models=("openai/gpt-4o",), max_tokens=200,
                                                     budget=1.0))
        later = [x.response for x in srv.seen[s.requests:]]
        assert not (set(later) & done_first) and len(later) == 12 - s.ok
        assert res2.summary["openai/gpt-4o"].ok == 12 and not res2.stopped_by_budget


def test_budget_needs_a_known_price(tmp_path: Path, mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    from rubrictool.errors import AnnotateError

    with pytest.raises(AnnotateError, match="no price"):
        annotate(make_items(["good"]), mohler_rubric, config("http://127.0.0.1:9/v1", None, budget=1.0))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_prediction_table_round_trips_in_every_format(tmp_path: Path, mohler_rubric, suffix: str) -> None:  # type: ignore[no-untyped-def]
    items = make_items(["good", "outofrange", "good"])
    with ScriptedLLMServer(Script()) as srv:
        res = annotate(items, mohler_rubric, config(srv.url, None))
    pred_path, fail_path, summary_path = write_outputs(res, tmp_path / f"preds{suffix}")
    assert fail_path.name == "preds.failures.jsonl" and summary_path.name == "preds.summary.json"
    back = read_predictions(pred_path, mohler_rubric)
    cols = ["item", "model", "concept", "level", "raw_ok"]
    pd.testing.assert_frame_equal(back[cols].reset_index(drop=True), res.predictions[cols].reset_index(drop=True),
                                  check_dtype=False)
    assert back["level"].isna().sum() == 1 and back.loc[~back.raw_ok, "item"].unique().tolist() == ["it1"]


# ---------------------------------------------------------------------------- several client processes
def _comparable(res) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    return res.predictions.drop(columns=["cached"]).reset_index(drop=True)


def test_workers_give_the_same_result_as_one_process(tmp_path: Path, mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    items = make_items([t for t in TAGS if t != "slow"])  # every other scenario; "slow" only costs time here
    runs = {}
    for workers in (1, 2):
        with ScriptedLLMServer(Script()) as srv:
            runs[workers] = annotate(items, mohler_rubric,
                                     config(srv.url, tmp_path / f"w{workers}.sqlite", workers=workers))
            runs[workers].sent = srv.count()  # type: ignore[attr-defined]
    one, two = runs[1], runs[2]
    pd.testing.assert_frame_equal(_comparable(one), _comparable(two))  # same rows, same order
    assert sorted(f["item"] for f in one.failures) == sorted(f["item"] for f in two.failures) != []
    for field_ in ("items", "ok", "failures", "repaired", "requests", "retries", "prompt_tokens", "completion_tokens"):
        assert getattr(one.summary[MODEL], field_) == getattr(two.summary[MODEL], field_), field_
    assert one.sent == two.sent  # type: ignore[attr-defined]


def test_workers_share_the_cache_with_a_later_run(tmp_path: Path, mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    items = make_items(["good"] * 9)
    cache = tmp_path / "c.sqlite"
    shown: list[Progress] = []
    with ScriptedLLMServer() as srv:
        a = annotate(items, mohler_rubric, config(srv.url, cache, workers=3), progress=shown.append)
        assert srv.count() == 9 and a.summary[MODEL].ok == 9 and a.workers == 3
        last = [p for p in shown if p.task == MODEL][-1]
        assert (last.done, last.total) == (9, 9)  # the progress adds up the workers' counts
        b = annotate(items, mohler_rubric, config(srv.url, cache, workers=1))
        assert srv.count() == 9 and b.summary[MODEL].cached_items == 9  # every reply came from the workers' cache
    assert a.predictions["level"].tolist() == b.predictions["level"].tolist()


def test_workers_split_concurrency_exactly_and_budget_evenly() -> None:
    from rubrictool.annotate.workers import _shard_configs

    cfg = AnnotateConfig(models=(MODEL,), concurrency=5, workers=2, budget=1.0)
    subs = _shard_configs(cfg, 100)
    assert [s.concurrency for s in subs] == [3, 2] and [s.budget for s in subs] == [0.5, 0.5]
    assert all(s.workers == 1 for s in subs)
    # never more than in flight
    assert len(_shard_configs(AnnotateConfig(models=(MODEL,), concurrency=2, workers=8), 100)) == 2
    assert len(_shard_configs(AnnotateConfig(models=(MODEL,), concurrency=8, workers=8), 3)) == 3  # nor than items


def test_auto_workers_one_process_per_eight_in_flight_for_local_servers() -> None:
    from rubrictool.annotate import auto_workers

    local = "http://127.0.0.1:8080/v1"
    cpus = os.cpu_count() or 1
    assert auto_workers(AnnotateConfig(models=(MODEL,), concurrency=32), 1000) == 1  # a hosted API: seconds per reply
    assert auto_workers(AnnotateConfig(models=(MODEL,), api_base=local, concurrency=8), 1000) == 1
    assert auto_workers(AnnotateConfig(models=(MODEL,), api_base=local, concurrency=32), 1000) == min(4, 2 * cpus)
    assert auto_workers(AnnotateConfig(models=(MODEL,), api_base=local, concurrency=17), 1000) == min(3, 2 * cpus)
    assert auto_workers(AnnotateConfig(models=(MODEL,), api_base=local, concurrency=512), 10**5) == 2 * cpus
    assert auto_workers(AnnotateConfig(models=(MODEL,), api_base=local, concurrency=32), 63) == 1  # a trial run
    # an explicit --workers wins, capped by the requests in flight and the items
    assert auto_workers(AnnotateConfig(models=(MODEL,), api_base=local, concurrency=32, workers=1), 1000) == 1
    assert auto_workers(AnnotateConfig(models=(MODEL,), concurrency=4, workers=6), 1000) == 4
    assert auto_workers(AnnotateConfig(models=(MODEL,), concurrency=8, workers=6), 2) == 2


def test_workers_draw_items_as_they_free_up(tmp_path: Path, mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    """A worker stuck on a slow item takes no more: the other one does the rest (no fixed shares)."""
    items = make_items(["good"] * 16)
    first = items["response"][0]

    def responder(seen: Seen) -> Reply:
        return Reply(content=line_reply(seen.response), delay=4.0 if seen.response == first else 0.0)

    with ScriptedLLMServer(responder) as srv:
        res = annotate(items, mohler_rubric, config(srv.url, None, concurrency=2, workers=2, timeout=30))
        seen = srv.answered()
    assert res.summary[MODEL].ok == 16 and res.workers == 2
    slow = next(s for s in seen if s.response == first)
    # with fixed shares (items 0, 2, 4, ... to one process) half the items would wait for the slow one
    assert all(s.t_start < slow.t_end for s in seen), "an item was held back behind the slow one"


def test_workers_keep_the_total_budget(tmp_path: Path, mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    items = make_items(["good"] * 12)
    with ScriptedLLMServer() as srv:
        cfg = config(srv.url, tmp_path / "c.sqlite", models=("openai/gpt-4o",), concurrency=2, max_tokens=200,
                     budget=0.02, workers=2)
        res = annotate(items, mohler_rubric, cfg)
        s = res.summary["openai/gpt-4o"]
        assert res.stopped_by_budget and 0 < s.ok < 12 and s.requests == srv.count()
        assert s.cost_usd <= 0.02


def test_workers_must_be_positive(mohler_rubric) -> None:  # type: ignore[no-untyped-def]
    from rubrictool.errors import AnnotateError

    with pytest.raises(AnnotateError, match="workers must be at least 1"):
        annotate(make_items(["good"]), mohler_rubric, AnnotateConfig(models=(MODEL,), api_base="http://127.0.0.1:9",
                                                                     workers=0))


def test_a_failed_check_inside_a_responder_fails_the_test() -> None:
    """The scripted server answers 500 when its responder raises, and raises the error again on exit."""

    def responder(seen: Seen) -> Reply:
        assert seen.headers.get("authorization") == "Bearer right-key", "wrong key sent"
        return Reply(content="concept=FC; label=1; evidence=x")

    body = {"model": "scripted", "messages": [{"role": "user", "content": "Student response (r): a\n"}]}
    with pytest.raises(AssertionError, match="wrong key sent"), ScriptedLLMServer(responder) as srv:
        r = httpx.post(f"{srv.url}/chat/completions", json=body, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 500
    with ScriptedLLMServer(responder) as srv:  # the same check passing: no error on exit
        r = httpx.post(f"{srv.url}/chat/completions", json=body, headers={"Authorization": "Bearer right-key"})
        assert r.status_code == 200 and srv.errors == []
