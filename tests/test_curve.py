"""rubrictool.curve without training: subsamples, the cell plan, reading a curve back (90 % point, position of a
run on it), the figure. Training is replaced by a stand-in that predicts the majority grade of its training split."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rubrictool.curve import (
    CURVE_COLUMNS,
    CURVE_FAILING,
    CurveOptions,
    learning_curve,
    parse_folds,
    parse_sizes,
    plot_curve,
    position_on_curve,
    reach_fraction,
    summarize_curve,
)
from rubrictool.curve import measure as curve
from rubrictool.curve.figure import curve_title
from rubrictool.data.splits import nested_subsample, stratified_order
from rubrictool.errors import DataError, TrainError
from rubrictool.io import write_table
from rubrictool.rubric import load_rubric
from rubrictool.train import TrainOptions
from tests.support.toy_course import ecology_rubric, ecology_table


def test_sizes_parse_to_ascending_numbers_then_all() -> None:
    assert parse_sizes("400, 50,all,100,50") == [50, 100, 400, "all"]
    assert parse_sizes("ALL") == ["all"]
    for bad, words in (("0", "too few"), ("50,x", "'x' is not a number"), ("-5", "too few"), ("3", "too few"),
                       ("2.5", "not a number")):
        with pytest.raises(DataError, match=words):
            parse_sizes(bad)


def test_folds_parse() -> None:
    assert parse_folds(None, 5) == [0, 1, 2, 3, 4] and parse_folds("3,1,1", 5) == [1, 3]
    with pytest.raises(DataError, match="not a fold of 0..4"):
        parse_folds("5", 5)
    with pytest.raises(DataError, match="at least 2 folds"):
        parse_folds(None, 1)


def test_every_prefix_of_the_stratified_order_keeps_the_grade_shares() -> None:
    grades = np.repeat([0, 1, 2, 3, 4, 5], [3, 20, 60, 150, 300, 120])  # skewed, like Mohler's grades
    order = stratified_order(grades, np.random.default_rng(1))
    assert sorted(order.tolist()) == list(range(len(grades)))  # a permutation
    shares = {g: np.mean(grades == g) for g in np.unique(grades)}
    for n in (10, 25, 50, 100, 333, 653):
        prefix = grades[order[:n]]
        for g, share in shares.items():
            assert abs(np.sum(prefix == g) - n * share) <= 1 + 1e-9, (n, g)
    other = stratified_order(grades, np.random.default_rng(2))
    assert order[:50].tolist() != other[:50].tolist()  # the seed matters


def test_a_subsample_is_nested_across_sizes_and_its_dev_part_is_stratified() -> None:
    rng = np.random.default_rng(0)
    pool = pd.DataFrame({"id": [f"a{i}" for i in range(200)], "_y": rng.integers(0, 4, 200)})
    order = stratified_order(pool["_y"].to_numpy(), np.random.default_rng(5))
    small, big = (nested_subsample(pool, order, n, 0.125, [0, n]) for n in (40, 120))
    assert len(small.ids) == 40 and len(big.ids) == 120 and set(small.ids) <= set(big.ids)
    assert not set(small.fit) & set(small.dev) and len(small.dev) == 5
    tiny = nested_subsample(pool, order, 10, 0.125, [0, 10])
    assert len(tiny.dev) == 1 and len(tiny.fit) == 9


def _fake_train(calls: list[dict[str, Any]]) -> Any:
    """Stands in for train_model: predicts the most common training grade; records what it was given."""

    def train(rb: Any, table: pd.DataFrame, split: dict[str, list[str]], run_dir: Path, **kw: Any) -> Any:
        calls.append({"split": split, **kw, **vars(kw["options"])})  # the cell's training options flat
        grades = table.set_index(table["id"].astype(str))["grade"]
        mode = int(grades.loc[split["train"]].mode().min())
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"id": split["test"], "grade": mode}).to_csv(Path(run_dir) / "test_predictions.csv", index=False)
        y = grades.loc[split["test"]].to_numpy()
        acc = float(np.mean(y == mode))
        return SimpleNamespace(metrics={"seeds": [{"test": {"t_acc": acc, "qwk": 0.0, "t_f1": acc / 2}}]})

    return train


def test_cells_share_the_test_part_and_draw_from_the_training_part(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(curve, "train_model", _fake_train(calls))
    rub, df = ecology_rubric(tmp_path), ecology_table(120)
    res = learning_curve(rub, df, tmp_path / "c",
                         CurveOptions(sizes=[20, 40, "all"], variants=["reccbm", "plm"], repeats=2, folds=4,
                                      fold_ids=[1, 3], plot=False),
                         training=TrainOptions(overrides={"stage1": {"epochs": 2, "min_steps": 50},
                                                          "joint": {"epochs": 1, "min_steps": 20}}))
    assert len(calls) == 2 * 2 * 3 * 2 == res.trained and res.read_back == 0
    assert list(res.cells.columns) == CURVE_COLUMNS + CURVE_FAILING  # the failing answers of each cell last
    assert res.cells["failing_passed"].dropna().between(0, 1).all()
    keys = set(zip(res.cells["fold"], res.cells["size"], res.cells["repeat"], res.cells["variant"]))
    assert keys == {(f, s, r, v) for f in (1, 3) for s in ("20", "40", "all") for r in (0, 1)
                    for v in ("reccbm", "plm")}
    by_test: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for c in calls:
        by_test.setdefault(tuple(c["split"]["test"]), []).append(c)
    assert len(by_test) == 2 and all(len(v) == 12 for v in by_test.values())  # one test part per fold, all cells
    for test, cs in by_test.items():
        for c in cs:
            labelled = set(c["split"]["train"]) | set(c["split"]["dev"])
            assert not labelled & set(test)
    rows = res.cells.set_index(["fold", "size", "repeat", "variant"])
    assert (rows.xs("20", level="size")["n_train"] == 20).all()
    assert (rows.xs("all", level="size")["n_train"] == 90).all()
    # the same subsample (and majority baseline) for every variant of a (fold, size, repeat): a paired comparison
    same = res.cells.groupby(["fold", "size", "repeat"])["majority_t_acc"].nunique()
    assert (same == 1).all()
    plm = [c for c in calls if c["variant"] == "plm"]
    cbm = [c for c in calls if c["variant"] == "reccbm"]
    assert all(c["overrides"]["stage1"]["epochs"] == 3 for c in plm)  # Stage I 2 + joint 1: the matched budget
    # and on small tables the matched steps, all in its one stage (train_model adds the joint stage's share: 0)
    assert all(c["overrides"]["stage1"]["min_steps"] == 70 and c["overrides"]["joint"]["min_steps"] == 0 for c in plm)
    assert all(c["overrides"]["stage1"]["epochs"] == 2 for c in cbm)
    assert set(res.cells.loc[res.cells["variant"] == "plm", "encoder_epochs"]) == {3}
    assert {c["first_seed"] for c in calls} == {0, 1}  # the repeat is the training seed
    doc = json.loads((tmp_path / "c" / "curve.json").read_text())
    assert doc["encoder_epochs"] == {"reccbm": 3, "plm": 3} and "train + dev" in doc["dev"]


def test_a_bigger_size_than_the_training_part_and_unknown_variants_are_refused(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(curve, "train_model", _fake_train(calls))
    rub, df = ecology_rubric(tmp_path), ecology_table(60)
    with pytest.raises(DataError,
                       match=r"200 answers is more than a fold's training part \(45 answers of 60, 4 folds\)"):
        learning_curve(rub, df, tmp_path / "c", CurveOptions(sizes=[20, 200], folds=4))
    with pytest.raises(TrainError, match="unknown variant"):
        learning_curve(rub, df, tmp_path / "c", CurveOptions(sizes=[20], variants=["bert"], folds=4))
    assert not calls


def test_grouping_is_passed_to_the_folds_only_when_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    from rubrictool.data import kfold_splits as real


    def kfold(items: pd.DataFrame, k: int = 5, seed: int = 0, by: str | None = None) -> Any:
        seen.append({"by": by})
        return real(items, k=k, seed=seed)

    monkeypatch.setattr("rubrictool.curve.measure.kfold_splits", kfold)
    monkeypatch.setattr(curve, "train_model", _fake_train([]))
    rub, df = ecology_rubric(tmp_path), ecology_table(60)
    learning_curve(rub, df, tmp_path / "a",
                   CurveOptions(sizes=[20], variants=["plm"], repeats=1, folds=3, fold_ids=[0], plot=False))
    learning_curve(rub, df, tmp_path / "b", CurveOptions(sizes=[20], variants=["plm"], repeats=1, folds=3,
                                                       fold_ids=[0], by="question", plot=False))
    assert seen == [{"by": None}, {"by": "question"}]


def test_a_cell_made_with_other_settings_is_not_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(curve, "train_model", _fake_train([]))
    rub, df = ecology_rubric(tmp_path), ecology_table(60)
    kw: dict[str, Any] = {"sizes": [20], "variants": ["plm"], "repeats": 1, "folds": 3, "fold_ids": [0], "plot": False}
    learning_curve(rub, df, tmp_path / "c", CurveOptions(**kw))
    with pytest.raises(DataError, match="trained with other settings"):
        learning_curve(rub, df, tmp_path / "c", CurveOptions(**kw), training=TrainOptions(preset="paper"))


def _cells(rows: list[tuple[str, str, int, float, float]]) -> pd.DataFrame:
    """(variant, size, n_train, qwk, t_acc) per cell -> a curve.csv frame (two folds each: ± 0.02 around the value)."""
    out = []
    for variant, size, n, qwk, acc in rows:
        for fold, d in ((0, -0.02), (1, 0.02)):
            out.append({"fold": fold, "size": size, "repeat": 0, "variant": variant, "n_train": n, "n_dev": n // 8,
                        "t_acc": acc + d, "qwk": qwk + d, "t_f1": acc / 2, "majority_t_acc": 0.3, "majority_qwk": 0.0,
                        "majority_t_f1": 0.1, "encoder_epochs": 7, "train_seconds": 1.0, "encoder": "train"})
    return pd.DataFrame(out)[CURVE_COLUMNS]


CURVE = [("reccbm", "50", 50, 0.30, 0.50), ("reccbm", "100", 100, 0.50, 0.60), ("reccbm", "200", 200, 0.58, 0.66),
         ("reccbm", "all", 400, 0.60, 0.70), ("plm", "50", 50, 0.10, 0.40), ("plm", "100", 100, 0.20, 0.45)]


def test_the_answers_that_reach_90_percent_of_the_full_data_qwk() -> None:
    cells = _cells(CURVE)
    r = reach_fraction(cells, "reccbm")
    assert r is not None and r["full"] == pytest.approx(0.60) and r["target"] == pytest.approx(0.54)
    assert r["size"] == "200" and r["full_n_train"] == 400
    t = (0.54 - 0.50) / (0.58 - 0.50)  # linear in log n between 100 (0.50) and 200 (0.58)
    assert r["n_estimate"] == round(math.exp(math.log(100) + t * (math.log(200) - math.log(100))))
    assert reach_fraction(cells, "plm") is None  # no "all" size
    early = _cells([("v", "50", 50, 0.59, 0.5), ("v", "all", 400, 0.60, 0.7)])
    assert reach_fraction(early, "v")["where"] == "at or below the smallest size"  # type: ignore[index]


def test_position_of_a_run_on_a_curve(tmp_path: Path) -> None:
    path = write_table(_cells(CURVE), tmp_path / "curve.csv")
    mid = position_on_curve(path, math.sqrt(100 * 200), "reccbm")  # halfway between 100 and 200 on a log axis
    assert mid["within"] and mid["lower"]["size"] == "100" and mid["upper"]["size"] == "200"
    assert mid["qwk"] == pytest.approx(0.54) and mid["t_acc"] == pytest.approx(0.63)
    assert mid["lower"]["qwk_sd"] == pytest.approx(math.sqrt(2 * 0.02**2))  # the spread over the two folds
    assert mid["full"]["n_train"] == 400
    assert mid["reach_90"] == reach_fraction(_cells(CURVE), "reccbm") and mid["reach_90"]["size"] == "200"
    exact = position_on_curve(path, 50, "reccbm")
    assert exact["qwk"] == pytest.approx(0.30) and exact["within"]
    beyond = position_on_curve(path, 1000, "reccbm")
    assert not beyond["within"] and beyond["upper"] is None and beyond["qwk"] == pytest.approx(0.60)
    with pytest.raises(DataError, match="no cells of variant 'vanilla'; the curve has plm, reccbm"):
        position_on_curve(path, 100, "vanilla")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="not a curve.csv"):
        position_on_curve(tmp_path / "other.csv", 100, "reccbm")


def test_the_figure_is_a_png(tmp_path: Path) -> None:
    cells = _cells(CURVE)
    png = plot_curve(cells, tmp_path / "curve.png", reach={"reccbm": reach_fraction(cells, "reccbm")})
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert not [p for p in tmp_path.iterdir() if p.name != "curve.png"]  # no temporary file left


def test_the_toy_course_is_not_mohler(tmp_path: Path) -> None:
    rb = load_rubric(ecology_rubric(tmp_path))
    df = ecology_table(90)
    assert (rb.scale.min, rb.scale.max, rb.grade.min, rb.grade.max) == (0, 2, 1, 4) and rb.keys == ["EV", "MC", "CL"]
    assert set(df["grade"]) <= {1, 2, 3, 4} and df["question"].nunique() == 6


def test_the_figure_title_says_which_folds_the_curve_holds() -> None:
    assert "(5 random folds;" in curve_title("mohler", 5, None, [0, 1, 2, 3, 4])
    assert "(fold 0 of 5 random folds;" in curve_title("mohler", 5, None, [0])
    assert "(folds 0, 2 of 5 folds grouped by question;" in curve_title("mohler", 5, "question", [0, 2])


@pytest.mark.parametrize("course", ["ecology", "mohler-like"])
def test_the_points_variant_fits_points_to_the_labelled_answers_and_trains_no_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, course: str) -> None:
    """On the ecology course (levels 0..2, grades 1..4) and a Mohler-rubric table (levels 1..3, grades 0..5), both
    additive in the levels: `points` grades the test answers from their concept levels with a points table fitted to
    the n labelled answers only; no encoder is trained."""
    from reccbm import grade_metrics
    from rubrictool.points import fit_points, points_baseline
    from rubrictool.tables import validate_adjudicated
    from tests.support.tiny_models import mohler_like_table

    def no_training(*a: Any, **kw: Any) -> Any:
        raise AssertionError("the points variant trained a model")

    monkeypatch.setattr(curve, "train_model", no_training)
    rub: Path | str
    rub, df = ((ecology_rubric(tmp_path), ecology_table(150)) if course == "ecology"
                else ("mohler", mohler_like_table(150)))
    res = learning_curve(rub, df, tmp_path / "c",
                         CurveOptions(sizes=[12, "all"], variants=["points"], repeats=2, folds=3, plot=True))
    assert res.trained == 2 * 3 * 2 and set(res.cells["variant"]) == {"points"}
    assert set(res.cells["encoder"]) == {"none"} and set(res.cells["encoder_epochs"]) == {0}
    rb = load_rubric(rub)
    lo, g0 = rb.scale.min, rb.grade.min
    by_id = validate_adjudicated(df, rb).set_index("id")
    for cell_file in sorted((tmp_path / "c" / "cells").glob("*.json")):
        cell = json.loads(cell_file.read_text())
        labelled, test = cell["train_ids"] + cell["dev_ids"], cell["test_ids"]
        assert not set(labelled) & set(test) and len(labelled) == cell["n_train"]  # n counts train + dev
        fitted = fit_points(rb, by_id.loc[labelled, rb.keys].to_numpy() - lo, by_id.loc[labelled, "_y"].to_numpy() + g0)
        pred = points_baseline(rb, by_id.loc[test, rb.keys].to_numpy() - lo, grade_min=g0, points=fitted.points,
                               grading=fitted.grading)
        assert cell["test_predicted"] == (pred + g0).tolist()
        assert cell["qwk"] == pytest.approx(grade_metrics(by_id.loc[test, "_y"].to_numpy(), pred)["qwk"])
    # the grade is additive in the levels here, so the whole training part recovers it almost exactly
    full = res.cells[res.cells["size"] == "all"]
    assert full["qwk"].mean() > 0.9 and (full["qwk"] > full["majority_qwk"]).all()
    doc = json.loads((tmp_path / "c" / "curve.json").read_text())
    # above the majority class with all the answers: a 90 % point, or "not before all"
    reading = doc["reading"]["points"]
    assert reading["status"] in ("reached", "at_smallest", "not_before_full")
    assert (doc["reach_90"]["points"] is not None) == (reading["status"] != "not_before_full")


def test_the_legend_says_which_folds_a_variant_was_measured_on_when_they_differ() -> None:
    from rubrictool.curve.figure import variant_labels

    rows = [{"fold": f, "variant": "points"} for f in (0, 1, 2)] + [{"fold": 0, "variant": "reccbm"}]
    assert variant_labels(pd.DataFrame(rows)) == {"points": "points (folds 0, 1, 2)", "reccbm": "reccbm (fold 0)"}
    same = [{"fold": f, "variant": v} for f in (0, 1) for v in ("reccbm", "plm")]
    assert variant_labels(pd.DataFrame(same)) == {"reccbm": "reccbm", "plm": "plm"}


def test_a_fold_run_config_is_compared_field_by_field_and_a_field_it_predates_counts_as_its_default() -> None:
    from rubrictool.train import resolve_training
    from rubrictool.train.resume import config_differences

    ours = resolve_training(load_rubric("mohler")).for_answers(400).config
    theirs = json.loads(json.dumps(ours))
    assert config_differences(theirs, ours) == []
    del theirs["stage1"]["min_steps"], theirs["encoder"]  # written before those fields existed: their defaults ran
    assert config_differences(theirs, ours) == []
    theirs["stage1"]["lr"] = 1.0
    assert config_differences(theirs, ours) == [f"stage1.lr 1.0 in the run, {ours['stage1']['lr']!r} here"]
    changed = json.loads(json.dumps(ours))
    changed["joint"]["min_steps"] = 50  # a field the old run lacks, set away from its default here: a difference
    old = json.loads(json.dumps(ours))
    del old["joint"]["min_steps"]
    assert config_differences(old, changed) == ["joint.min_steps None in the run, 50 here"]


def test_the_all_size_gets_one_tick_even_when_variants_ran_on_other_folds() -> None:
    """points on five folds (1,818.4 answers on average) beside reccbm on fold 0 (1,825): one "≈1822 (all)" tick,
    not two labels drawn over each other."""
    from rubrictool.curve.figure import figure_ticks

    five = _cells([("points", "20", 20, 0.7, 0.66), ("points", "all", 1818, 0.78, 0.71)])
    one = _cells([("reccbm", "200", 200, 0.1, 0.5), ("reccbm", "all", 1825, 0.5, 0.63)])
    assert figure_ticks(summarize_curve(pd.concat([five, one]))) == {20: "20", 200: "200", 1822: "≈1822\n(all)"}
    assert figure_ticks(summarize_curve(five)) == {20: "20", 1818: "1818\n(all)"}
