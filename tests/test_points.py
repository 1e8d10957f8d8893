"""Points per level: the schema and its line-accurate errors, the zero-training points grader, fitted points
(from graded answers and from a trained head) as a rubric suggestion that validates, and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.errors import RubricError
from rubrictool.io import read_table
from rubrictool.points import (
    fit_points,
    points_baseline,
    points_from_head,
    points_grades,
    points_suggestion,
    points_table,
    read_levels,
)
from rubrictool.rubric import load_rubric, parse_rubric, rubric_errors
from tests.support.files import line_of

runner = CliRunner()

# A lab-report rubric that is not Mohler: three criteria on levels 0..2, grade 0..10, points per level.
LAB_POINTS = {"Claim": (0, 1, 2), "Data": (0, 2, 4), "Reasoning": (0, 2, 4)}


def lab_yaml(grading: str = "grading: {points: sum, map: direct}", points: dict[str, tuple[float, ...]] | None = None,
             grade_max: int = 10) -> str:
    pts = LAB_POINTS if points is None else points
    lines = ["# a lab report rubric", "name: lab", "title: Lab report", "version: 2",
             "description: Physics lab reports.",
             "fields: {question: the task, response: the report}", "scale: {min: 0, max: 2}",
             f"grade: {{min: 0, max: {grade_max}}}", grading, "concepts:"]
    for key, p in pts.items():
        lines += [f"  - key: {key}", f"    name: {key}", f"    definition: How well the report handles {key.lower()}.",
                  "    levels:"]
        for v, anchor in enumerate(("absent", "partial", "complete")):
            pp = f", points: {p[v]:g}" if v < len(p) else ""
            lines.append(f"      - {{value: {v}, anchor: {anchor}{pp}}}")
    return "\n".join(lines) + "\n"


def test_points_and_grading_load() -> None:
    rb = parse_rubric(lab_yaml())
    assert rb.has_points and rb.grading is not None and rb.grading.map == "direct"
    assert points_table(rb).tolist() == [list(map(float, p)) for p in LAB_POINTS.values()]
    assert not load_rubric("mohler").has_points and load_rubric("mohler").grading is None  # its source defines none


@pytest.mark.parametrize(("change", "needle", "message"), [
    (lambda t: t.replace("anchor: partial, points: 2}", "anchor: partial}", 1), "anchor: partial}",
     "concepts.1.levels.1: level 1 of concept Data has no points"),
    (lambda t: t.replace("anchor: complete, points: 4}", "anchor: complete, points: 1}", 1), "complete, points: 1}",
     "concepts.1.levels.2.points: points of concept Data fall from 2 at level 1 to 1 at level 2"),
    (lambda t: t.replace("map: direct}", "map: thresholds, thresholds: [1, 2, 3, 4, 5, 6, 6, 8, 9, 10]}"), "thresholds",
     "grading.thresholds.6: thresholds must rise"),
    (lambda t: t.replace("map: direct}", "map: thresholds, thresholds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]}"), "thresholds",
     "grading.thresholds.9: threshold 9 (11) is outside the totals a response can earn (0..10]"),
    (lambda t: t.replace("map: direct}", "map: thresholds, thresholds: [2, 5]}"), "thresholds",
     "grading.thresholds: thresholds has 2 number(s) but grades 0..10 need 10"),
])
def test_points_errors_name_the_line(change, needle, message) -> None:  # type: ignore[no-untyped-def]
    text = change(lab_yaml())
    errors = rubric_errors(text, "lab.yaml")
    assert any(e.startswith(f"lab.yaml:{line_of(text, needle)}: {message}") for e in errors), errors
    with pytest.raises(RubricError, match=re.escape(message.split(": ", 1)[1][:30])):
        parse_rubric(text, "lab.yaml")


def test_grading_without_points_is_an_error() -> None:
    text = lab_yaml(points={k: () for k in LAB_POINTS})
    errors = rubric_errors(text, "lab.yaml")
    assert errors == [(f"lab.yaml:{line_of(text, 'grading:')}: grading: grading: is set but no level has points: "
                      "give every level `points:`, or drop grading")]


def test_the_three_grading_maps() -> None:
    levels = np.array([[0, 0, 0], [2, 2, 2], [1, 1, 0], [2, 1, 1]])  # totals 0, 10, 3, 6
    direct = parse_rubric(lab_yaml())
    totals, grades = points_grades(direct, levels)
    assert totals.tolist() == [0, 10, 3, 6] and grades.tolist() == [0, 10, 3, 6]
    linear = parse_rubric(lab_yaml("grading: {points: sum, map: linear}", grade_max=5))  # totals 0..10 onto 0..5
    assert points_grades(linear, levels)[1].tolist() == [0, 5, 2, 3]  # 1.5 rounds half up to 2
    th = parse_rubric(lab_yaml("grading: {map: thresholds, thresholds: [3, 7]}", grade_max=2))
    assert points_grades(th, levels)[1].tolist() == [0, 2, 1, 1]
    default = parse_rubric(lab_yaml("", grade_max=5))  # points without grading: sum, linear
    assert points_grades(default, levels)[1].tolist() == points_grades(linear, levels)[1].tolist()
    assert points_baseline(linear, levels, grade_min=0).tolist() == [0, 5, 2, 3]
    shifted = parse_rubric(lab_yaml("grading: {map: direct}").replace("grade: {min: 0, max: 10}",
                                                                      "grade: {min: 1, max: 11}"))
    assert points_baseline(shifted, levels).tolist() == [1, 10, 3, 6]  # direct totals, clipped to 1..11
    assert points_baseline(shifted, levels, grade_min=1).tolist() == [0, 9, 2, 5]
    with pytest.raises(RubricError, match="declares no points"):
        points_baseline(load_rubric("mohler"), np.zeros((2, 8), dtype=int))


def _answers(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 3, size=(n, 3))
    pts = np.array(list(LAB_POINTS.values()), dtype=float)
    return levels, pts[np.arange(3)[None, :], levels].sum(1)


def test_fit_points_recovers_the_points_that_made_the_grades(tmp_path: Path) -> None:
    levels, grades = _answers(200)
    rubric_path = tmp_path / "lab.yaml"
    rubric_path.write_text(lab_yaml(grading="", points={k: () for k in LAB_POINTS}))  # the draft has no points
    rb = load_rubric(rubric_path)
    fp = fit_points(rb, levels, grades, method="least-squares")
    steps = np.diff(fp.points, axis=1)
    assert np.allclose(steps, np.diff(np.array(list(LAB_POINTS.values()), dtype=float), axis=1), atol=0.02)
    assert fp.r2 > 0.99 and fp.t_acc == 1.0
    ordinal = fit_points(rb, levels, grades)  # the default: the same grades, by points and cut-points
    assert ordinal.method == "ordinal" and ordinal.r2 > 0.95 and ordinal.t_acc is not None and ordinal.t_acc > 0.9
    sugg = points_suggestion(rubric_path, fp)
    assert sugg.rubric.has_points and parse_rubric(sugg.text).grading.map == "direct"  # type: ignore[union-attr]
    assert "# a lab report rubric" in sugg.text  # the file is edited, not rewritten
    assert "+grading: {points: sum, map: direct}" in sugg.diff and sugg.diff.startswith("--- a/lab.yaml")
    assert points_grades(sugg.rubric, levels)[1].tolist() == grades.astype(int).tolist()


def test_points_from_a_trained_head(backbone: str) -> None:
    import torch

    from tests.support.tiny_models import tiny_model

    model, _ = tiny_model(backbone, K=3, lcec=False)
    rb = parse_rubric(lab_yaml(grading="", points={k: () for k in LAB_POINTS}, grade_max=3))
    with torch.no_grad():  # grade logits y · (6 s̃_0 − 1.5·3/2): only the first concept moves the grade
        model.W.weight.zero_()
        model.W.weight[:, 0] = 6.0 * torch.arange(4.0)
        model.W.bias.copy_(-4.5 * torch.arange(4.0))
    fp = points_from_head(model, rb)
    assert fp.n == 27  # every profile of three concepts on three levels
    assert fp.points[0, 2] - fp.points[0, 0] > 2.0  # the concept the head reads earns the points
    assert np.abs(np.diff(fp.points[1:], axis=1)).max() < 1e-6  # the others earn none
    assert fp.r2 > 0.99


def test_cli_points_from_llm_labels_and_a_table(tmp_path: Path) -> None:
    rubric = tmp_path / "lab.yaml"
    rubric.write_text(lab_yaml())
    rows = []
    for item, (a, b) in {"r1": ((2, 2, 2), (2, 1, 2)), "r2": ((0, 1, 0), (1, 1, 0)),
                         "r3": ((1, 2, 1), (1, 2, 1))}.items():
        for model, lv in (("gpt", a), ("gemini", b)):
            rows += [{"item": item, "model": model, "concept": k, "level": v, "raw_ok": True}
                     for k, v in zip(LAB_POINTS, lv)]
    labels = tmp_path / "predictions.jsonl"
    pd.DataFrame(rows).to_json(labels, orient="records", lines=True)
    out = tmp_path / "graded.csv"
    res = runner.invoke(app, ["rubric", "points", "--rubric", str(rubric), "--labels", str(labels), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "3 of 3 answers graded from LLM labels" in res.output
    g = read_table(out).set_index("id")
    # per concept the lower median of the two models' levels (r1: Claim 2, Data 1, Reasoning 2), then its points
    expect = {"r1": 2 + 2 + 4, "r2": 0 + 2 + 0, "r3": 1 + 4 + 2}
    assert {i: int(str(g.loc[i, "points_grade"])) for i in expect} == expect
    table = tmp_path / "adjudicated.csv"
    pd.DataFrame({"id": ["a", "b", "c", "d"], "Claim": [2, 0, 1, 2], "Data": [2, 0, 1, 1], "Reasoning": [2, 0, 1, 1],
                  "grade": [10, 0, 4, 6]}).to_csv(table, index=False)
    res = runner.invoke(app, ["rubric", "points", "--rubric", str(rubric), "--labels", str(table)])
    assert res.exit_code == 0, res.output
    assert "against the gold grades (n = 4): T-Acc 0.750" in res.output  # c earns 5 points, graded 4
    res = runner.invoke(app, ["rubric", "points", "--rubric", "mohler", "--labels", str(table)])
    assert res.exit_code == 1 and "declares no points" in res.output and "fit-points" in res.output


def test_read_levels_of_a_run(tmp_path: Path) -> None:
    rb = parse_rubric(lab_yaml())
    pred = tmp_path / "pooled_predictions.csv"
    pd.DataFrame({"id": ["x", "y"], "grade": [3, 9], "grade_true": [4, 10], "Claim_level": [1, 2], "Data_level": [1, 2],
                  "Reasoning_level": [0, 2]}).to_csv(pred, index=False)
    levels, kind = read_levels(pred, rb)
    assert kind == "a run's predicted levels"
    assert levels["grade"].tolist() == [4, 10] and levels["model_grade"].tolist() == [3, 9]
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"id": ["x"], "Claim": [3], "Data": [0], "Reasoning": [0]}).to_csv(bad, index=False)
    with pytest.raises(Exception, match="Claim = 3 is not a level of 0..2"):
        read_levels(bad, rb)


def test_cli_fit_points_writes_a_rubric_that_validates(tmp_path: Path) -> None:
    rubric = tmp_path / "lab.yaml"
    rubric.write_text(lab_yaml(grading="", points={k: () for k in LAB_POINTS}))
    levels, grades = _answers(120, seed=3)
    data = tmp_path / "adjudicated.csv"
    pd.DataFrame({"id": [f"s{i}" for i in range(120)], **{k: levels[:, j] for j, k in enumerate(LAB_POINTS)},
                  "grade": grades}).to_csv(data, index=False)
    out = tmp_path / "lab-points.yaml"
    res = runner.invoke(app, ["rubric", "fit-points", "--rubric", str(rubric), "--table", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rb = load_rubric(out)
    assert rb.has_points and rb.grading is not None and rb.grading.map == "thresholds"  # the default: ordinal
    assert rb.grading.thresholds is not None and len(rb.grading.thresholds) == 10
    assert Path(f"{out}.diff").read_text().count("points:") >= 9
    res = runner.invoke(app, ["rubric", "validate", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["rubric", "fit-points", "--rubric", str(rubric), "--out", str(out)])
    assert res.exit_code == 1 and "exactly one of --table" in res.output


def test_cli_fit_points_from_a_run(tmp_path: Path, one_thread: None) -> None:
    from tests.support.tiny_models import tiny_bert_run

    run = tiny_bert_run(tmp_path / "t", "--cfg", "model.head=level")
    out = tmp_path / "mohler-points.yaml"
    res = runner.invoke(app, ["rubric", "fit-points", "--rubric", "mohler", "--run", str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "over 6561 concept profiles" in " ".join(res.output.split())  # 3^8: every profile of the 8 concepts
    rb = load_rubric(out)
    assert rb.has_points and rb.keys == load_rubric("mohler").keys
    assert (np.diff(points_table(rb), axis=1) >= 0).all()


# ---------------------------------------------------------------------------- a table that can grade the whole scale
def _quiz(tmp_path: Path) -> tuple[Path, Path]:
    """The 48-answer 0..5 quiz (tests/support/quiz_course.py) as a rubric file and an adjudicated table."""
    from tests.support.quiz_course import QUIZ_KEYS, QUIZ_RUBRIC, quiz_table

    rubric = tmp_path / "quiz.yaml"
    rubric.write_text(QUIZ_RUBRIC)
    t = quiz_table()
    data = tmp_path / "adjudicated.csv"
    t.assign(id=[f"q{q}/{s}" for q, s in zip(t["question"], t["student"])])[["id", *QUIZ_KEYS, "grade"]].to_csv(
        data, index=False)
    return rubric, data


def test_least_squares_points_cannot_reach_the_ends_of_a_small_skewed_course(tmp_path: Path) -> None:
    """The case the default fit answers: least squares shrinks every total towards the middle grade, so its lowest total
    (every concept at its lowest level) earns grade 2, and grades 0 and 1, 17 of the 48 answers, are never given."""
    from tests.support.quiz_course import QUIZ_KEYS, quiz_table

    rubric, _ = _quiz(tmp_path)
    rb = load_rubric(rubric)
    t = quiz_table()
    lv, y = t[QUIZ_KEYS].to_numpy() - 1, t["grade"].to_numpy()
    old = fit_points(rb, lv, y, method="least-squares")
    assert old.points[:, 0].sum() >= 1.5 and set(old.reachable or []) <= {2, 3, 4}
    assert int((y <= 1).sum()) == 17 and old.t_acc is not None and old.t_acc < 0.312
    new = fit_points(rb, lv, y)  # the default: ordinal, points and cut-points together
    assert new.method == "ordinal" and new.grading["map"] == "thresholds"
    assert new.reachable is not None and new.reachable[0] == 0 and new.reachable[-1] == 5
    lowest, highest = np.zeros((1, 4), dtype=int), np.full((1, 4), 2)
    assert points_grades(rb, lowest, new.points, new.grading)[1].tolist() == [0]
    assert points_grades(rb, highest, new.points, new.grading)[1].tolist() == [5]
    sugg = points_suggestion(rubric, new)
    assert parse_rubric(sugg.text).grading.map == "thresholds"  # type: ignore[union-attr]  # the schema accepts it


def test_ordinal_points_reach_both_ends_whatever_the_grades() -> None:
    rb = parse_rubric(lab_yaml(grading="", points={k: () for k in LAB_POINTS}, grade_max=4))
    rng = np.random.default_rng(7)
    for _ in range(20):  # grades barely related to the levels, some grades never seen
        levels = rng.integers(0, 3, size=(30, 3))
        grades = np.clip(rng.integers(1, 4, size=30) + (levels.sum(1) > 4), 0, 4)
        fp = fit_points(rb, levels, grades)
        assert fp.reachable is not None and fp.reachable[0] == 0 and fp.reachable[-1] == 4, fp.grading
        assert (np.diff(fp.points, axis=1) >= 0).all()
        parse_rubric(points_suggestion_text(fp))  # always a valid rubric


def points_suggestion_text(fp) -> str:  # type: ignore[no-untyped-def]
    from rubrictool.rubric.patch import set_grading, set_level_points

    text = lab_yaml(grading="", points={k: () for k in LAB_POINTS}, grade_max=4)
    return set_grading(set_level_points(text, [[float(p) for p in row] for row in fp.points]), fp.grading)


def test_cross_validated_points_beside_the_majority_class() -> None:
    from rubrictool.points import cross_validate_points

    levels, grades = _answers(60, seed=5)
    rb = parse_rubric(lab_yaml(grading="", points={k: () for k in LAB_POINTS}))
    cv = cross_validate_points(rb, levels, grades, folds=5, n_boot=200)
    assert cv["folds"] == 5 and cv["n_test"] == 60
    ci = cv["ci"]["t_acc"]
    assert ci["lo"] <= ci["value"] <= ci["hi"] and cv["ci"]["qwk"]["value"] > 0.9  # additive grades: learnt
    assert cv["majority"]["qwk"] == 0.0 and cv["vs_majority"]["lo"] > 0
    noise = np.random.default_rng(1).integers(0, 11, size=60)  # grades unrelated to the levels
    cv = cross_validate_points(rb, levels, noise, folds=5, n_boot=200)
    assert any(w["code"] == "not_above_majority" for w in cv["warnings"])


def test_cli_fit_points_reports_cross_validated_figures_and_marks_in_sample(tmp_path: Path) -> None:
    rubric, data = _quiz(tmp_path)
    out = tmp_path / "quiz-points.yaml"
    res = runner.invoke(app, ["rubric", "fit-points", "--rubric", str(rubric), "--table", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "grades the table can give: all of 0..5" in text or "no concept profile earns grade" in text
    assert "no concept profile earns grades 0, 1" not in text
    assert re.search(r"in-sample \(on the 48 answers it was fitted to, not a measure of new answers\): T-Acc [\d.]+, "
                     r"QWK", text)
    m = re.search(r"cross-validated \(5 folds.*?\): T-Acc ([\d.]+) \[([\d.]+), ([\d.]+)\], QWK (-?[\d.]+) \[", text)
    assert m and float(m.group(2)) <= float(m.group(1)) <= float(m.group(3))
    assert "majority class (always grade 3): T-Acc 0.312, QWK 0.000" in text
    # this course's levels say little
    assert "warning: cross-validated, its T-Acc is not above the majority class" in text
    rb = load_rubric(out)
    assert rb.grading is not None and rb.grading.map == "thresholds"
    # grading the answers it was fitted to says so
    res = runner.invoke(app, ["rubric", "points", "--rubric", str(out), "--labels", str(data)])
    assert res.exit_code == 0, res.output
    assert "(in-sample)" in res.output and "in-sample: these points were fitted to these answers' grades" in " ".join(
        res.output.split())
    other = tmp_path / "other.csv"
    pd.read_csv(data).head(40).to_csv(other, index=False)  # other answers: not marked
    res = runner.invoke(app, ["rubric", "points", "--rubric", str(out), "--labels", str(other)])
    assert res.exit_code == 0 and "in-sample" not in res.output
    # the old fit stays available, and says what it cannot give
    res = runner.invoke(app, ["rubric", "fit-points", "--rubric", str(rubric), "--table", str(data), "--out", str(out),
                              "--fit", "least-squares", "--folds", "0"])
    assert res.exit_code == 0, res.output
    assert "no concept profile earns grades 0, 1" in " ".join(res.output.split())
    assert "cross-validated" not in res.output
