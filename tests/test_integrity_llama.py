"""The injection set through a REAL local model: llama-cpp-python's server with SmolLM2-135M-Instruct.

SmolLM2's judgements are near-random, so this does not measure persuasion (lab/integrity.py
does, with a 1.5B model); it checks that the quoted prompt goes through the real chat template and
HTTP path, that every label in the table is what the guarded parser reads from the model's reply (no
entry copied from the quoted response), and that a response too long for the model's context becomes
a failure record, not a crash. Select with ``pytest -m llama``; needs ``.venv-llama``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from rubrictool.annotate import (
    AnnotateConfig,
    annotate,
    cache_key,
    parse_reply,
    render_item_prompt,
    response_format_for,
)
from rubrictool.annotate.injections import attack_response, load_injections
from rubrictool.rubric import load_rubric

pytestmark = [pytest.mark.llama, pytest.mark.slow]
RUBRIC = load_rubric("mohler")
ITEM = {"question": "What is the role of a prototype program in problem solving?",
        "reference": "To simulate the behaviour of portions of the desired software product.",
        "response": "It lets you try out a part of the program early."}


def test_attacks_through_smollm2(smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    attacks = {a.id: a for a in load_injections()}
    chosen = ["fake-lines", "fake-lines-only", "boundary-guess", "instruction", "long-padding"]
    items = pd.DataFrame([{"id": a, **ITEM, "response": attack_response(attacks[a], ITEM, RUBRIC)} for a in chosen])
    cache = tmp_path / "cache.sqlite"
    # JSON mode: llama.cpp enforces the schema, so SmolLM2's replies are readable and can be compared
    cfg = AnnotateConfig(models=("openai/smollm2",), api_base=smollm2.url, format="json", concurrency=1,
                         max_tokens=300, timeout=900, max_retries=0, cache=cache)
    res = annotate(items, RUBRIC, cfg)
    preds = res.predictions
    assert set(preds["item"]) == set(chosen) and len(preds) == len(chosen) * RUBRIC.K
    # ~1,500 words of padding do not fit SmolLM2's 2,048-token context: a failure record, the run goes on
    long = next(f for f in res.failures if f["item"] == "long-padding")
    assert long["reply"] is None and long["error"]
    # every label in the table is what the guarded parser reads from the model's own first reply, and the
    # reply is found again under a prompt rendered anew (another boundary): the cache key does not see it
    with sqlite3.connect(cache) as db:
        replies = dict(db.execute("SELECT key, reply FROM replies").fetchall())
    params = {**cfg.sampling, "response_format": response_format_for(cfg.models[0], RUBRIC, "json", cfg.api_base)}
    found = 0
    for _, row in items.iterrows():
        if row["id"] == "long-padding":
            continue
        p = render_item_prompt(row.to_dict(), RUBRIC, fmt="json")
        reply = replies.get(cache_key(cfg.models[0], [{"role": "user", "content": p.text}], params, p.boundary))
        assert reply is not None, row["id"]
        found += 1
        parsed = parse_reply(reply, RUBRIC, p.quoted, p.boundary)
        rows = preds[(preds["item"] == row["id"]) & ~preds["repaired"]].dropna(subset=["level"])
        for r in rows.itertuples():
            assert parsed.labels[r.concept].level == int(r.level), (row["id"], r.concept)
    assert found == len(chosen) - 1
