"""A three-model LLM panel on a science course (not Mohler, grades 0-2): the discussion queue holds ties and
gaps of two levels by default (`--queue all|ties|gap2`), an item every model failed on stays unlabelled and
listed, an adjudication without --items says what it leaves out, and train names the file and the fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.io import read_table
from rubrictool.rubric.scaffold import scaffold_rubric
from tests.support.tiny_models import WORDS

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()
N = 30
# per item and concept, the three models' levels (None: that model's reply failed)
PANEL: dict[tuple[str, str], list[int | None]] = {
    ("s1", "EV"): [2, 2, 2],
    ("s1", "CL"): [1, 2, 2],  # a 2-to-1 majority one level apart: decided by the vote, not queued by default
    ("s2", "EV"): [1, 1, 3],  # a gap of two levels
    ("s2", "CL"): [1, 2, 3],  # all differ: a tie and a gap
    ("s3", "EV"): [2, 3, None],  # two replies, one level apart: a tie
    ("s4", "EV"): [None, None, None],  # every model failed on s4
    ("s4", "CL"): [None, None, None],
}


def course(tmp_path: Path) -> tuple[Path, Path, Path]:
    rubric = tmp_path / "science.yaml"
    rubric.write_text(re.sub(r"TODO[^\n]*", "what the answer shows about the experiment",
                             scaffold_rubric("science", ["EV", "CL"], levels=3, grade_min=0, grade_max=2)))
    ids = [f"s{i}" for i in range(1, N + 1)]
    items = pd.DataFrame({
        "id": ids,
        "question": ["what is the value of the node"] * N,
        "response": [" ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(6)) for i in range(N)],
        "reference": ["the value stored in the node"] * N,
        "grade": [i % 3 for i in range(N)],
    })
    items_path = tmp_path / "items.csv"
    items.to_csv(items_path, index=False)
    rows = []
    for i, item in enumerate(ids):
        for key in ("EV", "CL"):
            levels = PANEL.get((item, key), [1 + (i % 3)] * 3)
            for m, lv in zip(("m1", "m2", "m3"), levels, strict=True):
                rows.append({"item": item, "model": m, "concept": key, "level": lv, "evidence": "",
                             "raw_ok": lv is not None})
    preds = tmp_path / "predictions.jsonl"
    pd.DataFrame(rows).to_json(preds, orient="records", lines=True)
    return rubric, items_path, preds


def adjudicate(rubric: Path, preds: Path, out: Path, *extra: str) -> str:
    res = runner.invoke(app, ["adjudicate", "--rubric", str(rubric), "--reviews", str(preds), "--bootstrap", "0",
                              "--out", str(out), *extra], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def queued(out: Path) -> set[tuple[str, str]]:
    q = read_table(out / "discussion_queue.csv")
    return set(zip(q["item"].astype(str), q["concept"], strict=True))


def test_queue_rules(tmp_path: Path) -> None:
    rubric, items, preds = course(tmp_path)
    text = adjudicate(rubric, preds, tmp_path / "default", "--items", str(items))
    assert queued(tmp_path / "default") == {("s2", "EV"), ("s2", "CL"), ("s3", "EV")}
    agreement = json.loads((tmp_path / "default" / "agreement.json").read_text())
    assert agreement["adjudication"]["queue"] | {"means": ""} == {"rule": "ties,gap2", "n_cases": 3, "n_items": 2,
                                                                  "means": ""}
    assert agreement["adjudication"]["flagged"] == 4  # s1/CL is still flagged as not unanimous
    assert "discussion queue (--queue ties,gap2): 3 case(s) over 2 item(s)" in text
    assert "1 other non-unanimous label(s) decided by the vote (--queue all lists them)" in text
    # rubric diagnose still sees every disagreement (the reviewers' level pairs), queued or not
    every = read_table(tmp_path / "default" / "disagreements.csv")
    assert set(zip(every["item"].astype(str), every["concept"], strict=True)) == queued(tmp_path / "default") | {
        ("s1", "CL")}
    md = (tmp_path / "default" / "discussion_queue.md").read_text()
    assert "## Item s2" in md and "## Item s1" not in md

    adjudicate(rubric, preds, tmp_path / "all", "--items", str(items), "--queue", "all")
    assert queued(tmp_path / "all") == {("s1", "CL"), ("s2", "EV"), ("s2", "CL"), ("s3", "EV")}
    adjudicate(rubric, preds, tmp_path / "gap", "--items", str(items), "--queue", "gap2")
    assert queued(tmp_path / "gap") == {("s2", "EV"), ("s2", "CL")}
    adjudicate(rubric, preds, tmp_path / "ties", "--items", str(items), "--queue", "ties")
    assert queued(tmp_path / "ties") == {("s2", "CL"), ("s3", "EV")}

    bad = runner.invoke(app, ["adjudicate", "--rubric", str(rubric), "--reviews", str(preds), "--queue", "gap3",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and "unknown rule 'gap3'" in bad.output and "Traceback" not in bad.output


def test_an_item_every_model_failed_on_stays_unlabelled_and_listed(tmp_path: Path) -> None:
    rubric, items, preds = course(tmp_path)
    text = adjudicate(rubric, preds, tmp_path / "adj", "--items", str(items))
    table = read_table(tmp_path / "adj" / "adjudicated.csv")
    assert table["id"].astype(str).tolist() == [f"s{i}" for i in range(1, N + 1)]  # nothing dropped, items' order
    s4 = table.set_index("id").loc["s4"]
    assert pd.isna(s4["EV"]) and pd.isna(s4["CL"]) and s4["method"] == "unlabelled" and s4["n_reviewers"] == 0
    assert s4["response"] and s4["grade"] == 0  # the item's texts and grade are kept
    agreement = json.loads((tmp_path / "adj" / "agreement.json").read_text())
    assert agreement["unlabelled"]["items"] == ["s4"] and agreement["items_without_reviews"] == 1
    assert "1 item(s) have no valid label from any reviewer or model (s4)" in text


def test_no_items_is_said_and_train_names_the_file_and_the_fix(tmp_path: Path, backbone: str) -> None:
    rubric, _items, preds = course(tmp_path)
    text = adjudicate(rubric, preds, tmp_path / "llm-panel")
    assert "no --items: the adjudicated table holds the concept labels only" in text
    assert json.loads((tmp_path / "llm-panel" / "agreement.json").read_text())["items_given"] is False
    data = tmp_path / "llm-panel" / "adjudicated.csv"
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(rubric), "--backbone", backbone,
                              "--epochs", "1", "--out", str(tmp_path / "run"), "--device", "cpu"])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert str(data) in flat and "adjudicated without the item table" in flat and "--items ITEMS" in flat
    assert not (tmp_path / "run").exists()


def test_a_table_without_ids_is_named_with_the_fix(tmp_path: Path, backbone: str) -> None:
    """A spreadsheet handed to train as it is (student and question columns, no id): one line naming the file and
    `data import`, no traceback, nothing written."""
    from tests.support.quiz_course import QUIZ_RUBRIC, quiz_table

    data, rubric = tmp_path / "quiz.csv", tmp_path / "quiz.yaml"
    quiz_table().to_csv(data, index=False)
    rubric.write_text(QUIZ_RUBRIC)
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(rubric), "--backbone", backbone,
                              "--out", str(tmp_path / "run"), "--device", "cpu"])
    flat = " ".join(res.output.split())
    assert res.exit_code == 1 and "Traceback" not in res.output and "KeyError" not in res.output
    assert f"{data}: no id column" in flat and "rubrictool data import FILE" in flat
    assert not (tmp_path / "run").exists()


def test_train_skips_unlabelled_rows_and_says_how_many(tmp_path: Path, backbone: str) -> None:
    rubric, items, preds = course(tmp_path)
    adjudicate(rubric, preds, tmp_path / "adj", "--items", str(items))
    res = runner.invoke(app, ["train", "--table", str(tmp_path / "adj" / "adjudicated.csv"), "--rubric", str(rubric),
                              "--backbone", backbone, "--epochs", "1", "--max-len", "32", "--out",
                              str(tmp_path / "run"),
                              "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "skipping 1 unlabelled row(s) (no reviewer or model labelled them: s4)" in " ".join(res.output.split())
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    assert sorted(split["train"] + split["dev"] + split["test"]) == sorted(f"s{i}" for i in range(1, N + 1) if i != 4)
