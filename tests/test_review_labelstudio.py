"""Review against a REAL Label Studio (1.23.2, started on 127.0.0.1 by tests/support/labelstudio.py).

One server for the whole module (a copy of the session's migrated template). Each test uses its own
project title, so they stay independent on the shared server.

The reviewers' labels are the Mohler concept passes A, B and C (<data dir>/mohler-concepts) — three independent LLM
annotation passes standing in for three reviewers, NOT expert-validated. Two "models" pre-annotate
with passes A and B, so a reviewer who keeps model A's label and one who does not are both real.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from conftest import require_or_skip
from label_studio_sdk import LabelStudio
from typer.testing import CliRunner

from rubrictool import review
from rubrictool.adjudicate import AdjudicationOptions, adjudicate
from rubrictool.cli import app
from rubrictool.data import load_concept_passes
from rubrictool.errors import ReviewError
from rubrictool.io import read_table, write_table
from rubrictool.progress import Progress
from rubrictool.review import LabelStudioServer, free_port
from rubrictool.rubric import list_rubrics, load_rubric, parse_rubric, scaffold_rubric
from tests.support.labelstudio import LS_BIN, START_TIMEOUT, have_label_studio, migrated_template, signup

pytestmark = [pytest.mark.labelstudio, pytest.mark.timeout(1200)]

MODELS = {"A": "gpt-4o", "B": "llama-3.1-8b"}  # the pass each "model" pre-annotates with
REVIEWERS = {"A": "a-reviewer@example.com", "B": "b-reviewer@example.com", "C": "c-reviewer@example.com"}
ITEM_COLS = ["id", "question", "response", "reference", "grade"]
STOP_TIMEOUT = 120.0  # seconds from Ctrl-C to `review serve` exiting: SIGTERM, 30 s grace, SIGKILL


# -- inputs -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def items40(mohler_items: pd.DataFrame) -> pd.DataFrame:
    """40 Mohler items spread over the questions (every 57th answer)."""
    return mohler_items.iloc[::57].head(40)[ITEM_COLS].reset_index(drop=True)


@pytest.fixture(scope="module")
def passes(data_dir: Path) -> pd.DataFrame:
    return load_concept_passes(data_dir)


def prediction_table(passes: pd.DataFrame, item_ids: list[str]) -> pd.DataFrame:
    """A PredictionTable with two models (passes A and B); two rows are marked unusable (raw_ok false)."""
    p = passes[passes["item"].isin(item_ids) & passes["reviewer"].isin(list(MODELS))].copy()
    p["model"] = p["reviewer"].map(MODELS)
    p["evidence"] = "quoted from the response"
    p["raw_ok"] = True
    bad = (p["item"] == item_ids[1]) & (p["concept"] == "FC") & (p["model"] == "gpt-4o")
    bad |= (p["item"] == item_ids[2]) & (p["model"] == "llama-3.1-8b") & (p["concept"] == "CC")
    p.loc[bad, "raw_ok"] = False
    p.loc[bad, "level"] = 1  # garbage that must not reach the server
    return p[["item", "model", "concept", "level", "evidence", "raw_ok"]].reset_index(drop=True)


@pytest.fixture(scope="module")
def conn(ls_server: LabelStudioServer) -> review.Connection:
    return ls_server.connection()


def _rows(body: Any) -> list[Any]:
    return list(body.get("results", [])) if isinstance(body, dict) else list(body or [])


def server_tasks(conn: review.Connection, title: str) -> list[dict[str, Any]]:
    proj = review.find_project(conn, title)
    assert proj is not None
    body = conn.get("/api/tasks", "test", project=proj["id"], fields="all", page_size=1000)
    return list(body["tasks"])


# -- the interface ----------------------------------------------------------------------------------------


def _rubrics() -> list[Any]:
    cases = [pytest.param(p, id=p.stem) for p in list_rubrics()]
    return cases + [pytest.param("scaffold", id="rubric-new")]


@pytest.mark.parametrize("which", _rubrics())
def test_generated_interface_is_accepted(conn: review.Connection, tmp_path: Path, which: Any) -> None:
    if which == "scaffold":  # what `rubric new` writes for a new course
        rubric = parse_rubric(scaffold_rubric("cs101", ["FC", "Clarity"], levels=4))
    else:
        rubric = load_rubric(which)
    items = pd.DataFrame({
        "id": ["q1.a", "q1.b"], "question": ["What is a stack?", "Why $5 ?"], "response": ["LIFO list", "cost & <b>"],
        "reference": ["A LIFO structure", "ref"], "context": ["Lecture 3", None],
    })
    write_table(items, tmp_path / "items.jsonl")
    res = review.push(conn, rubric, tmp_path / "items.jsonl",
                      options=review.PushOptions(project=f"iface-{rubric.name}"))
    assert res.created and res.imported == 2
    proj = review.find_project(conn, f"iface-{rubric.name}")
    assert proj is not None
    assert proj["label_config"].strip() == review.render_label_config(rubric).strip()
    assert review.parse_label_config(proj["label_config"]) == {c.key: c.values for c in rubric.concepts}
    # the server parsed one choices control per concept, each with every level (as stored aliases)
    parsed = proj["parsed_label_config"]
    assert sorted(k for k, v in parsed.items() if v["type"] == "Choices") == sorted(rubric.keys)
    for c in rubric.concepts:
        assert parsed[c.key]["labels"] == [str(v) for v in c.values]
        assert [a["value"] for a in parsed[c.key]["labels_attrs"].values()] == [
            f"{lv.value} — {lv.anchor}" for lv in c.levels  # every anchor is visible to the reviewer
        ]
    data = server_tasks(conn, f"iface-{rubric.name}")[1]["data"]
    assert data["item_id"] == "q1.b" and data["response"] == "cost & <b>"
    if "context" in rubric.fields:
        assert data["context"] == ""  # a missing context is sent as an empty string


# -- push ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushed(conn: review.Connection, mohler_rubric: Any, items40: pd.DataFrame, passes: pd.DataFrame,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Push 30 items, push again, add 10 items and push again (the review project of this module).

    Anchored review (``show_predictions``), so the tests below can check the predictions on the server
    and the reviews that changed them; blind review (the default) is tested on its own project."""
    d = tmp_path_factory.mktemp("push")
    ids = items40["id"].tolist()
    write_table(prediction_table(passes, ids), d / "predictions.csv")
    write_table(items40.head(30), d / "items.jsonl")
    seen: list[tuple[int, int | None]] = []
    first = review.push(conn, mohler_rubric, d / "items.jsonl", d / "predictions.csv",
                        options=review.PushOptions(batch_size=8, show_predictions=True),
                        progress=lambda p: seen.append((p.done, p.total)))
    again = review.push(conn, mohler_rubric, d / "items.jsonl", d / "predictions.csv",
                        options=review.PushOptions(show_predictions=True))
    write_table(items40, d / "items.jsonl")
    added = review.push(conn, mohler_rubric, d / "items.jsonl", d / "predictions.csv",
                        options=review.PushOptions(show_predictions=True))
    return {"dir": d, "first": first, "again": again, "added": added, "progress": seen, "ids": ids}


def test_push_creates_imports_and_never_duplicates(conn: review.Connection, pushed: dict[str, Any]) -> None:
    first, again, added = pushed["first"], pushed["again"], pushed["added"]
    assert first.created and first.title == "mohler-review" and first.imported == 30
    assert first.other_predictions == 10 * 2 * 8 and added.other_predictions == 0
    assert first.predictions == 60 and first.models == ["gpt-4o", "llama-3.1-8b"]
    assert pushed["progress"][-1] == (30, 30) and len(pushed["progress"]) == 1 + 4  # 0/30, then 4 batches of <= 8
    assert not again.created and again.project_id == first.project_id and again.imported == 0 and again.already == 30
    assert added.imported == 10 and added.already == 30 and added.project_id == first.project_id
    tasks = server_tasks(conn, "mohler-review")
    item_ids = [t["data"]["item_id"] for t in tasks]
    assert sorted(item_ids) == sorted(pushed["ids"]) and len(set(item_ids)) == 40
    state = (pushed["dir"] / review.STATE_NAME).read_text()
    assert str(first.project_id) in state and conn.api_key not in state
    # anchored: Label Studio pre-selects the predictions of the project's model_version, which the banner names
    proj = review.find_project(conn, "mohler-review")
    assert proj is not None and proj["show_collab_predictions"] is True and proj["model_version"] == "gpt-4o"
    assert first.prefill_model == "gpt-4o" and review.prefilled_by(proj["label_config"]) == "gpt-4o"
    assert "(level pre-filled by gpt-4o)" in proj["label_config"]


def test_blind_push_sends_no_predictions(conn: review.Connection, mohler_rubric: Any, items40: pd.DataFrame,
                                         passes: pd.DataFrame, tmp_path: Path) -> None:
    """The default: a task fetched back through the API has no predictions, whatever --predictions held."""
    items = items40.head(8)
    write_table(items, tmp_path / "items.csv")
    write_table(prediction_table(passes, items["id"].tolist()), tmp_path / "preds.csv")
    res = review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                      options=review.PushOptions(project="blind"))
    # two rows are raw_ok false
    assert res.blind and res.imported == 8 and res.predictions == 0 and res.kept_rows == 8 * 2 * 8 - 2
    assert "blind review: no predictions sent" in res.summary()
    tasks = server_tasks(conn, "blind")
    assert len(tasks) == 8 and all(t["predictions"] == [] for t in tasks)
    assert all(t["total_predictions"] == 0 for t in tasks)
    proj = review.find_project(conn, "blind")
    assert proj is not None
    assert _rows(conn.get("/api/predictions", "test", project=proj["id"])) == []
    assert proj["show_collab_predictions"] is False and proj["show_annotation_history"] is False
    assert not proj["model_version"] and review.prefilled_by(proj["label_config"]) is None
    assert "Blind review" in proj["label_config"]
    # one task as a reviewer's label stream gets it: no predictions, nothing pre-selected
    one = conn.get(f"/api/tasks/{tasks[0]['id']}", "test")
    assert one["predictions"] == [] and one["annotations"] == []
    # a re-push stays blind; asking for anchored review in this project is refused before any change
    again = review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                        options=review.PushOptions(project="blind"))
    assert again.imported == 0 and again.predictions == 0
    with pytest.raises(ReviewError, match="is a blind-review project"):
        review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                    options=review.PushOptions(project="blind", show_predictions=True))
    assert all(t["predictions"] == [] for t in server_tasks(conn, "blind"))
    assert _rows(conn.get("/api/predictions", "test", project=proj["id"])) == []


def test_anchored_interface_with_examples_is_accepted(conn: review.Connection, mohler_rubric: Any,
                                                      items40: pd.DataFrame, passes: pd.DataFrame,
                                                      tmp_path: Path) -> None:
    """--show-predictions with --prefill-model: the server stores the banner naming the model, pre-selects
    that model's predictions (model_version), and shows the rubric's worked examples."""
    items = items40.head(3)
    write_table(items, tmp_path / "items.csv")
    write_table(prediction_table(passes, items["id"].tolist()), tmp_path / "preds.csv")
    res = review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                      options=review.PushOptions(project="anchored-llama", show_predictions=True,
                                                 prefill_model="llama-3.1-8b"))
    assert res.prefill_model == "llama-3.1-8b" and res.predictions == 6
    proj = review.find_project(conn, "anchored-llama")
    assert proj is not None and proj["model_version"] == "llama-3.1-8b" and proj["show_collab_predictions"] is True
    assert proj["label_config"].strip() == review.render_label_config(mohler_rubric,
                                                                      prefilled_by="llama-3.1-8b").strip()
    parsed = proj["parsed_label_config"]
    assert "example_FC_1" in parsed or "example_FC_1" in proj["label_config"]
    with pytest.raises(ReviewError, match="anchored review"):  # blind review into an anchored project
        review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                    options=review.PushOptions(project="anchored-llama"))


def test_predictions_are_one_per_model_without_unusable_rows(
    conn: review.Connection, pushed: dict[str, Any], passes: pd.DataFrame
) -> None:
    by_item = {t["data"]["item_id"]: t for t in server_tasks(conn, "mohler-review")}
    ids = pushed["ids"]
    for item in (ids[0], ids[1], ids[2], ids[35]):
        preds = {p["model_version"]: p for p in by_item[item]["predictions"]}
        assert sorted(preds) == ["gpt-4o", "llama-3.1-8b"]
        for pass_, model in MODELS.items():
            got = {r["from_name"]: int(r["value"]["choices"][0]) for r in preds[model]["result"]}
            want = passes[(passes["item"] == item) & (passes["reviewer"] == pass_)].set_index("concept")["level"]
            skip = {"gpt-4o": (ids[1], "FC"), "llama-3.1-8b": (ids[2], "CC")}[model]
            expected = {k: int(v) for k, v in want.items() if (item, k) != skip}
            assert got == expected


def test_push_without_state_file_finds_the_project_by_title(
    conn: review.Connection, mohler_rubric: Any, pushed: dict[str, Any]
) -> None:
    d = pushed["dir"]
    (d / review.STATE_NAME).unlink()
    res = review.push(conn, mohler_rubric, d / "items.jsonl", d / "predictions.csv",
                      options=review.PushOptions(show_predictions=True))
    assert not res.created and res.project_id == pushed["first"].project_id and res.imported == 0
    assert len(server_tasks(conn, "mohler-review")) == 40


def test_a_model_added_later_is_pushed_once_to_existing_tasks(
    conn: review.Connection, mohler_rubric: Any, items40: pd.DataFrame, passes: pd.DataFrame, tmp_path: Path
) -> None:
    items = items40.head(6)
    write_table(items, tmp_path / "items.csv")
    preds = prediction_table(passes, items["id"].tolist())
    write_table(preds[preds["model"] == "gpt-4o"], tmp_path / "preds.csv")
    first = review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                        options=review.PushOptions(project="late-model", show_predictions=True))
    assert first.imported == 6 and first.predictions == 6
    write_table(preds, tmp_path / "preds.csv")  # llama annotated the items afterwards
    later = review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                        options=review.PushOptions(project="late-model", show_predictions=True))
    assert later.imported == 0 and later.predictions == 6
    again = review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                        options=review.PushOptions(project="late-model", show_predictions=True))
    assert again.imported == 0 and again.predictions == 0
    for t in server_tasks(conn, "late-model"):
        assert sorted(p["model_version"] for p in t["predictions"]) == ["gpt-4o", "llama-3.1-8b"]
        llama = next(p for p in t["predictions"] if p["model_version"] == "llama-3.1-8b")
        want = passes[(passes["item"] == t["data"]["item_id"]) & (passes["reviewer"] == "B")]
        got = {r["from_name"]: int(r["value"]["choices"][0]) for r in llama["result"]}
        skip = "CC" if t["data"]["item_id"] == items["id"].iloc[2] else None  # the raw_ok=false row
        assert got == {str(k): int(v) for k, v in zip(want["concept"], want["level"]) if k != skip}
        assert [r["from_name"] for r in llama["result"]] == [k for k in mohler_rubric.keys if k in got]


def test_interrupted_push_resumes_without_duplicates(
    conn: review.Connection, mohler_rubric: Any, items40: pd.DataFrame, tmp_path: Path
) -> None:
    write_table(items40, tmp_path / "items.csv")
    calls = []

    def stop_after_two_batches(p: Progress) -> None:
        calls.append(p.done)
        if len(calls) == 3:  # 0/40, then two batches of 7
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        review.push(conn, mohler_rubric, tmp_path / "items.csv",
                    options=review.PushOptions(project="interrupted", batch_size=7),
                    progress=stop_after_two_batches)
    assert len(server_tasks(conn, "interrupted")) == 14
    res = review.push(conn, mohler_rubric, tmp_path / "items.csv",
                      options=review.PushOptions(project="interrupted", batch_size=7))
    assert res.already == 14 and res.imported == 26
    assert sorted(t["data"]["item_id"] for t in server_tasks(conn, "interrupted")) == sorted(items40["id"])


# -- reviews -----------------------------------------------------------------------------------------------


def _result(labels: dict[str, int]) -> list[dict[str, Any]]:
    return [{"from_name": k, "to_name": "response", "type": "choices", "value": {"choices": [str(v)]}}
            for k, v in labels.items()]


@pytest.fixture(scope="module")
def reviewed(ls_server: LabelStudioServer, conn: review.Connection, pushed: dict[str, Any],
             passes: pd.DataFrame) -> dict[str, Any]:
    """Three reviewers (own accounts, own tokens) review the project with the A/B/C labels.

    Items 0–23: A and B review; C reviews 0–19, skips (cancels) item 20, leaves a draft on 22 and
    never opens 21–23. Items 24–39 stay unreviewed. A first submits wrong labels for item 0, then
    the real ones (the later annotation counts).
    """
    tokens = {r: signup(ls_server.url, email, f"pw-{r}-reviewer-2026") for r, email in REVIEWERS.items()}
    task_of = {t["data"]["item_id"]: t["id"] for t in server_tasks(conn, "mohler-review")}
    ids: list[str] = pushed["ids"]
    wide: dict[tuple[str, str], dict[str, int]] = {}
    for rec in passes[passes["item"].isin(ids[:24])].to_dict(orient="records"):
        wide.setdefault((str(rec["reviewer"]), str(rec["item"])), {})[str(rec["concept"])] = int(rec["level"])
    plan = {"A": ids[:24], "B": ids[:24], "C": ids[:20]}
    for r, todo in plan.items():
        ls = LabelStudio(base_url=ls_server.url, api_key=tokens[r])  # type: ignore[no-untyped-call]
        if r == "A":
            ls.annotations.create(id=task_of[ids[0]], result=_result(dict.fromkeys(wide[("A", ids[0])], 1)),
                                  lead_time=3.0)
        for n, item in enumerate(todo):
            ls.annotations.create(id=task_of[item], result=_result(wide[(r, item)]), lead_time=10.0 + n)
    c = LabelStudio(base_url=ls_server.url, api_key=tokens["C"])  # type: ignore[no-untyped-call]
    c.annotations.create(id=task_of[ids[20]], result=[], was_cancelled=True)
    draft = httpx.post(f"{ls_server.url}/api/tasks/{task_of[ids[22]]}/drafts", timeout=60,
                       headers={"Authorization": f"Token {tokens['C']}"}, json={"result": _result({"FC": 1})})
    assert draft.status_code == 201, draft.text
    expected = passes[
        (passes["reviewer"].isin(["A", "B"]) & passes["item"].isin(ids[:24]))
        | ((passes["reviewer"] == "C") & passes["item"].isin(ids[:20]))
    ]
    return {"plan": plan, "expected": expected.reset_index(drop=True), "tokens": tokens}


def test_pull_writes_the_review_table(conn: review.Connection, reviewed: dict[str, Any], mohler_rubric: Any,
                                      tmp_path: Path) -> None:
    res = review.pull(conn, "mohler-review", tmp_path / "reviews.csv", mohler_rubric)
    got = read_table(tmp_path / "reviews.csv")  # what adjudicate will read
    assert list(got.columns[:7]) == ["item", "reviewer", "concept", "level", "source", "lead_time", "annotation"]
    assert {"differs_gpt-4o", "differs_llama-3.1-8b"} <= set(got.columns)
    assert set(got["source"]) == {"human"} and set(got["reviewer"]) == set(REVIEWERS.values())
    want = reviewed["expected"].assign(reviewer=lambda d: d["reviewer"].map(REVIEWERS))
    key = ["item", "reviewer", "concept"]
    merged = got.merge(want[[*key, "level"]], on=key, how="outer", suffixes=("", "_file"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    assert (merged["level"] == merged["level_file"]).all()  # A's corrected labels, not the first (all 1s) ones
    assert res.counts["annotations"] == 24 + 24 + 20 and res.counts["cancelled"] == 1
    assert res.counts["superseded"] == 1
    c20 = got[(got["item"] == reviewed["plan"]["A"][20])]
    assert set(c20["reviewer"]) == {REVIEWERS["A"], REVIEWERS["B"]}  # C's skip is not a review
    a0 = got[(got["reviewer"] == REVIEWERS["A"]) & (got["item"] == reviewed["plan"]["A"][0])]
    assert (a0["lead_time"] == 10.0).all()  # the later annotation
    # differs_<model>: A's reviews match the model that used pass A, except where that model had no label
    a = got[got["reviewer"] == REVIEWERS["A"]]
    assert not a["differs_gpt-4o"].fillna(False).astype(bool).any()
    missing = a[a["differs_gpt-4o"].isna()]
    assert missing[["item", "concept"]].values.tolist() == [[reviewed["plan"]["A"][1], "FC"]]


def test_pull_then_adjudicate_equals_adjudicating_the_files(
    conn: review.Connection, reviewed: dict[str, Any], mohler_rubric: Any, tmp_path: Path
) -> None:
    """The same A/B/C labels, through Label Studio or straight from the files, give the same consensus and α."""
    review.pull(conn, "mohler-review", tmp_path / "reviews.csv", mohler_rubric)
    via_ls = adjudicate(read_table(tmp_path / "reviews.csv"), mohler_rubric,
                        options=AdjudicationOptions(n_boot=50, coverage=False))
    direct = adjudicate(reviewed["expected"], mohler_rubric,
                        options=AdjudicationOptions(n_boot=50, coverage=False))
    cols = ["id", *mohler_rubric.keys]
    a = via_ls.table[cols].sort_values("id").reset_index(drop=True)
    b = direct.table[cols].sort_values("id").reset_index(drop=True)
    assert len(a) == 24
    pd.testing.assert_frame_equal(a, b)
    for key in mohler_rubric.keys:
        ca, cb = via_ls.agreement["concepts"][key], direct.agreement["concepts"][key]
        assert ca["alpha"] == pytest.approx(cb["alpha"], abs=1e-12)
        assert ca["n_labels"] == cb["n_labels"] == 24 * 2 + 20


def test_cli_adjudicate_from_label_studio(conn: review.Connection, reviewed: dict[str, Any], mohler_rubric: Any,
                                         tmp_path: Path) -> None:
    env = {review.ENV_URL: conn.url, review.ENV_KEY: conn.api_key}
    res = CliRunner().invoke(app, ["adjudicate", "--from-label-studio", "mohler-review", "--rubric", "mohler",
                                   "--bootstrap", "20", "--out", str(tmp_path / "adj")], env=env)
    assert res.exit_code == 0, res.output
    pulled = read_table(tmp_path / "adj" / "reviews_label_studio.csv")
    assert len(pulled) == (24 + 24 + 20) * 8
    table = read_table(tmp_path / "adj" / "adjudicated.csv")
    direct = adjudicate(reviewed["expected"], mohler_rubric,
                        options=AdjudicationOptions(n_boot=20, coverage=False))
    cols = ["id", *mohler_rubric.keys]
    pd.testing.assert_frame_equal(
        table[cols].astype({"id": str}).sort_values("id").reset_index(drop=True),
        direct.table[cols].sort_values("id").reset_index(drop=True), check_dtype=False,
    )
    import json

    agreement = json.loads((tmp_path / "adj" / "agreement.json").read_text())
    for key in mohler_rubric.keys:
        assert agreement["concepts"][key]["alpha"] == pytest.approx(direct.agreement["concepts"][key]["alpha"],
                                                                    abs=1e-12)


def test_status_counts_reviews_skips_and_changes(conn: review.Connection, reviewed: dict[str, Any],
                                                 passes: pd.DataFrame, pushed: dict[str, Any]) -> None:
    st = review.status(conn, "mohler-review")
    assert st.tasks == 40 and st.max_annotations == 3
    assert st.reviews_per_task == {0: 16, 1: 0, 2: 4, 3: 20}
    per = st.per_reviewer.set_index("reviewer")
    assert per.loc[REVIEWERS["A"], "reviews"] == 24 and per.loc[REVIEWERS["C"], "reviews"] == 20
    assert per.loc[REVIEWERS["C"], "skipped"] == 1 and per.loc[REVIEWERS["B"], "skipped"] == 0
    # expected changes, computed from the files: a review changed model m's labels if any concept differs
    preds = prediction_table(passes, pushed["ids"])
    preds = preds[preds["raw_ok"]]
    exp = reviewed["expected"].merge(preds, on=["item", "concept"], suffixes=("", "_pred"))
    exp["diff"] = exp["level"] != exp["level_pred"]
    for model in MODELS.values():
        e = exp[exp["model"] == model]
        row = st.changed.set_index("model").loc[model]
        assert row["labels"] == len(e) and row["labels_changed"] == int(e["diff"].sum())
        assert row["reviews"] == 68
        assert row["reviews_changed"] == int(e.groupby(["item", "reviewer"])["diff"].any().sum())
    gpt: Any = st.changed.set_index("model").loc["gpt-4o"]
    assert gpt["labels_changed"] > 0  # B and C disagree with pass A somewhere


# -- bad cases -------------------------------------------------------------------------------------------------


def test_server_down_is_one_clear_message(mohler_rubric: Any, items40: pd.DataFrame, tmp_path: Path) -> None:
    write_table(items40, tmp_path / "items.csv")
    down = review.Connection(f"http://127.0.0.1:{free_port()}", "0" * 40, timeout=5)
    with pytest.raises(ReviewError, match="cannot reach Label Studio at ") as err:
        review.push(down, mohler_rubric, tmp_path / "items.csv")
    assert "is the server running?" in (err.value.hint or "") and "--url" in (err.value.hint or "")
    with pytest.raises(ReviewError, match="cannot reach"):
        review.status(down, "mohler-review")
    assert not (tmp_path / review.STATE_NAME).exists()


def test_wrong_token_is_refused_and_never_shown(conn: review.Connection, mohler_rubric: Any, items40: pd.DataFrame,
                                                tmp_path: Path) -> None:
    write_table(items40, tmp_path / "items.csv")
    bad = review.Connection(conn.url, "f" * 40)
    with pytest.raises(ReviewError, match="refused the API key") as e:
        review.push(bad, mohler_rubric, tmp_path / "items.csv",
                    options=review.PushOptions(project="never-made"))
    assert "f" * 40 not in str(e.value) and "f" * 40 not in repr(bad)
    assert not (tmp_path / review.STATE_NAME).exists()
    assert review.find_project(conn, "never-made") is None


def test_a_personal_access_token_is_exchanged_for_an_access_token(ls_server: LabelStudioServer) -> None:
    legacy = signup(ls_server.url, "pat-user@example.com", "pw-pat-user-2026")
    pat = httpx.post(f"{ls_server.url}/api/token/", headers={"Authorization": f"Token {legacy}"},
                     timeout=60).json()["token"]
    assert pat.count(".") == 2  # a JWT refresh token, as Label Studio's UI hands out by default
    c = review.Connection(ls_server.url, pat)
    assert c.get("/api/current-user/whoami", "test")["email"] == "pat-user@example.com"
    with pytest.raises(ReviewError, match="refused the personal access token") as e:
        review.Connection(ls_server.url, pat[:-4] + "AAAA").get("/api/current-user/whoami", "test")
    assert pat[:-4] not in str(e.value)


def test_unknown_project(conn: review.Connection) -> None:
    with pytest.raises(ReviewError, match="no project 'no-such-project'"):
        review.status(conn, "no-such-project")
    with pytest.raises(ReviewError, match="no project '987654'"):
        review.pull(conn, "987654")


def test_rubric_mismatch_is_refused_before_any_import(conn: review.Connection, mohler_rubric: Any,
                                                       items40: pd.DataFrame, tmp_path: Path) -> None:
    write_table(items40.head(3), tmp_path / "items.csv")
    review.push(conn, mohler_rubric, tmp_path / "items.csv", options=review.PushOptions(project="mismatch"))
    data = mohler_rubric.model_dump()
    data["concepts"] = data["concepts"][:-1]  # FR removed from the rubric
    fewer = type(mohler_rubric).model_validate(data)
    write_table(items40.head(6), tmp_path / "items.csv")
    with pytest.raises(ReviewError, match="does not match rubric mohler .*concepts not in the rubric: FR"):
        review.push(conn, fewer, tmp_path / "items.csv", options=review.PushOptions(project="mismatch"))
    assert len(server_tasks(conn, "mismatch")) == 3
    with pytest.raises(ReviewError, match="does not match"):
        review.pull(conn, "mismatch", rubric=fewer)


# -- the CLI ---------------------------------------------------------------------------------------------------


def test_cli_push_status_pull(conn: review.Connection, items40: pd.DataFrame, passes: pd.DataFrame,
                              tmp_path: Path) -> None:
    write_table(items40.head(5), tmp_path / "items.csv")
    write_table(prediction_table(passes, items40["id"].tolist()[:5]), tmp_path / "preds.jsonl")
    env = {review.ENV_URL: conn.url, review.ENV_KEY: conn.api_key}
    runner = CliRunner()
    args = ["review", "push", "--rubric", "mohler", "--items", str(tmp_path / "items.csv"),
            "--predictions", str(tmp_path / "preds.jsonl"), "--project", "cli-review", "--max-annotations", "2"]
    res = runner.invoke(app, args, env=env)
    assert res.exit_code == 0, res.output
    assert "5 new task(s)" in res.output and conn.api_key not in res.output
    proj = review.find_project(conn, "cli-review")
    assert proj is not None and proj["maximum_annotations"] == 2 and len(server_tasks(conn, "cli-review")) == 5
    res = runner.invoke(app, args, env=env)
    assert res.exit_code == 0 and "0 new task(s)" in res.output and len(server_tasks(conn, "cli-review")) == 5
    res = runner.invoke(app, ["review", "status", "-p", "cli-review"], env=env)
    assert res.exit_code == 0 and "0 review(s): 5" in res.output, res.output
    res = runner.invoke(app, ["review", "pull", "-p", "cli-review", "-r", "mohler", "-o", str(tmp_path / "r.parquet")],
                        env=env)
    assert res.exit_code == 0, res.output
    assert len(read_table(tmp_path / "r.parquet")) == 0
    res = runner.invoke(app, ["review", "status", "-p", "cli-review", "--api-key", "e" * 40], env=env)
    assert res.exit_code == 1 and "refused the API key" in res.output and "e" * 40 not in res.output


# -- serve -----------------------------------------------------------------------------------------------------


@pytest.mark.timeout(START_TIMEOUT + STOP_TIMEOUT + 300)
def test_serve_runs_on_loopback_with_a_private_token_and_stops_on_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(review.ENV_URL, raising=False)
    monkeypatch.delenv(review.ENV_KEY, raising=False)
    require_or_skip(have_label_studio(), f"Label Studio server not installed ({LS_BIN} missing)")
    import shutil

    folder = tmp_path / "work" / ".rubrictool" / "label-studio"
    shutil.copytree(migrated_template(), folder)
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop(review.ENV_KEY, None)
    env.pop(review.ENV_URL, None)
    proc = subprocess.Popen(
        # as a shell starts `rubrictool review serve &`: SIGINT ignored (`trap '' INT`); serve must still stop on it
        ["bash", "-c", "trap '' INT; exec \"$@\"", "serve",
         sys.executable, "-m", "rubrictool.cli", "review", "serve", "--port", str(port), "--label-studio-bin",
         str(LS_BIN)],
        cwd=tmp_path / "work", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    out = ""
    try:
        deadline = time.monotonic() + START_TIMEOUT  # > serve's own 600 s, so its message surfaces first
        assert proc.stdout is not None
        while "running at" not in out and time.monotonic() < deadline and proc.poll() is None:
            out += proc.stdout.readline()
        assert f"running at http://127.0.0.1:{port}" in out, out
        out += proc.stdout.readline() + proc.stdout.readline()
        token_file = folder / "admin-token"
        assert (token_file.stat().st_mode & 0o777) == 0o600 and (folder / "admin-password").stat().st_mode & 0o077 == 0
        token = token_file.read_text().strip()
        assert token not in out and str(token_file) in out
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()["status"] == "UP"
        # the library finds the running server from its folder, token included
        c = review.resolve_connection(folder=folder)
        assert c.url == f"http://127.0.0.1:{port}"
        assert c.get("/api/current-user/whoami", "t")["email"] == review.ADMIN_EMAIL
        with socket.socket() as s:  # loopback only: not on the machine's other addresses
            s.settimeout(2)
            other = socket.gethostbyname(socket.gethostname())
            if not other.startswith("127."):
                assert s.connect_ex((other, port)) != 0
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        # Label Studio stops slowly on loaded cores: serve sends SIGTERM, waits 30 s, then SIGKILLs it, so
        # a healthy stop takes under a minute; a generous bound still fails a serve that hangs
        t0 = time.monotonic()
        try:
            rest, _ = proc.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log = folder / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else "no server log"
            pytest.fail(f"`review serve` did not stop within {STOP_TIMEOUT:.0f} s of Ctrl-C; output: {out!r}; "
                        f"server log tail: {tail}")
        assert proc.returncode == 0, f"exit {proc.returncode} after {time.monotonic() - t0:.0f} s: {rest}"
        assert "Label Studio stopped" in rest
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert not (folder / "server.json").exists()
        assert list(home.iterdir()) == []  # nothing written to the home directory
    finally:
        if proc.poll() is None:  # a failed test: SIGTERM lets serve stop its Label Studio (own session) too
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
