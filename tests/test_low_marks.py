"""Low marks in plain sight: the per-mark table and the failing-answers figure (rubrictool.evaluate.low_marks), and
the course's pass mark and error costs in the rubric YAML."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rubrictool.errors import RubricError
from rubrictool.evaluate import low_marks, low_marks_lines
from rubrictool.rubric import load_rubric, parse_rubric
from tests.support.files import edited, line_of

F = "cs.yaml"
KEPT = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def test_low_marks_on_a_small_frame_by_hand() -> None:
    true = np.array([0, 0, 1, 1, 2, 3, 4, 5])
    pred = np.array([0, 2, 3, 1, 4, 3, 4, 4])
    lm = low_marks(true, pred, list(range(6)), pass_mark=3, n_boot=200)
    rows = {r["grade"]: r for r in lm["per_mark"]}
    assert rows[0]["n"] == 2 and rows[0]["mean_pred"] == 1.0 and rows[0]["mean_error"] == 1.0
    assert rows[0]["recall"] == 0.5 and rows[0]["over2"] == 0.5  # 0 -> 2 is two marks too high
    assert rows[1]["mean_error"] == 1.0 and rows[1]["over2"] == 0.5
    assert rows[5]["mean_error"] == -1.0 and rows[5]["over2"] == 0.0 and rows[5]["recall"] == 0.0
    assert rows[0]["mean_pred_lo"] <= 1.0 <= rows[0]["mean_pred_hi"]
    f = lm["failing"]  # marks 0, 0, 1, 1, 2: passed are 1 -> 3 and 2 -> 4
    assert f["n"] == 5 and f["passed"] == pytest.approx(2 / 5)
    assert f["mean_error"] == pytest.approx((0 + 2 + 2 + 0 + 2) / 5) and f["inflated"]
    head, table, text = low_marks_lines(lm)
    assert len(table) == 6 and len(table[0]) == len(head)
    assert "5; 40 % of them were given a pass mark" in text and "inflated by a mark or more" in text
    ok = lm["passing"]  # marks 3, 4, 5 given 3, 4, 4: none failed
    assert ok["n"] == 3 and ok["failed"] == 0.0
    assert "Of the 3 passing answers, 0 % were given a failing mark" in text


def test_the_passing_answers_a_harsh_rule_fails_are_counted() -> None:
    """The other side of the pass line: a grader that fails weak answers by marking everything low fails the passing
    ones too, and the figure says how many."""
    true = np.array([1, 2, 3, 3, 4, 5, 5, 5])
    lm = low_marks(true, np.clip(true - 1, 0, 5), list(range(6)), pass_mark=3, n_boot=200)
    assert lm["failing"]["passed"] == 0.0
    assert lm["passing"]["n"] == 6 and lm["passing"]["failed"] == pytest.approx(2 / 6)
    assert lm["passing"]["failed_lo"] <= 2 / 6 <= lm["passing"]["failed_hi"]
    assert "Of the 6 passing answers, 33 % were given a failing mark" in low_marks_lines(lm)[2]


def test_a_grader_that_gives_the_low_marks_is_not_inflated() -> None:
    true = np.repeat(np.arange(6), 10)
    lm = low_marks(true, true, list(range(6)), pass_mark=3, n_boot=100)
    assert lm["failing"]["passed"] == 0.0 and not lm["failing"]["inflated"]
    assert all(r["recall"] == 1.0 for r in lm["per_mark"])
    assert "inflated" not in low_marks_lines(lm)[2]


def test_a_scale_nobody_fails_on_says_so() -> None:
    lm = low_marks([3, 4, 5], [3, 4, 5], list(range(6)), pass_mark=3, n_boot=50)
    assert lm["failing"]["n"] == 0 and not lm["failing"]["inflated"]
    assert "not measured" in low_marks_lines(lm)[2]
    assert [r["n"] for r in lm["per_mark"]] == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize(("folder", "passed", "error"), [("folds", 0.57, 1.20), ("folds-by-question", 0.79, 1.42)])
def test_the_kept_default_passes_most_failing_answers(folder: str, passed: float, error: float) -> None:
    """The low-mark figures of the default, read back from the default's kept pooled predictions (all of Mohler, five
    folds)."""
    pooled = pd.read_csv(KEPT / folder / "default" / "pooled_predictions.csv", dtype={"id": str})
    rubric = load_rubric("mohler")
    lm = low_marks(pooled["grade_true"], pooled["grade"], rubric.grade.values, rubric.pass_mark, n_boot=200)
    assert rubric.pass_mark == 3 and lm["failing"]["n"] == 171
    assert round(lm["failing"]["passed"], 2) == passed and round(lm["failing"]["mean_error"], 2) == error
    assert lm["failing"]["inflated"]


# -- the course's pass mark and costs ----------------------------------------------------------------------------
def test_the_default_pass_mark_is_the_midpoint_rounded_up() -> None:
    assert load_rubric("mohler").pass_mark == 3  # grades 0..5: 0, 1, 2 fail
    r = parse_rubric(edited("grade: {min: 0, max: 5}", "grade: {min: 0, max: 4}"), F)
    assert r.pass_mark == 2 and r.costs.fail_passed == r.costs.pass_failed == 1.0


def test_pass_mark_and_costs_are_read_from_the_rubric() -> None:
    text = edited("grade: {min: 0, max: 5}",
                  "grade:\n  min: 0\n  max: 5\n  pass_mark: 4\n  costs: {fail_passed: 4, pass_failed: 1}")
    r = parse_rubric(text, F)
    assert r.pass_mark == 4 and r.costs.fail_passed == 4.0 and r.costs.pass_failed == 1.0


def _error(text: str) -> str:
    with pytest.raises(RubricError) as e:
        parse_rubric(text, F)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_a_pass_mark_outside_the_scale_names_its_line() -> None:
    text = edited("grade: {min: 0, max: 5}", "grade:\n  min: 0\n  max: 5\n  pass_mark: 0")
    msg = _error(text)
    assert msg.startswith(f"{F}:{line_of(text, 'pass_mark: 0')}: grade.pass_mark: pass_mark 0 is outside the grades "
                          "1..5")
    assert "e.g. 3" in msg


def test_a_cost_that_is_not_positive_names_its_line() -> None:
    text = edited("grade: {min: 0, max: 5}", "grade:\n  min: 0\n  max: 5\n  costs:\n    fail_passed: 0")
    assert _error(text).startswith(f"{F}:{line_of(text, 'fail_passed: 0')}: grade.costs.fail_passed:")
    text = edited("grade: {min: 0, max: 5}", "grade:\n  min: 0\n  max: 5\n  costs: {fail_passd: 2}")
    assert "grade.costs.fail_passd: unknown field" in _error(text)
