"""What the rubric cannot see: the grade ceiling of the adjudicated levels, the named boundaries, contrasting
pairs, and --suggest against a scripted OpenAI-compatible server (a proposal that validates is written as a
diff; one that does not is reported, not written)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.io import read_table
from rubrictool.report.ceiling import contrast_pairs, grade_ceiling
from rubrictool.rubric import load_rubric, parse_rubric
from tests.support.llm_server import MODEL, Reply, ScriptedLLMServer, Seen

runner = CliRunner()

# A chemistry-lab course, not Mohler: two criteria on levels 1..3, grades 0..3. Grade 1 or 2 turns on whether the
# answer gives units, which no concept captures: the 1/2 boundary is invisible to the rubric.
RUBRIC = """name: chemlab
title: Chemistry lab answers
version: "0.1"
description: Short answers to lab questions.
fields: {question: the lab question, response: the student's answer}
scale: {min: 1, max: 3}
grade: {min: 0, max: 3}
concepts:
  - key: Method
    name: Method
    definition: Whether the answer names the right procedure.
    levels:
      - {value: 1, anchor: wrong procedure}
      - {value: 2, anchor: partly right procedure}
      - {value: 3, anchor: right procedure}
  - key: Result
    name: Result
    definition: Whether the numeric result is right.
    levels:
      - {value: 1, anchor: wrong result}
      - {value: 2, anchor: roughly right result}
      - {value: 3, anchor: right result}
"""


def course_table(n: int = 240, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        q = f"Lab question {i % 6}"
        m, r = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        units = bool(rng.integers(0, 2))
        if m + r <= 3:
            g = 0
        elif m + r == 6:
            g = 3
        else:
            g = 2 if units else 1  # the criterion the rubric lacks
        resp = f"answer {i}: method {m}, result {r}" + (" in mol/L" if units else "")
        rows.append({"id": f"c{i}", "question": q, "response": resp, "Method": m, "Result": r, "grade": g})
    return pd.DataFrame(rows)


def test_ceiling_names_the_boundary_the_concepts_cannot_see() -> None:
    rb = parse_rubric(RUBRIC)
    df = course_table()
    c = grade_ceiling(rb, df, folds=5, seed=0)
    b = c.boundaries.set_index("lower")
    assert c.named == [(1, 2)]
    acc = b["balanced_acc"].astype(float)
    assert acc[1] < 0.65 and acc[0] > 0.9 and acc[2] > 0.9
    # every grade-1/2 answer has a twin profile at the other grade
    assert float(b["shared_profiles"].astype(float)[1]) == 1.0
    f1 = c.per_grade.set_index("grade")["f1"]
    assert f1.loc[0] > 0.95 and f1.loc[3] > 0.95 and min(f1.loc[1], f1.loc[2]) < 0.75
    assert int(c.confusion.sum()) == len(df)
    pairs = contrast_pairs(rb, df, c.named, per_boundary=2)
    assert len(pairs) == 2 and len({tuple(p.profile.values()) for p in pairs}) == 2
    table = df.set_index("id")
    for p in pairs:
        assert (p.lower, p.upper, p.a["grade"], p.b["grade"]) == (1, 2, 1, 2)
        for side in (p.a, p.b):
            assert {k: int(table.loc[side["id"], k]) for k in rb.keys} == p.profile
        assert p.same_question and p.a["question"] == p.b["question"]
        assert "mol/L" in p.b["response"] and "mol/L" not in p.a["response"]


def _write_course(tmp_path: Path) -> tuple[Path, Path]:
    rubric = tmp_path / "chemlab.yaml"
    rubric.write_text(RUBRIC)
    adj = tmp_path / "adj"
    adj.mkdir()
    course_table().to_csv(adj / "adjudicated.csv", index=False)
    (adj / "agreement.json").write_text(json.dumps({"rubric": str(rubric), "concepts": {}}))
    return rubric, adj


PROPOSAL = """Here is my proposal.
```yaml
add_concept:
  key: Units
  name: Units
  definition: Whether the result is reported with its units.
  levels:
    - {value: 1, anchor: no units}
    - {value: 2, anchor: "units given, partly wrong"}
    - {value: 3, anchor: correct units}
sharpen:
  - {concept: Result, level: 2, anchor: "roughly right: within 10 % of the expected value"}
```
"""


def test_cli_diagnose_writes_ceiling_and_pairs(tmp_path: Path) -> None:
    _, adj = _write_course(tmp_path)
    out = tmp_path / "diag"
    res = runner.invoke(app, ["rubric", "diagnose", "--adjudicated", str(adj), "--out", str(out), "--pairs", "2"])
    assert res.exit_code == 0, res.output
    assert "cannot separate" in res.output and "tell grade 1 from grade 2 apart" in res.output
    bounds = read_table(out / "grade_boundaries.csv")
    assert bounds[bounds["named"]][["lower", "upper"]].values.tolist() == [[1, 2]]
    pairs = read_table(out / "contrast_pairs.csv")
    assert len(pairs) == 2 and set(pairs["a_grade"]) == {1} and set(pairs["b_grade"]) == {2}
    assert "Contrasting pairs" in (out / "rubric_diagnosis.md").read_text()


def test_suggest_writes_a_diff_that_validates(tmp_path: Path) -> None:
    rubric, adj = _write_course(tmp_path)
    out = tmp_path / "diag"
    cache = tmp_path / "cache.sqlite"

    def responder(seen: Seen) -> Reply:
        assert "grade 1 vs grade 2" in seen.prompt and "mol/L" in seen.prompt and "key: Method" in seen.prompt
        return Reply(content=PROPOSAL, prompt_tokens=900, completion_tokens=120)

    args = ["rubric", "diagnose", "--adjudicated", str(adj), "--out", str(out), "--suggest", MODEL, "--cache",
            str(cache)]
    with ScriptedLLMServer(responder) as srv:
        res = runner.invoke(app, [*args, "--api-base", srv.url])
        assert res.exit_code == 0, res.output
        assert srv.count() == 1
        assert "900 prompt + 120 completion tokens" in res.output
        res = runner.invoke(app, [*args, "--api-base", srv.url])  # the same question again: the cache answers
        assert res.exit_code == 0, res.output
        assert srv.count() == 1 and "cached, $0" in res.output
    diff = (out / "rubric_suggestion.diff").read_text()
    assert diff.startswith("--- a/chemlab.yaml") and "+  - key: Units" in diff
    assert '-      - {value: 2, anchor: roughly right result}' in diff
    proposed = load_rubric(out / "rubric_suggestion.yaml")
    assert proposed.keys == ["Method", "Result", "Units"]
    assert proposed.concept("Result").anchor(2) == "roughly right: within 10 % of the expected value"
    assert rubric.read_text() == RUBRIC  # the rubric itself is never changed


def test_an_invalid_proposal_is_reported_not_written(tmp_path: Path) -> None:
    _, adj = _write_course(tmp_path)
    out = tmp_path / "diag"
    bad = PROPOSAL.replace("    - {value: 3, anchor: correct units}\n", "")  # two levels where the scale has three

    with ScriptedLLMServer(lambda seen: Reply(content=bad)) as srv:
        res = runner.invoke(app, ["rubric", "diagnose", "--adjudicated", str(adj), "--out", str(out), "--suggest",
                                  MODEL,
                                  "--api-base", srv.url, "--cache", str(tmp_path / "c.sqlite")])
    assert res.exit_code == 0, res.output
    assert "does not validate, not written" in res.output
    assert "concept Units has levels 1..2 but the rubric scale is 1..3" in res.output
    assert not (out / "rubric_suggestion.diff").exists() and not (out / "rubric_suggestion.yaml").exists()


def test_the_report_page_shows_the_ceiling_and_every_pair() -> None:
    """The run report renders the same ceiling and pairs (HTML and Markdown), answers escaped."""
    import html

    from rubrictool.report import render_markdown
    from rubrictool.report.diagnose import diagnose
    from rubrictool.report.page import Report, render_html

    rb = parse_rubric(RUBRIC)
    diag = diagnose(rb, course_table())
    assert diag.ceiling is not None and diag.pairs
    diag.pairs[0].a["response"] = "<b>bold</b> | pipe"  # answers are untrusted text
    r = Report("t", "run", "reccbm", 10, {}, "metrics.json", {"config": ""}, diagnosis=diag,
               images={"confusion.png": b"\x89PNG"})  # the page always shows a confusion matrix
    page, md = render_html(r), render_markdown(r)
    assert page.count('class="contrast-pair"') == len(diag.pairs)
    block = page.split('id="grade-boundaries"')[1].split("</table>")[0]
    assert block.count("cannot separate") == len(diag.ceiling.named) > 0
    assert "### What the concept levels can tell apart" in md
    for p in diag.pairs:
        for side in (p.a, p.b):
            assert html.escape(str(side["response"]), quote=False) in page
    assert "<b>bold</b>" not in page and "<b>bold</b>" not in md and "&lt;b&gt;bold&lt;/b&gt; \\| pipe" in md


def test_cli_diagnose_shows_the_majority_class_and_cis_and_says_what_a_drop_does(tmp_path: Path) -> None:
    """Beside the cross-validated ceiling: its 95 % CIs and the majority class; a concept whose drop makes the grade
    better predicted is said to gain, not printed as a loss of 0.0."""
    rubric, _ = _write_course(tmp_path)
    rng = np.random.default_rng(3)
    t = course_table(120).assign(Noise=rng.integers(1, 4, size=120))  # a third concept unrelated to the grade
    text = Path(rubric).read_text() + """  - key: Noise
    name: Noise
    definition: Something the grade does not depend on.
    levels:
      - {value: 1, anchor: low}
      - {value: 2, anchor: middle}
      - {value: 3, anchor: high}
"""
    Path(rubric).write_text(text)
    adj = tmp_path / "adj2"
    adj.mkdir()
    t.to_csv(adj / "adjudicated.csv", index=False)
    res = runner.invoke(app, ["rubric", "diagnose", "--adjudicated", str(adj), "--rubric", str(rubric)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    majority = t["grade"].value_counts().max() / len(t)
    assert re.search(r"95 % CIs T-Acc \[[\d.]+, [\d.]+\], QWK \[-?[\d.]+, [\d.]+\]; majority class \(always grade "
                     rf"\d\): T-Acc {majority:.3f}, QWK 0.000", flat)
    assert f"majority class {majority:.3f}" in flat
    from rubrictool.report import diagnose_dir

    diag = diagnose_dir(adj, str(rubric))
    loss = float(diag.concepts.set_index("concept")["drop_one_loss"].astype(float)["Noise"])
    assert loss < 0  # the unrelated concept only adds noise to the head
    assert f"gains {100 * -loss:.1f} pts" in flat and "better predicted without Noise" in flat
    assert "loses 0.0 points of accuracy without Noise" not in flat


@pytest.mark.parametrize(("loss", "said", "not_said"), [
    (-0.0004, "predicted as well without CP", "better predicted without CP"),  # rounds to 0.0: no claim of noise
    (-0.012, "1.2 points of accuracy better predicted without CP", "predicted as well"),
])
def test_a_drop_one_change_too_small_to_show_is_not_called_noise(loss: float, said: str, not_said: str) -> None:
    from rubrictool.report.diagnose import _suggest

    row = {"concept": "CP", "closest": "FC", "same_level": 0.1, "label_corr": 0.1, "partial_corr": 0.0, "alpha": None,
           "n_disagreements": 0, "confused_share": 0.0, "confused_levels": "1–2", "drop_one_loss": loss}
    flat = " ".join(_suggest(pd.DataFrame([row]), 100))
    assert said in flat and not_said not in flat
