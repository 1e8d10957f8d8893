"""reccbm.decision: from a grade distribution to one mark — argmax, the cost matrix, cutpoints fitted on dev answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reccbm
from reccbm.decision import (
    Cutpoints,
    bayes_marks,
    cost_matrix,
    decide,
    expected_marks,
    fit_cutpoints,
    pass_index,
)
from tests.support.tiny_models import mohler_like_table


def test_the_cost_of_a_mark_is_its_distance_plus_the_courses_cost_of_crossing_the_pass_mark() -> None:
    c = cost_matrix(6, pass_index=3, fail_passed=2.0, pass_failed=1.0)
    assert c[2, 3] == 1 + 2  # a failing answer passed
    assert c[3, 2] == 1 + 1  # a passing answer failed
    assert c[0, 5] == 5 + 2 and c[4, 5] == 1 and c[3, 3] == 0
    assert (cost_matrix(6) == np.abs(np.arange(6)[:, None] - np.arange(6)[None, :])).all()


def test_the_pass_mark_is_the_first_mark_at_or_above_the_midpoint_unless_given() -> None:
    assert pass_index(6) == 3  # 0-5: 0, 1 and 2 fail
    assert pass_index(5) == 2  # 0-4: 0 and 1 fail
    assert pass_index(6, 4) == 4


def _compressed(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """True marks 0..5 (most at the top) and distributions whose expected mark is pulled toward 5: a head that
    compresses weak answers upward, as a grader trained on an imbalanced scale does."""
    rng = np.random.default_rng(seed)
    y = rng.choice(6, size=n, p=[0.05, 0.05, 0.1, 0.15, 0.25, 0.4])
    centre = 3.0 + 0.4 * y + rng.normal(0, 0.15, n)  # 0 → 3.0, 5 → 5.0
    marks = np.arange(6)
    logits = -((marks[None, :] - centre[:, None]) ** 2) / 0.5
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return probs, y


def test_cutpoints_fitted_on_dev_answers_give_the_low_marks_argmax_never_gives() -> None:
    dev_p, dev_y = _compressed(400, seed=0)
    test_p, test_y = _compressed(400, seed=1)
    cost = cost_matrix(6, 3, 2.0, 1.0)
    argmax = test_p.argmax(1)
    cut = fit_cutpoints(dev_p, dev_y, cost)
    marks = cut.marks(test_p)
    assert list(cut.t) == sorted(cut.t) and len(cut.t) == 5
    failing = test_y < 3
    assert (argmax[failing] >= 3).mean() > 0.9  # the compressed head passes nearly every failing answer
    assert (marks[failing] >= 3).mean() < 0.3  # the fitted cutpoints do not
    assert cost[test_y, marks].mean() < cost[test_y, argmax].mean()


def test_rounding_cutpoints_round_the_expected_mark_and_marks_no_answer_has_keep_them() -> None:
    probs = np.array([[0.0, 0.0, 0.0, 0.6, 0.4, 0.0], [0.0, 0.0, 0.0, 0.0, 0.2, 0.8]])
    assert list(Cutpoints.rounding(6).marks(probs)) == [3, 5]  # expected marks 3.4 and 4.8
    np.testing.assert_allclose(expected_marks(probs), [3.4, 4.8])
    # every dev answer at the top: nothing to move the low cutpoints
    only_top = np.tile([0, 0, 0, 0, 0.1, 0.9], (20, 1))
    cut = fit_cutpoints(only_top, np.full(20, 5), cost_matrix(6))
    assert cut.t[:3] == Cutpoints.rounding(6).t[:3]


def test_bayes_marks_minimise_the_expected_cost_and_argmax_is_the_rule_without_cutpoints() -> None:
    probs = np.array([[0.3, 0.0, 0.0, 0.0, 0.0, 0.7], [0.1, 0.1, 0.1, 0.1, 0.2, 0.4]])
    assert list(decide(probs, None)) == [5, 5]
    assert list(bayes_marks(probs, cost_matrix(6))) == [5, 4]  # |error|: the median mark
    heavy = cost_matrix(6, 3, fail_passed=20.0)
    assert bayes_marks(probs, heavy)[0] < 3  # a 30 % chance of a failing answer outweighs a pass at that cost


def test_a_run_trained_with_cutpoints_keeps_them_and_grades_by_them(tmp_path: Path, backbone: str) -> None:
    from rubrictool.data import split_items
    from rubrictool.grade import grade_items
    from rubrictool.train import TrainOptions, train_model

    df = mohler_like_table(60)
    overrides: dict[str, dict[str, Any]] = {
        "model": {"max_len": 32, "backbone": backbone}, "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
        "joint": {"epochs": 0}, "stage2": {"epochs": 2, "decision": "cutpoints", "decision_fail_passed": 3.0}}
    train_model("mohler", df, split_items(df, seed=0), tmp_path / "run",
                options=TrainOptions(overrides=overrides))
    model, _, meta = reccbm.load_checkpoint(tmp_path / "run")
    assert meta["decision"]["rule"] == "cutpoints" and model.decision is not None
    assert list(model.decision.t) == meta["decision"]["cutpoints"]
    graded = grade_items(tmp_path / "run", df.head(20))
    probs = graded[[c for c in graded.columns if c.startswith("p_grade_")]] if any(
        c.startswith("p_grade_") for c in graded.columns) else None
    preds = reccbm.predict(model, reccbm.EncodedItems(_features(tmp_path / "run", df.head(20))), 0)
    assert list(graded["grade"]) == list(model.decision.marks(preds.grade_probs) + meta["grade"][0])
    assert probs is None or len(probs) == 20


def _features(run: Path, df: Any) -> list[dict[str, list[int]]]:
    from rubrictool.grade import inputs_for, load_grader

    grader = load_grader(run)  # the run's reccbm.Grader
    return inputs_for(grader.model_, grader.tokenizer_, df)


def test_a_checkpoint_with_bad_cutpoints_is_refused_in_one_line(tmp_path: Path, backbone: str) -> None:
    import json

    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, train_model

    df = mohler_like_table(40)
    overrides: dict[str, dict[str, Any]] = {
        "model": {"max_len": 32, "backbone": backbone}, "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
        "joint": {"epochs": 0}, "stage2": {"epochs": 1, "decision": "cutpoints"}}
    train_model("mohler", df, split_items(df, seed=0), tmp_path / "run",
                options=TrainOptions(overrides=overrides))
    meta_path = tmp_path / "run" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["decision"]["cutpoints"] = [3.0, 1.0, 2.0, 4.0, 4.5]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(reccbm.ReccbmError, match="non-decreasing"):
        reccbm.load_checkpoint(tmp_path / "run")


def test_calibration_on_dev_answers_gives_an_overconfident_head_its_low_marks_back() -> None:
    from reccbm.decision import fit_calibrated_bayes

    dev_p, dev_y = _compressed(400, seed=0)
    test_p, test_y = _compressed(400, seed=1)
    sharp = test_p ** 3 / (test_p ** 3).sum(1, keepdims=True)  # over-confident: the same order, too sure
    dev_sharp = dev_p ** 3 / (dev_p ** 3).sum(1, keepdims=True)
    cost = cost_matrix(6, 3, 4.0, 1.0)
    rule = fit_calibrated_bayes(dev_sharp, dev_y, cost)
    assert 0 < rule.temperature < 1  # it softens what the head is too sure of
    nll = lambda p: -np.log(p[np.arange(len(test_y)), test_y] + 1e-12).mean()
    assert nll(rule.calibrated(sharp)) < nll(sharp)
    failing = test_y < 3
    assert (rule.marks(sharp)[failing] >= 3).mean() < (sharp.argmax(1)[failing] >= 3).mean()


def test_a_bayes_rule_is_kept_in_model_json_and_read_back(tmp_path: Path, backbone: str) -> None:
    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, train_model

    df = mohler_like_table(60)
    overrides: dict[str, dict[str, Any]] = {
        "model": {"max_len": 32, "backbone": backbone}, "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
        "joint": {"epochs": 0}, "stage2": {"epochs": 2, "decision": "bayes", "decision_fail_passed": 4.0}}
    train_model("mohler", df, split_items(df, seed=0), tmp_path / "run",
                options=TrainOptions(overrides=overrides))
    model, _, meta = reccbm.load_checkpoint(tmp_path / "run")
    assert meta["decision"]["rule"] == "bayes"
    assert model.decision is not None and model.decision.temperature == meta["decision"]["temperature"]
    assert np.asarray(model.decision.cost)[2, 3] == 1 + 4.0  # the course's cost of a failing answer passed, kept


def test_the_rubrics_pass_mark_and_costs_set_the_decision_rules_unless_cfg_does(tmp_path: Path) -> None:
    from importlib.resources import files

    import yaml

    from rubrictool.rubric import load_rubric
    from rubrictool.train import resolve_training

    doc = yaml.safe_load((files("rubrictool") / "rubrics" / "mohler.yaml").read_text())
    plain = resolve_training(load_rubric("mohler")).recipe.stage2
    assert (plain.decision_pass, plain.decision_fail_passed) == (-1, 2.0)  # a rubric that states neither
    doc["grade"] = {"min": 0, "max": 5, "pass_mark": 4, "costs": {"fail_passed": 5, "pass_failed": 0.5}}
    path = tmp_path / "course.yaml"
    path.write_text(yaml.safe_dump(doc))
    s2 = resolve_training(str(path)).recipe.stage2
    assert (s2.decision_pass, s2.decision_fail_passed, s2.decision_pass_failed) == (4, 5.0, 0.5)
    s2 = resolve_training(str(path), overrides={"stage2": {"decision_fail_passed": 9.0}}).recipe.stage2
    assert s2.decision_fail_passed == 9.0 and s2.decision_pass == 4
