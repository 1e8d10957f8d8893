"""The review loop against a REAL Label Studio (1.23.2 on 127.0.0.1, tests/support/labelstudio.py): the
trained grader as a pre-annotator, routed pushes, the anchoring check and blind-review settings, and a
reviewer in a real headless Chromium.

Reviewer labels come from the Mohler concept passes A, B and C (<data dir>/mohler-concepts): three
independent LLM annotation passes standing in for reviewers, NOT expert-validated.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import require_or_skip
from label_studio_sdk import LabelStudio
from typer.testing import CliRunner

from rubrictool import review
from rubrictool.adjudicate import AdjudicationOptions, adjudicate, run_adjudicate
from rubrictool.cli import app
from rubrictool.data import load_concept_passes
from rubrictool.errors import ReviewError
from rubrictool.grade import grader_predictions
from rubrictool.io import read_table, write_table
from rubrictool.review import LabelStudioServer
from rubrictool.review.routing import route
from tests.support.browser import artifact_path, chromium, have_chromium
from tests.support.labelstudio import signup
from tests.support.tiny_models import mohler_like_table, tiny_bert_run

pytestmark = [pytest.mark.labelstudio, pytest.mark.timeout(1200), pytest.mark.usefixtures("one_thread")]

ITEM_COLS = ["id", "question", "response", "reference", "grade"]
REVIEWERS = {"A": "anchor-a@example.com", "B": "anchor-b@example.com", "C": "anchor-c@example.com"}


@pytest.fixture(scope="module")
def conn(ls_server: LabelStudioServer) -> review.Connection:
    return ls_server.connection()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained run (LCEC on) named ``run``."""
    return tiny_bert_run(tmp_path_factory.mktemp("grader"))


@pytest.fixture(scope="module")
def passes(data_dir: Path) -> pd.DataFrame:
    return load_concept_passes(data_dir)


def _env(conn: review.Connection) -> dict[str, str]:
    return {review.ENV_URL: conn.url, review.ENV_KEY: conn.api_key}


def _project(conn: review.Connection, title: str) -> dict[str, Any]:
    proj = review.find_project(conn, title)
    assert proj is not None
    return proj


def _tasks(conn: review.Connection, title: str) -> list[dict[str, Any]]:
    body = conn.get("/api/tasks", "test", project=_project(conn, title)["id"], fields="all", page_size=1000)
    return list(body["tasks"])


def _predictions(conn: review.Connection, title: str) -> list[dict[str, Any]]:
    body = conn.get("/api/predictions", "test", project=_project(conn, title)["id"])
    return list(body.get("results", []) if isinstance(body, dict) else body)


def _result(levels: dict[str, int]) -> list[dict[str, Any]]:
    return [{"from_name": k, "to_name": "response", "type": "choices", "value": {"choices": [str(v)]}}
            for k, v in levels.items()]


# -- the trained grader as a pre-annotator ----------------------------------------------------------------------


def test_push_run_adds_one_grader_prediction_per_task_and_a_repush_adds_none(
    conn: review.Connection, run: Path, tmp_path: Path
) -> None:
    items = mohler_like_table(10, seed=3)[ITEM_COLS]
    write_table(items, tmp_path / "items.csv")
    args = ["review", "push", "--rubric", "mohler", "--items", str(tmp_path / "items.csv"), "--run", str(run),
            "--project", "grader-review", "--show-predictions"]
    res = CliRunner().invoke(app, args, env=_env(conn))
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "10 new task(s) imported, 10 prediction(s) added (models: run)" in out
    assert "reviewers see the levels of run pre-selected" in out
    proj = _project(conn, "grader-review")
    assert proj["model_version"] == "run" and review.prefilled_by(proj["label_config"]) == "run"
    want = grader_predictions(run, items)
    by_item = {i: g.set_index("concept") for i, g in want.groupby("item")}
    task_item = {t["id"]: t["data"]["item_id"] for t in _tasks(conn, "grader-review")}
    preds = _predictions(conn, "grader-review")
    assert sorted(task_item[p["task"]] for p in preds) == sorted(items["id"])  # exactly one per task
    for p in preds:
        g = by_item[task_item[p["task"]]]
        assert p["model_version"] == "run"
        assert p["score"] == pytest.approx(1 - float(g["uncertainty"].iloc[0]), abs=1e-5)  # sortable confidence
        got = {r["from_name"]: int(r["value"]["choices"][0]) for r in p["result"]}
        assert got == g["level"].astype(int).to_dict()
    # re-push: nothing new, no second prediction for the run
    again = CliRunner().invoke(app, args, env=_env(conn))
    assert again.exit_code == 0, again.output
    assert "0 new task(s) imported, 0 prediction(s) added" in " ".join(again.output.split())
    assert len(_predictions(conn, "grader-review")) == 10
    # the grader's predictions were kept for adjudicate --pre-annotations
    saved = read_table(tmp_path / "predictions-run.csv")
    assert len(saved) == 80 and set(saved["source"]) == {"model"}


def test_routed_push_imports_exactly_the_selected_items(
    conn: review.Connection, run: Path, tmp_path: Path, passes: pd.DataFrame, mohler_items: pd.DataFrame,
    mohler_rubric: Any,
) -> None:
    # uncertain: the grader's least sure 4 of 10 items
    items = mohler_like_table(10, seed=4)[ITEM_COLS]
    write_table(items, tmp_path / "items.csv")
    args = ["review", "push", "--rubric", "mohler", "--items", str(tmp_path / "items.csv"), "--run", str(run),
            "--project", "routed-uncertain", "--select", "uncertain", "--budget", "4", "--seed", "1"]
    res = CliRunner().invoke(app, args, env=_env(conn))
    assert res.exit_code == 0, res.output
    unc = grader_predictions(run, items).groupby("item")["uncertainty"].max().sort_values(ascending=False)
    on_server = {t["data"]["item_id"] for t in _tasks(conn, "routed-uncertain")}
    assert on_server == set(unc.index[:4])
    # routed by the grader, reviewed blind (the default): the grader's levels are nowhere on the server
    assert _predictions(conn, "routed-uncertain") == []
    assert all(t["predictions"] == [] for t in _tasks(conn, "routed-uncertain"))
    assert "blind review: no predictions sent" in " ".join(res.output.split())
    assert len(read_table(tmp_path / "predictions-run.csv")) == 80  # kept here for adjudicate --pre-annotations
    ranking = read_table(tmp_path / "routed-uncertain.routing.csv")
    assert len(ranking) == 10 and ranking["selected"].sum() == 4 and set(ranking["how"]) == {"uncertain"}
    assert CliRunner().invoke(app, args, env=_env(conn)).exit_code == 0  # same seed: same items, none new
    assert len(_tasks(conn, "routed-uncertain")) == 4
    # disagreement between two LLM pre-annotators (passes A and B as models)
    real = mohler_items.iloc[::97].head(12)[ITEM_COLS]
    write_table(real, tmp_path / "real.csv")
    p = passes[passes["item"].isin(real["id"]) & passes["reviewer"].isin(["A", "B"])]
    preds = p.assign(model=p["reviewer"].map({"A": "gpt-4o", "B": "llama"}), evidence="", raw_ok=True)
    write_table(preds[["item", "model", "concept", "level", "evidence", "raw_ok"]], tmp_path / "preds.csv")
    got = review.push(conn, mohler_rubric, tmp_path / "real.csv", tmp_path / "preds.csv",
                      options=review.PushOptions(project="routed-disagree", select="disagreement", budget=3,
                                                 seed=0))
    assert got.routing is not None and got.imported == 3
    expect = route(real["id"].tolist(), preds, "disagreement", 3, 0).selected
    assert {t["data"]["item_id"] for t in _tasks(conn, "routed-disagree")} == set(expect)


# -- anchoring check and blind review ------------------------------------------------------------------------------


def test_status_reports_anchoring_and_alpha_so_far_and_the_blind_settings(
    ls_server: LabelStudioServer, conn: review.Connection, passes: pd.DataFrame, mohler_items: pd.DataFrame,
    mohler_rubric: Any, tmp_path: Path,
) -> None:
    items = mohler_items.iloc[5::131].head(8)[ITEM_COLS]
    write_table(items, tmp_path / "items.csv")
    ids = items["id"].tolist()
    mine = passes[passes["item"].isin(ids)]
    pre = mine[mine["reviewer"] == "A"].assign(model="gpt-4o", evidence="", raw_ok=True)
    write_table(pre[["item", "model", "concept", "level", "evidence", "raw_ok"]], tmp_path / "preds.csv")
    review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                options=review.PushOptions(project="anchoring", show_predictions=True))
    proj = _project(conn, "anchoring")
    assert proj["show_collab_predictions"] is True and proj["show_annotation_history"] is False
    task_of = {t["data"]["item_id"]: t["id"] for t in _tasks(conn, "anchoring")}
    for r, email in REVIEWERS.items():
        ls = LabelStudio(base_url=ls_server.url, api_key=signup(ls_server.url, email, f"pw-{r}-anchor-2026"))  # type: ignore[no-untyped-call]
        for item in ids[: 8 if r != "C" else 5]:
            lv = mine[(mine["reviewer"] == r) & (mine["item"] == item)].set_index("concept")["level"].astype(int)
            ls.annotations.create(id=task_of[item], result=_result(lv.to_dict()))
    st = review.status(conn, "anchoring", mohler_rubric)
    anch = st.anchoring.set_index("concept")
    reviewed = mine[(mine["reviewer"] != "C") | mine["item"].isin(ids[:5])]
    direct = adjudicate(reviewed, mohler_rubric,
                        options=AdjudicationOptions(n_boot=0, coverage=False)).agreement["concepts"]
    ref = reviewed.merge(pre[["item", "concept", "level"]], on=["item", "concept"], suffixes=("", "_pre"))
    for key in mohler_rubric.keys:
        assert anch.loc[key, "reviews"] == 8 + 8 + 5
        assert anch.loc[key, "alpha"] == pytest.approx(direct[key]["alpha"], abs=1e-12, nan_ok=True)
        r = ref[ref["concept"] == key]
        assert anch.loc[key, "kept_gpt-4o"] == pytest.approx((r["level"] == r["level_pre"]).mean())
    text = "\n".join(st.lines())
    print(text)
    assert "anchoring check" in text and "anchored review: reviewers see the levels of gpt-4o pre-selected" in text
    # a blind push into this anchored project is refused (one α would mix both), and changes nothing
    with pytest.raises(ReviewError, match="mix blind and anchored reviews"):
        review.push(conn, mohler_rubric, tmp_path / "items.csv", tmp_path / "preds.csv",
                    options=review.PushOptions(project="anchoring"))
    assert _project(conn, "anchoring")["show_collab_predictions"] is True


# -- a reviewer in a real browser ------------------------------------------------------------------------------------


def test_a_reviewer_labels_in_headless_chromium_and_pull_returns_exactly_those_levels(
    ls_server: LabelStudioServer, conn: review.Connection, mohler_rubric: Any, passes: pd.DataFrame,
    mohler_items: pd.DataFrame, tmp_path: Path,
) -> None:
    require_or_skip(have_chromium(), "no chromium/chromedriver: apt-get install -y chromium chromium-driver "
                                     "(setup.sh --all does)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    item = mohler_items[mohler_items["id"] == "1.1.3"][ITEM_COLS]
    write_table(item, tmp_path / "item.csv")
    pre = passes[passes["item"] == "1.1.3"].query("reviewer == 'A'").assign(model="gpt-4o", evidence="", raw_ok=True)
    write_table(pre[["item", "model", "concept", "level", "evidence", "raw_ok"]], tmp_path / "preds.csv")
    res = review.push(conn, mohler_rubric, tmp_path / "item.csv", tmp_path / "preds.csv",
                      options=review.PushOptions(project="browser-review"))
    shown = review.push(conn, mohler_rubric, tmp_path / "item.csv", tmp_path / "preds.csv",
                        options=review.PushOptions(project="browser-shown", show_predictions=True),
                        state_file=tmp_path / "shown-state.json")
    task = _tasks(conn, "browser-review")[0]["id"]
    # another reviewer has already submitted (all 3s): blind review must not show it to this one
    other = signup(ls_server.url, "first-reviewer@example.com", "pw-first-reviewer-2026")
    LabelStudio(base_url=ls_server.url, api_key=other).annotations.create(  # type: ignore[no-untyped-call]
        id=task, result=_result(dict.fromkeys(mohler_rubric.keys, 3)))
    email, password = "browser-reviewer@example.com", "pw-browser-reviewer-2026"
    signup(ls_server.url, email, password)
    chosen = dict(zip(mohler_rubric.keys, [1, 2, 3, 1, 2, 3, 2, 1], strict=True))
    shot = tmp_path / "review-browser.png"
    with chromium() as d:
        d.get(f"{ls_server.url}/user/login/")
        d.find_element(By.NAME, "email").send_keys(email)
        d.find_element(By.NAME, "password").send_keys(password)
        d.find_element(By.CSS_SELECTOR, "button[type=submit], input[type=submit]").click()
        WebDriverWait(d, 120).until(lambda d: "/user/login" not in d.current_url)
        n_radios = 3 * len(mohler_rubric.keys)
        # control: with the pre-annotations shown, the label stream starts from the model's levels ...
        d.get(f"{ls_server.url}/projects/{shown.project_id}/data?labeling=1")
        WebDriverWait(d, 300).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "input[type=radio]")) == n_radios)
        WebDriverWait(d, 30).until(lambda d: any(r.is_selected()
                                                 for r in d.find_elements(By.CSS_SELECTOR, "input[type=radio]")))
        picked = [i for i, r in enumerate(d.find_elements(By.CSS_SELECTOR, "input[type=radio]")) if r.is_selected()]
        model_levels = pre.set_index("concept")["level"].astype(int)
        assert picked == [3 * k + int(model_levels[c]) - 1 for k, c in enumerate(mohler_rubric.keys)]
        shown_page = " ".join(d.find_element(By.TAG_NAME, "body").text.split())
        assert "Pre-filled by gpt-4o (a model, not a reviewer)" in shown_page  # marked as the model's
        assert "FC · Factual Correctness (level pre-filled by gpt-4o)" in shown_page
        d.save_screenshot(str(tmp_path / "review-browser-anchored.png"))
        # ... and in the blind project (pre-annotations hidden, another reviewer done) nothing is pre-selected
        d.get(f"{ls_server.url}/projects/{res.project_id}/data?labeling=1")  # the label stream
        WebDriverWait(d, 300).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "input[type=radio]")) == n_radios)
        page = d.find_element(By.TAG_NAME, "body").text
        row = item.iloc[0]
        for text in (row["question"], row["reference"], row["response"]):
            assert " ".join(str(text).split()) in " ".join(page.split())
        assert "Blind review" in page and "Pre-filled" not in page
        for c in mohler_rubric.concepts:
            assert c.definition in page and f"{c.key} · {c.name}" in page
            for ex in c.examples:  # the rubric's worked examples, with their level and anchor
                assert f"Level {ex.level} ({c.anchor(ex.level)}): “{ex.text}”" in page
            for lv in c.levels:
                assert f"{lv.value} — {lv.anchor}" in page
        radios = d.find_elements(By.CSS_SELECTOR, "input[type=radio]")
        # blind: neither the other reviewer's 3s nor the hidden pre-annotation are pre-selected
        assert not any(r.is_selected() for r in radios)
        for k, c in enumerate(mohler_rubric.concepts):
            # re-found: React re-renders
            r = d.find_elements(By.CSS_SELECTOR, "input[type=radio]")[3 * k + chosen[c.key] - 1]
            assert r.get_attribute("name") == f"{chosen[c.key]} — {c.anchor(chosen[c.key])}"
            label = r.find_element(By.XPATH, "./ancestor::label[1]")
            d.execute_script("arguments[0].scrollIntoView({block: 'center'})", label)
            label.click()
        WebDriverWait(d, 30).until(
            lambda d: sum(r.is_selected() for r in d.find_elements(By.CSS_SELECTOR,
                                                                   "input[type=radio]")) == len(chosen))
        d.save_screenshot(str(shot))
        submit = [b for b in d.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Submit"]
        assert len(submit) == 1
        submit[0].click()
        WebDriverWait(d, 120).until(lambda d: "No More Tasks" in d.find_element(By.TAG_NAME, "body").text)
    kept = artifact_path("review-browser.png")
    shutil.copyfile(shot, kept)
    shutil.copyfile(tmp_path / "review-browser-anchored.png", artifact_path("review-browser-anchored.png"))
    print(f"screenshot of the reviewer's labelling page: {kept}")
    pulled = review.pull(conn, "browser-review", tmp_path / "reviews.csv", mohler_rubric)
    mine = pulled.table[pulled.table["reviewer"] == email]
    assert dict(zip(mine["concept"], mine["level"], strict=True)) == chosen
    assert set(mine["item"]) == {"1.1.3"} and set(mine["source"]) == {"human"}
    assert pulled.counts["annotations"] == 2  # the browser reviewer's and the first reviewer's
    # and adjudicate reads it like any review file, the grader's/LLM's labels kept apart
    out = run_adjudicate(rubric="mohler", reviews=[tmp_path / "reviews.csv"], out=tmp_path / "adj",
                         options=AdjudicationOptions(n_boot=0))
    assert json.loads((tmp_path / "adj" / "agreement.json").read_text())["reviewers"] == sorted(
        [email, "first-reviewer@example.com"])
    assert len(out.table) == 1
