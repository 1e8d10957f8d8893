"""Every label of a prediction row not marked ``repaired`` is what the item's first reply gives when parsed again,
as it is stored in the reply cache, under a prompt rendered anew (another random boundary): the invariant
tests/test_integrity_llama.py checks through a real model, here with a scripted server and each of its two
causes of failure forced.

- A repair round that still fails (the repair reply gives more labels, one of them invalid) kept the repair reply's
  labels in rows marked ``repaired`` = false: the first reply does not hold them.
- The cache stores a reply with the prompt's boundary replaced by a constant; a line carrying the boundary is dropped
  when the reply comes, but was read when the stored reply was parsed under another prompt.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from rubrictool.annotate import AnnotateConfig, annotate, cache_key, parse_reply, render_item_prompt
from rubrictool.rubric import load_rubric
from tests.support.llm_server import (
    MODEL,
    MOHLER_KEYS,
    Reply,
    ScriptedLLMServer,
    Seen,
    line_reply,
    make_items,
    prompt_boundary,
    scripted_level,
)

RUBRIC = load_rubric("mohler")


def _first_replies_hold_every_unrepaired_label(items: pd.DataFrame, preds: pd.DataFrame, cache: Path,
                                               cfg: AnnotateConfig) -> int:
    with sqlite3.connect(cache) as db:
        replies = dict(db.execute("SELECT key, reply FROM replies").fetchall())
    checked = 0
    for _, row in items.iterrows():
        p = render_item_prompt(row.to_dict(), RUBRIC, fmt="line")
        reply = replies[cache_key(MODEL, [{"role": "user", "content": p.text}], cfg.sampling, p.boundary)]
        parsed = parse_reply(reply, RUBRIC, p.quoted, p.boundary)
        rows = preds[(preds["item"] == row["id"]) & ~preds["repaired"]].dropna(subset=["level"])
        for r in rows.itertuples():
            assert r.concept in parsed.labels, (row["id"], r.concept)
            assert parsed.labels[r.concept].level == int(r.level), (row["id"], r.concept)
            checked += 1
    return checked


def _config(url: str, cache: Path) -> AnnotateConfig:
    return AnnotateConfig(models=(MODEL,), api_base=url, format="line", concurrency=1, max_retries=0, cache=cache,
                          backoff=0.01)


def test_labels_of_a_repair_that_still_failed_are_marked_repaired(tmp_path: Path) -> None:
    def responder(seen: Seen) -> Reply:
        r = seen.response
        if not seen.is_repair:  # R is missing: a repair round
            return Reply(content=line_reply(r, [k for k in MOHLER_KEYS if k != "R"]))
        # the repair gives R and every other concept, but FC at a level the rubric does not have: still a failure
        body = line_reply(r, [k for k in MOHLER_KEYS if k != "FC"])
        return Reply(content=body + "\nconcept=FC; label=9; evidence=out of range")

    items = make_items(["a", "b"])
    cache = tmp_path / "cache.sqlite"
    with ScriptedLLMServer(responder) as srv:
        cfg = _config(srv.url, cache)
        res = annotate(items, RUBRIC, cfg)
    preds = res.predictions
    r_rows = preds[preds["concept"] == "R"]
    assert r_rows["level"].notna().all() and r_rows["repaired"].all()  # R came from the repair reply: marked
    assert not preds["raw_ok"].any()
    _first_replies_hold_every_unrepaired_label(items, preds, cache, cfg)


def test_a_stored_reply_parses_as_it_did_when_it_came(tmp_path: Path) -> None:
    """The reply echoes one line with the prompt's boundary that claims another level for R: dropped when the reply
    comes, and dropped too when the stored reply is parsed under a prompt with another boundary."""

    def responder(seen: Seen) -> Reply:
        r, b = seen.response, prompt_boundary(seen.prompt)
        other = 1 if scripted_level(r, "R") != 1 else 2
        return Reply(content=line_reply(r) + f"\n[END DATA {b}] concept=R; label={other}; evidence=echo")

    items = make_items(["a", "b", "c"])
    cache = tmp_path / "cache.sqlite"
    with ScriptedLLMServer(responder) as srv:
        cfg = _config(srv.url, cache)
        res = annotate(items, RUBRIC, cfg)
    preds = res.predictions
    assert preds["raw_ok"].all() and not preds["repaired"].any()
    for item, response in zip(items["id"], items["response"], strict=True):
        level = preds[(preds["item"] == item) & (preds["concept"] == "R")]["level"].iloc[0]
        assert int(level) == scripted_level(response, "R")
    assert _first_replies_hold_every_unrepaired_label(items, preds, cache, cfg) == len(items) * RUBRIC.K
