"""A k-fold run of a small course (48 answers of a statistics quiz, grades 0..2, a frozen encoder) as a department
reads it: one pooled page with every metric beside the majority class and the points grader, each with its CI; the
constant folds marked there and in folds.md; a fold's own page that knows it is a fold; and fold runs that keep one
copy of a frozen encoder between them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.errors import TrainError
from rubrictool.points import fit_points, points_baseline
from rubrictool.rubric import load_rubric
from rubrictool.train.runs import open_run
from tests.support.stats_course import STATS_KEYS, stats_rubric, stats_table
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
    res = runner.invoke(app, ["train", "--table", str(data), "--rubric", str(rubric), "--backbone",
                              build_backbone(tmp, "bert"), "--epochs", "1", "--max-len", "24", "--device", "cpu",
                              "--lr", "3e-3", "--cfg", "joint.epochs=0", "--folds", str(FOLDS), "--encoder", "frozen",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, data, rubric


def _table_rows(md: str, heading: str) -> list[list[str]]:
    """The body rows of the first Markdown table under ``## heading``."""
    part = md.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("|")]
    body = []
    for line in rows[2:]:
        body.append([c.strip() for c in line.strip("|").split("|")])
    return body


def test_report_on_a_kfold_run_is_one_pooled_page(kfold: tuple[Path, Path, Path]) -> None:
    run, data, rubric = kfold
    res = runner.invoke(app, ["report", "--run", str(run)])
    assert res.exit_code == 0, res.output
    out = run / "report"
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert f"{FOLDS} folds, 48 answers pooled" in md and "<h2>Verdict</h2>" in page
    pooled = pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})
    table = pd.read_csv(out / "pooled_metrics.csv").set_index("metric")
    t = pooled["grade_true"].to_numpy()
    assert table.loc["t_acc", "model_value"] == pytest.approx(float((pooled["grade"].to_numpy() == t).mean()))
    assert table.loc["t_acc", "majority_value"] == pytest.approx(float((pooled["majority"].to_numpy() == t).mean()))
    # the points grader, fitted on each fold's training answers (the other folds), graded from the adjudicated levels
    rb = load_rubric(rubric)
    df = pd.read_csv(data, dtype={"id": str}).set_index("id")
    points = np.zeros(len(pooled), dtype=int)
    for f in range(FOLDS):
        test = (pooled["fold"] == f).to_numpy()
        train_ids, test_ids = pooled.loc[~test, "id"], pooled.loc[test, "id"]
        fp = fit_points(rb, df.loc[train_ids, STATS_KEYS].to_numpy() - rb.scale.min,
                        df.loc[train_ids, "grade"].to_numpy())
        points[test] = points_baseline(rb, df.loc[test_ids, STATS_KEYS].to_numpy() - rb.scale.min, points=fp.points,
                                       grading=fp.grading)
    assert table.loc["t_acc", "points_value"] == pytest.approx(float((np.clip(points, 0, 2) == t).mean()))
    for who in ("model", "majority", "points"):  # every value with its interval
        assert (table[f"{who}_lo"] <= table[f"{who}_value"] + 1e-9).all()
        assert (table[f"{who}_value"] <= table[f"{who}_hi"] + 1e-9).all()
    # on the page, every number of the metric table has an interval beside it, and baselines beside the model
    head = next(line for line in md.split("## Grade metrics", 1)[1].splitlines() if line.startswith("|"))
    assert "majority class [95 % CI]" in head and "points grader [95 % CI]" in head
    for row in _table_rows(md, "Grade metrics"):
        assert all("[" in c and "]" in c for c in row[1:]), row
    per_fold = _table_rows(md, "Per fold")
    assert [r[0] for r in per_fold] == [f"fold {i}" for i in range(FOLDS)]
    assert all("[" in c for r in per_fold for c in (r[3], r[4], r[5], r[6]))
    # the verdict draws on the intervals; what trained and who labelled
    verdict = md.split("## Verdict", 1)[1].split("##", 1)[0]
    assert "the majority class: T-Acc" in verdict and "paired 95 % CI" in verdict and "points" in verdict
    assert not re.search(r"\bnan\b", md)
    assert "Trained: reccbm, default preset" in md and "encoder frozen in every fold" in md and "Labels:" in md
    assert "pass one of its folds" not in res.output and "48 answers pooled" in " ".join(res.output.split())


def test_constant_folds_are_marked(kfold: tuple[Path, Path, Path], tmp_path: Path) -> None:
    run, _, _ = kfold
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    pooled = pd.read_csv(copy / "pooled_predictions.csv", dtype={"id": str})
    pooled["grade"] = pooled["grade_true"]  # folds 1 and 2 grade every answer right ...
    pooled.loc[pooled["fold"] == 0, "grade"] = 1  # ... and fold 0's model gives every test answer grade 1
    pooled.to_csv(copy / "pooled_predictions.csv", index=False)
    res = runner.invoke(app, ["report", "--run", str(copy)])
    assert res.exit_code == 0, res.output
    md = (copy / "report" / "report.md").read_text()
    rows = {r[0]: r for r in _table_rows(md, "Per fold")}
    assert rows["fold 0"][2] == "constant: grade 1 for every answer"
    assert all("constant" not in rows[f"fold {i}"][2] for i in range(1, FOLDS))
    assert "In fold 0 (grade 1) the model gives every test answer one grade" in md


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


def test_a_folds_own_report_knows_it_is_a_fold(kfold: tuple[Path, Path, Path], tmp_path: Path) -> None:
    run, _, _ = kfold
    res = runner.invoke(app, ["report", "--run", str(run / "fold-0"), "--out", str(tmp_path / "r0")])
    assert res.exit_code == 0, res.output
    md = " ".join((tmp_path / "r0" / "report.md").read_text().split())
    assert "train with --folds 5" not in md and "--folds 5" not in md
    assert f"fold 0 of a {FOLDS}-fold run" in md and f"rubrictool report --run {run.resolve()}" in md


def test_fold_runs_keep_one_copy_of_a_frozen_encoder(kfold: tuple[Path, Path, Path], tmp_path: Path) -> None:
    from safetensors import safe_open

    run, _, _ = kfold
    shared = sorted((run / "shared").glob("encoder-*.safetensors"))
    assert len(shared) == 1  # the frozen encoder is the backbone's own weights in every fold: stored once
    enc_keys = set(safe_open(str(shared[0]), "pt").keys())  # type: ignore[no-untyped-call]
    assert enc_keys and all(k.startswith("encoder.") for k in enc_keys)
    for i in range(FOLDS):
        fold = open_run(run / f"fold-{i}")
        assert not set(safe_open(str(fold.path / "model.safetensors"), "pt").keys()) & enc_keys  # type: ignore[no-untyped-call]
        meta = json.loads((fold.path / "model.json").read_text())
        assert meta["encoder_weights"]["file"] == f"../shared/{shared[0].name}"
        model = fold.model  # loads the heads and the shared encoder
        state = model.state_dict()
        with safe_open(str(shared[0]), "pt") as f:
            assert all(bool((state[k] == f.get_tensor(k)).all()) for k in enc_keys)
    # a fold taken out of its k-fold folder says where its encoder is
    alone = tmp_path / "fold-0"
    shutil.copytree(run / "fold-0", alone)
    with pytest.raises(TrainError, match="inside its k-fold folder"):
        _ = open_run(alone).model
