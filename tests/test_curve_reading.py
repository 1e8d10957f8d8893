"""What a learning curve may say: a 90 % point only for a grader above the majority class, one reading of the cells
for curve.json, curve.png and the printed summary (checked over several shapes of curve), default sizes that fit
the table, and a report that reads a points-only curve and gives only advice that can be followed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.curve import CURVE_COLUMNS, plot_curve, position_on_curve
from rubrictool.curve.reading import default_sizes, read_curve
from rubrictool.io import write_table
from rubrictool.report.page import curve_lines
from tests.support.stats_course import stats_rubric, stats_table
from tests.support.toy_course import ecology_rubric, ecology_table

runner = CliRunner()


def _cells(rows: list[tuple[str, str, int, float, float]], majority: float = 0.3) -> pd.DataFrame:
    """(variant, size, n_train, qwk, t_acc) per size -> curve.csv rows, two folds each (± 0.02 around the value)."""
    out = []
    for variant, size, n, qwk, acc in rows:
        for fold, d in ((0, -0.02), (1, 0.02)):
            out.append({"fold": fold, "size": size, "repeat": 0, "variant": variant, "n_train": n, "n_dev": n // 8,
                        "t_acc": acc + d, "qwk": qwk + d, "t_f1": acc / 2, "majority_t_acc": majority,
                        "majority_qwk": 0.0, "majority_t_f1": 0.1, "encoder_epochs": 0, "train_seconds": 0.0,
                        "encoder": "none"})
    return pd.DataFrame(out)[CURVE_COLUMNS]


# shape -> (rows, majority T-Acc, status, the 90 % point's first size or None)
SHAPES = {
    "rising": ([("v", "50", 50, 0.30, 0.50), ("v", "100", 100, 0.50, 0.60), ("v", "200", 200, 0.58, 0.66),
                ("v", "all", 400, 0.60, 0.70)], 0.3, "reached", "200"),
    "early": ([("v", "10", 10, 0.59, 0.50), ("v", "all", 40, 0.60, 0.55)], 0.3, "at_smallest", "10"),
    # the statistics quiz: QWK rises, T-Acc stays below always giving the most common grade
    "below majority": ([("v", "10", 10, 0.55, 0.27), ("v", "20", 20, 0.58, 0.24), ("v", "all", 38, 0.60, 0.19)],
                       0.31, "below_majority", None),
    # smaller sizes measured, none reaches 90 %: only all the answers do (not "only its full-data cells")
    "late": ([("v", "20", 20, 0.10, 0.40), ("v", "50", 50, 0.30, 0.45), ("v", "all", 110, 0.60, 0.60)], 0.3,
             "not_before_full", None),
    # 90 % of the QWK at 20, but T-Acc there is below the majority class: the point is where it beats it too
    "qwk before t_acc": ([("v", "20", 20, 0.56, 0.25), ("v", "50", 50, 0.58, 0.45), ("v", "all", 110, 0.60, 0.60)],
                         0.3, "reached", "50"),
    "only all": ([("v", "all", 110, 0.60, 0.60)], 0.3, "only_full", None),
    "no all": ([("v", "20", 20, 0.30, 0.40), ("v", "50", 50, 0.50, 0.50)], 0.3, "no_full", None),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_summary_curve_json_and_the_figure_agree(shape: str, tmp_path: Path) -> None:
    rows, majority, status, first = SHAPES[shape]
    cells = _cells(rows, majority)
    reading = read_curve(cells)["v"]
    assert reading["status"] == status
    reach = reading["reach"]
    assert (reach["size"] if reach else None) == first
    sentence = reading["sentence"]
    if reach:  # the sentence states the point the figure marks
        assert reach["size"] in sentence
        assert ("above the majority class" in sentence or "beats the majority" in sentence)
        assert reach["n_estimate"] >= min(r[2] for r in rows)
    else:
        assert "90 % of its full-data QWK (" not in sentence
    if status == "below_majority":
        assert "does not beat the majority class at any size" in sentence
    if status == "not_before_full":
        assert "only its full-data cells" not in sentence
    # curve.png marks exactly the readings' points (kept in the PNG's description)
    png = plot_curve(cells, tmp_path / "curve.png", reach={v: r["reach"] for v, r in read_curve(cells).items()})
    marked = json.loads(Image.open(png).info["Description"])["reach_90"]
    assert marked == ({"v": reach["n_estimate"]} if reach else {})
    # a run's report reads the same point
    path = write_table(cells, tmp_path / "curve.csv")
    assert position_on_curve(path, 30, "v")["reach_90"] == reach


def test_the_command_prints_writes_and_draws_one_reading(tmp_path: Path) -> None:
    """The points route on a small course of 48 answers, with the default sizes: the printed sentences, curve.json's
    reading and reach_90 and the figure's marks come from the same cells."""
    data = tmp_path / "stats.csv"
    stats_table(48, skew=0.5).to_csv(data, index=False)
    out = tmp_path / "curve"
    res = runner.invoke(app, ["learning-curve", "--table", str(data), "--rubric", str(stats_rubric(tmp_path)),
                              "--variants", "points", "--repeats", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "curve.json").read_text())
    assert doc["sizes"] == ["10", "20", "all"]  # from the table's size: 38 answers outside each test part
    reading = doc["reading"]["points"]
    flat = " ".join(res.output.split())
    assert " ".join(reading["sentence"].split()) in flat
    cells = pd.read_csv(out / "curve.csv")
    again = read_curve(cells)["points"]
    assert again["sentence"] == reading["sentence"] and again["reach"] == doc["reach_90"]["points"]
    marked = json.loads(Image.open(out / "curve.png").info["Description"])["reach_90"]
    assert marked == ({"points": doc["reach_90"]["points"]["n_estimate"]} if doc["reach_90"]["points"] else {})


def test_default_sizes_come_from_the_table() -> None:
    assert default_sizes(1818) == [50, 100, 200, 400, 800, "all"]  # Mohler: the sizes the docs measure
    assert default_sizes(38) == [10, 20, "all"]  # 48 answers, 5 folds
    assert default_sizes(112) == [10, 20, 50, "all"]
    assert all(s == "all" or (isinstance(s, int) and s < p) for p in (12, 25, 38, 60, 112, 500, 1818)
               for s in default_sizes(p))


def test_a_small_course_gets_a_curve_without_giving_sizes(tmp_path: Path) -> None:
    data = tmp_path / "ecology.csv"
    ecology_table(40).to_csv(data, index=False)
    res = runner.invoke(app, ["learning-curve", "--table", str(data), "--rubric", str(ecology_rubric(tmp_path)),
                              "--variants", "points", "--folds", "4", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output  # the old default sizes (50 … 800) stop a 40-answer course
    sizes = json.loads((tmp_path / "c" / "curve.json").read_text())["sizes"]
    assert sizes[-1] == "all" and all(int(s) < 30 for s in sizes[:-1])


def _position(**kw: object) -> dict[str, object]:
    base = {"variant": "reccbm", "n_train": 43.0, "qwk": 0.4, "t_acc": 0.5, "within": True,
            "lower": {"size": "20", "n_train": 20.0, "qwk": 0.3, "t_acc": 0.4},
            "upper": {"size": "all", "n_train": 38.0, "qwk": 0.4, "t_acc": 0.5},
            "full": {"size": "all", "n_train": 38.0, "qwk": 0.4, "t_acc": 0.5}, "curve": "c.csv",
            "reach_90": {"target": 0.36, "n_estimate": 25, "size": "all"}, "reading": {},
            "run_qwk": 0.0, "run_t_acc": 0.31, "run_beats_majority": True}
    return base | kw


def test_the_report_gives_only_advice_that_can_be_followed() -> None:
    # a run trained on more answers than the curve's 'all': never "add all", all is on the curve
    beyond = _position(within=False, upper=None, lower={"size": "all", "n_train": 38.0, "qwk": 0.4, "t_acc": 0.5})
    text = " ".join(curve_lines(beyond))
    assert "Add 'all'" not in text and "Add sizes (e.g. all)" not in text and "beyond" in text
    # a curve without 'all': adding it is advice that can be followed
    short = _position(within=False, upper=None, full=None, reach_90=None,
                      lower={"size": "20", "n_train": 20.0, "qwk": 0.3, "t_acc": 0.4})
    assert "Add 'all' to the curve's sizes" in " ".join(curve_lines(short))
    # past the 90 % point, but the run grades nothing: no "more labels bring little"
    constant = " ".join(curve_lines(_position(run_beats_majority=False)))
    assert "more labels bring little" not in constant and "does not beat the majority class" in constant
    assert "more labels bring little" in " ".join(curve_lines(_position()))
    # a curve whose grader does not beat the majority class: its reading, no 90 % point
    below = _position(reach_90=None, reading={"sentence": "reccbm: does not beat the majority class at any size"})
    text = " ".join(curve_lines(below))
    assert "90 % of the full-data QWK" not in text and "does not beat the majority class at any size" in text


def test_the_report_reads_a_points_only_curve(tmp_path: Path) -> None:
    from rubrictool.report.page import curve_position

    path = write_table(_cells(SHAPES["rising"][0], 0.3).assign(variant="points"), tmp_path / "curve.csv")
    missing: list[str] = []
    pos = curve_position(path, 100, "reccbm", missing)
    assert pos is not None and not missing and pos["variant"] == "points"
    lines = " ".join(curve_lines(pos | {"run_qwk": 0.5, "run_t_acc": 0.6, "run_variant": "reccbm"}))
    assert "the points route" in lines and re.search(r"QWK 0\.500", lines)
    other = write_table(_cells(SHAPES["rising"][0]).assign(variant="plm"), tmp_path / "plm.csv")
    assert curve_position(other, 100, "reccbm", missing) is None and "no cells of variant 'reccbm'" in missing[0]


@pytest.mark.parametrize(("preset", "asked", "used", "want"), [
    ("default", "auto", ["frozen"], "reccbm"),  # the preset's own choice: the curve's plain variant, frozen or not
    ("default", "train", ["train"], "reccbm-train"),
    ("default", "frozen", ["frozen"], "reccbm-frozen"),
    ("plain", "train", ["train"], "reccbm"),
    ("plain", "frozen", ["frozen"], "reccbm-frozen"),
    ("plain", "auto", ["frozen", "train"], "reccbm-auto"),
    (None, None, ["frozen", "frozen"], "reccbm-frozen"),  # a run from before the encoder was recorded as asked
    (None, None, ["train"], "reccbm"),
])
def test_a_run_reads_the_curve_of_the_encoder_it_asked_for(preset: str | None, asked: str | None, used: list[str],
                                                            want: str) -> None:
    from rubrictool.report.page import curve_variant

    assert curve_variant("reccbm", preset, asked, used) == want


def test_a_flat_curve_whose_full_qwk_reaches_the_majority_class_says_more_answers_will_not_help() -> None:
    """The introductory-biology quiz's curve: QWK 0.57 at 20 answers, 0.59 with all, the folds' QWK far apart."""
    rows = []
    for fold, (q20, qall) in enumerate(((0.88, 0.90), (0.0, 0.02), (0.58, 0.60), (-0.12, -0.10), (0.52, 0.55))):
        for size, n, q in (("20", 20, q20), ("all", 57, qall)):
            rows.append({"fold": fold, "size": size, "repeat": 0, "variant": "v", "n_train": n, "n_dev": 5,
                         "t_acc": 0.6, "qwk": q, "t_f1": 0.3, "majority_t_acc": 0.3, "majority_qwk": 0.0,
                         "majority_t_f1": 0.1, "encoder_epochs": 0, "train_seconds": 0.0, "encoder": "none",
                         "failing_passed": 0.5, "failing_error": 1.0})
    reading = read_curve(pd.DataFrame(rows))["v"]
    assert reading["status"] == "flat" and reading["reach"] is None
    assert reading["full"]["qwk_lo"] <= 0.0 < reading["full"]["qwk"]
    assert "flat: more answers will not help this recipe" in reading["sentence"]
    assert "reach 90 %" not in reading["sentence"]
    assert "50 % of the failing test answers get a pass mark" in reading["sentence"]
    steady = [r | {"qwk": r["qwk"] * 0.1 + 0.5} for r in rows]  # the same mean, the folds close together
    assert read_curve(pd.DataFrame(steady))["v"]["status"] == "at_smallest"
