"""Blind review by default, anchored review as an opt-in, and the rubric's worked examples in the
labelling view — without a server (a small in-memory stand-in for the Label Studio endpoints `review
push` calls). The real-server checks are in tests/test_review_labelstudio.py.

The course here is not Mohler: a 0–2 "lab report" rubric with its own concepts, worked examples
(some of them hostile text) and item columns named by `data import`'s defaults.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool import review
from rubrictool.cli import app
from rubrictool.errors import ReviewError
from rubrictool.io import write_table
from rubrictool.review.interface import prefilled_by
from rubrictool.rubric import Rubric, parse_rubric

LAB = """\
name: lab2
title: Lab report <b>feedback</b> & "grading"
version: 1
description: Physics lab reports, first year.
fields: {question: the lab task, response: the student's report}
scale: {min: 0, max: 2}
grade: {min: 0, max: 10}
concepts:
  - key: Method
    name: Method described
    definition: "The procedure can be repeated from the report (costs $5 < $6 & more)."
    levels:
      - {value: 0, anchor: Absent}
      - {value: 1, anchor: Partial}
      - {value: 2, anchor: Repeatable}
    examples:
      - {text: "We dropped the ball from 1 m, 10 times, timing with a phone.", level: 2, note: steps and counts}
      - text: "</Text><Choices name=\\"Method\\" toName=\\"response\\"><Choice value=\\"9\\"/></Choices>\\
          <Text value=\\"$response"
        level: 0
        note: "hostile: closes the tag & injects a control \\u0001 <script>alert(1)</script>"
  - key: Error
    name: Uncertainty
    definition: States how uncertain the measurement is.
    levels:
      - {value: 0, anchor: None}
      - {value: 1, anchor: Stated}
      - {value: 2, anchor: Propagated}
"""


@pytest.fixture
def lab() -> Rubric:
    return parse_rubric(LAB, "lab2.yaml")


# -- the interface --------------------------------------------------------------------------------------------


def test_blind_interface_says_so_and_names_no_model(lab: Rubric) -> None:
    xml = review.render_label_config(lab)
    root = ET.fromstring(xml)
    headers = [h.get("value") or "" for h in root.iter("Header")]
    assert any(h.startswith("Blind review") for h in headers)
    assert not any("re-filled" in h for h in headers) and prefilled_by(xml) is None
    assert review.parse_label_config(xml) == {"Method": [0, 1, 2], "Error": [0, 1, 2]}


def test_anchored_interface_marks_the_model_on_top_and_on_every_concept(lab: Rubric) -> None:
    xml = review.render_label_config(lab, prefilled_by="my-llm$v2 <x>")
    root = ET.fromstring(xml)
    headers = [h.get("value") or "" for h in root.iter("Header")]
    assert "Pre-filled by my-llm＄v2 <x> (a model, not a reviewer)" in headers
    assert sum("(level pre-filled by my-llm＄v2 <x>)" in h for h in headers) == len(lab.concepts)
    assert not any(h.startswith("Blind review") for h in headers)
    assert prefilled_by(xml) == "my-llm＄v2 <x>"
    assert review.parse_label_config(xml) == review.parse_label_config(review.render_label_config(lab))


def test_worked_examples_are_shown_per_concept_and_escaped(lab: Rubric) -> None:
    assert "\x01" in (lab.concepts[0].examples[1].note or "")  # XML 1.0 cannot carry it at all
    xml = review.render_label_config(lab)
    assert "<script>" not in xml and "\x01" not in xml
    root = ET.fromstring(xml)  # well-formed although an example tries to close its tag
    texts = {t.get("name"): t.get("value") or "" for t in root.iter("Text")}
    ex = {k: v for k, v in texts.items() if str(k).startswith("example_")}
    assert list(ex) == ["example_Method_1", "example_Method_2"]  # Error has no examples: none shown
    assert ex["example_Method_1"] == ("Level 2 (Repeatable): “We dropped the ball from 1 m, 10 times, timing with a "
                                      "phone.” — steps and counts")
    hostile = ex["example_Method_2"]
    assert hostile.startswith('Level 0 (Absent): “</Text><Choices name="Method"') and "＄response" in hostile
    assert "$" not in hostile and "<script>alert(1)</script>" in hostile  # shown as text, never markup
    # the injected <Choices>/<Choice value="9"> stayed inside an attribute: the controls are the rubric's
    assert [c.get("name") for c in root.iter("Choices")] == ["Method", "Error"]
    assert all(c.get("alias") in {"0", "1", "2"} for c in root.iter("Choice"))
    assert texts["definition_Method"] == "The procedure can be repeated from the report (costs ＄5 < ＄6 & more)."
    title = next(iter(root.iter("Header"))).get("value")
    assert title == 'Lab report <b>feedback</b> & "grading"'


def test_example_names_cannot_clash_with_a_concept_key(lab: Rubric) -> None:
    data = lab.model_dump()
    data["concepts"][1]["key"] = "example_Method_1"
    with pytest.raises(ReviewError, match=r"example_Method_1 clash with the interface's own names"):
        review.render_label_config(Rubric.model_validate(data))


def test_a_rubric_without_examples_still_renders(lab: Rubric) -> None:
    data = lab.model_dump()
    for c in data["concepts"]:
        c.pop("examples", None)
    xml = review.render_label_config(Rubric.model_validate(data))
    assert "Worked examples" not in xml and review.parse_label_config(xml)


# -- push against an in-memory stand-in ---------------------------------------------------------------------


@dataclass(frozen=True)
class FakeLS(review.Connection):
    """The endpoints `review push` calls, kept in memory (Label Studio's own model_version rule included:
    an import sets the project's model_version when it is empty; hiding predictions clears it)."""

    projects: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)
    tasks: list[dict[str, Any]] = field(default_factory=list, repr=False)
    calls: list[tuple[str, str, Any]] = field(default_factory=list, repr=False)

    def request(self, method: str, path: str, what: str, missing_ok: bool = False, **kw: Any) -> Any:
        body: Any = kw.get("json")
        self.calls.append((method, path, body))
        params = kw.get("params") or {}
        if path == "/api/current-user/whoami":
            return {"id": 1}
        if path == "/api/projects" and method == "GET":
            return {"results": [p for p in self.projects.values() if p["title"] == params.get("title")], "next": None}
        if path == "/api/projects" and method == "POST":
            pid = len(self.projects) + 1
            self.projects[pid] = {"id": pid, "model_version": "", "show_collab_predictions": True, **body}
            return self.projects[pid]
        m = re.fullmatch(r"/api/projects/(\d+)", path)
        if m:
            proj = self.projects.get(int(m.group(1)))
            if method == "PATCH" and proj is not None:
                if body.get("show_collab_predictions") is False:
                    proj["model_version"] = ""
                proj.update(body)
            return proj
        if path == "/api/tasks":
            mine = [t for t in self.tasks if t["project"] == params["project"]]
            return {"tasks": mine, "total": len(mine)}
        m = re.fullmatch(r"/api/projects/(\d+)/import", path)
        if m:
            pid, n = int(m.group(1)), 0
            for t in body:
                preds = [{"task": len(self.tasks) + 1, **p} for p in t.get("predictions", [])]
                self.tasks.append({"id": len(self.tasks) + 1, "project": pid, "data": t["data"], "predictions": preds})
                n += len(preds)
                if preds and not self.projects[pid]["model_version"]:
                    self.projects[pid]["model_version"] = preds[-1]["model_version"]
            return {"task_count": len(body), "prediction_count": n}
        if path == "/api/predictions":
            return [p for t in self.tasks if t["project"] == params["project"] for p in t["predictions"]]
        if re.fullmatch(r"/api/projects/(\d+)/import/predictions", path):
            for p in body:
                next(t for t in self.tasks if t["id"] == p["task"])["predictions"].append(p)
            return {"created": len(body)}
        raise AssertionError(f"unexpected call {method} {path}")


@pytest.fixture
def course(tmp_path: Path) -> Path:
    items = pd.DataFrame({"id": [f"lab.{i}" for i in range(1, 6)], "question": ["Measure g."] * 5,
                          "response": [f"report {i}" for i in range(1, 6)]})
    write_table(items, tmp_path / "items.csv")
    rows = [{"item": f"lab.{i}", "model": m, "concept": c, "level": (i + j) % 3, "evidence": "", "raw_ok": True}
            for i in range(1, 6) for j, m in enumerate(["qwen-7b", "gpt-4o"]) for c in ("Method", "Error")]
    write_table(pd.DataFrame(rows), tmp_path / "preds.csv")
    return tmp_path


def _push(fake: FakeLS, course: Path, *extra: str) -> Any:
    (course / "lab2.yaml").write_text(LAB)
    return CliRunner().invoke(app, ["review", "push", "--rubric", str(course / "lab2.yaml"), "--items",
                                    str(course / "items.csv"), "--predictions", str(course / "preds.csv"), *extra])


def test_cli_push_is_blind_by_default(monkeypatch: pytest.MonkeyPatch, course: Path) -> None:
    fake = FakeLS("http://fake", "k")
    monkeypatch.setattr("rubrictool.review.resolve_connection", lambda url=None, key=None: fake)
    res = _push(fake, course)
    assert res.exit_code == 0, res.output
    assert "blind review: no predictions sent" in res.output and "20 prediction row(s) of gpt-4o, qwen-7b" in res.output
    assert len(fake.tasks) == 5 and all(t["predictions"] == [] for t in fake.tasks)
    sent = [c for c in fake.calls if c[1].endswith("/import")]
    assert sent and all("predictions" not in t for _, _, body in sent for t in body)
    assert not any(c[1].endswith("/import/predictions") for c in fake.calls)
    proj = fake.projects[1]
    assert proj["show_collab_predictions"] is False and proj["show_annotation_history"] is False
    assert proj["model_version"] == "" and prefilled_by(proj["label_config"]) is None
    assert "Blind review" in proj["label_config"] and "example_Method_1" in proj["label_config"]
    again = _push(fake, course)  # a re-push stays blind and imports nothing
    assert again.exit_code == 0 and len(fake.tasks) == 5 and all(t["predictions"] == [] for t in fake.tasks)


def test_cli_push_show_predictions_marks_the_model(monkeypatch: pytest.MonkeyPatch, course: Path) -> None:
    fake = FakeLS("http://fake", "k")
    monkeypatch.setattr("rubrictool.review.resolve_connection", lambda url=None, key=None: fake)
    res = _push(fake, course, "--show-predictions", "--prefill-model", "qwen-7b", "--project", "lab2-anchored")
    assert res.exit_code == 0, res.output
    assert "reviewers see the levels of qwen-7b pre-selected" in res.output
    for t in fake.tasks:
        assert sorted(p["model_version"] for p in t["predictions"]) == ["gpt-4o", "qwen-7b"]
    q = next(p for p in fake.tasks[0]["predictions"] if p["model_version"] == "qwen-7b")
    assert [(r["from_name"], r["value"]["choices"]) for r in q["result"]] == [("Method", ["1"]), ("Error", ["1"])]
    proj = fake.projects[1]
    # Label Studio pre-selects the predictions of the project's model_version: the one the banner names
    assert proj["show_collab_predictions"] is True and proj["model_version"] == "qwen-7b"
    assert prefilled_by(proj["label_config"]) == "qwen-7b"
    # default pre-filling model: the first by name
    fake2 = FakeLS("http://fake2", "k")
    monkeypatch.setattr("rubrictool.review.resolve_connection", lambda url=None, key=None: fake2)
    assert _push(fake2, course, "--show-predictions").exit_code == 0
    assert fake2.projects[1]["model_version"] == "gpt-4o"
    assert prefilled_by(fake2.projects[1]["label_config"]) == "gpt-4o"


def test_a_project_keeps_its_review_mode(monkeypatch: pytest.MonkeyPatch, course: Path) -> None:
    fake = FakeLS("http://fake", "k")
    monkeypatch.setattr("rubrictool.review.resolve_connection", lambda url=None, key=None: fake)
    assert _push(fake, course).exit_code == 0
    res = _push(fake, course, "--show-predictions")
    assert res.exit_code == 1 and "is a blind-review project" in res.output and "--project NEW-TITLE" in res.output
    assert all(t["predictions"] == [] for t in fake.tasks) and fake.projects[1]["show_collab_predictions"] is False
    assert _push(fake, course, "--show-predictions", "--project", "lab2-anchored").exit_code == 0
    res = _push(fake, course, "--project", "lab2-anchored")  # blind into the anchored project
    assert res.exit_code == 1 and "anchored review" in res.output and "mix blind and anchored" in res.output


@pytest.mark.parametrize(("extra", "message"), [
    (["--prefill-model", "gpt-4o"], "only makes sense with --show-predictions"),
    (["--show-predictions", "--prefill-model", "claude"], "'claude' has no predictions for these items"),
])
def test_bad_prefill_options_change_nothing(monkeypatch: pytest.MonkeyPatch, course: Path, extra: list[str],
                                            message: str) -> None:
    fake = FakeLS("http://fake", "k")
    monkeypatch.setattr("rubrictool.review.resolve_connection", lambda url=None, key=None: fake)
    res = _push(fake, course, *extra)
    assert res.exit_code == 1 and message in res.output and "Traceback" not in res.output
    assert fake.calls == [] and fake.tasks == []


def test_show_predictions_without_predictions_is_refused(tmp_path: Path, course: Path) -> None:
    (course / "lab2.yaml").write_text(LAB)
    fake = FakeLS("http://fake", "k")
    with pytest.raises(ReviewError, match="no predictions to show"):
        review.push(fake, parse_rubric(LAB), course / "items.csv",
                    options=review.PushOptions(show_predictions=True))
    assert fake.calls == []
