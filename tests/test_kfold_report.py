"""A k-fold run of a small course (48 answers of a statistics quiz, grades 0..2, a frozen encoder): folds.md names
what the folds trained with and who made the labels, and marks the folds whose model gives every test answer one
grade."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from tests.support.stats_course import stats_rubric, stats_table
from tests.support.tiny_models import build_backbone

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()
FOLDS = 3


@pytest.fixture(scope="module")
def kfold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(k-fold run, table, rubric): `train --folds 3 --encoder frozen` on 48 answers with a tiny BERT."""
    tmp = tmp_path_factory.mktemp("kfold")
    data, rubric = tmp / "stats.csv", stats_rubric(tmp)
    stats_table(48).to_csv(data, index=False)
    out = tmp / "stats-3fold"
    res = runner.invoke(app, ["train", "--data", str(data), "--rubric", str(rubric), "--backbone",
                              build_backbone(tmp, "bert"), "--epochs", "1", "--max-len", "24", "--device", "cpu",
                              "--lr", "3e-3", "--cfg", "joint.epochs=0", "--folds", str(FOLDS), "--encoder", "frozen",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, data, rubric


def test_folds_md_marks_constant_folds(kfold: tuple[Path, Path, Path]) -> None:
    from rubrictool.train import folds_markdown

    run, _, _ = kfold
    summary = json.loads((run / "folds.json").read_text())
    for row in summary["per_fold"]:
        row |= {"constant": False, "top_grade": 1, "grades_given": [0, 1, 2]}
    summary["per_fold"][0] |= {"constant": True, "top_grade": 1, "grades_given": [1]}
    text = folds_markdown(summary)
    assert "| fold 0 (constant: grade 1) |" in text and "Constant fold: in fold 0 (grade 1)" in text
    assert "| fold 1 |" in text and "| fold 1 (constant" not in text


def test_folds_md_names_the_training_and_the_labels(kfold: tuple[Path, Path, Path]) -> None:
    run, _, _ = kfold
    md = (run / "folds.md").read_text()
    assert "Trained: reccbm, default preset, frozen encoder" in md and "encoder frozen in every fold" in md
    assert "backbone" in md and "Labels:" in md
    summary = json.loads((run / "folds.json").read_text())
    pooled = pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})
    for row in summary["per_fold"]:
        given = sorted(set(pooled.loc[pooled["fold"] == row["fold"], "grade"]))
        assert row["grades_given"] == given and row["constant"] == (len(given) == 1)
        assert (f"| fold {row['fold']} (constant" in md) == row["constant"]
