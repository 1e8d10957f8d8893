"""--jobs: folds (and cells, combinations) in worker processes give what the serial run gives, fold for fold; errors
in a worker come back as the same one-line error; what cannot run in parallel is refused before anything trains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool.cli import app
from rubrictool.errors import DataError, TrainError
from rubrictool.train.parallel import check_jobs, run_in_workers, worker_plan
from tests.support.tiny_models import mohler_like_table

pytestmark = pytest.mark.usefixtures("one_thread")


def _overrides(backbone: str) -> dict[str, dict[str, Any]]:
    return {"model": {"max_len": 32, "backbone": backbone}, "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
            "joint": {"epochs": 1}, "stage2": {"epochs": 3}}


def _fold_outputs(run: Path, folds: int) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    per_fold = [json.loads((run / f"fold-{i}" / "metrics.json").read_text())["seeds"][0]["test"] for i in range(folds)]
    return per_fold, pd.read_csv(run / "pooled_predictions.csv", dtype={"id": str})


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_folds_in_two_workers_are_the_serial_folds(tmp_path: Path, backbone: str) -> None:
    """train_folds with jobs=2 (two spawned workers, one thread each) and serially (one thread): every fold's test
    metrics and every pooled prediction, probabilities included, the same."""
    from rubrictool.train import TrainOptions, train_folds

    df = mohler_like_table(48)
    serial = train_folds("mohler", df, tmp_path / "serial", folds=2,
                         options=TrainOptions(overrides=_overrides(backbone)))
    events: list[Any] = []
    par = train_folds("mohler", df, tmp_path / "jobs2", folds=2,
                      options=TrainOptions(overrides=_overrides(backbone)), jobs=2,
                      progress=events.append)
    (m_s, p_s), (m_p, p_p) = _fold_outputs(tmp_path / "serial", 2), _fold_outputs(tmp_path / "jobs2", 2)
    assert _same(m_p, m_s)  # every number to the last bit (NaN where the serial run has NaN)
    pd.testing.assert_frame_equal(p_p, p_s)
    assert _same(par.metrics["folds"]["pooled"], serial.metrics["folds"]["pooled"])
    workers = [e for e in events if e.task == "folds" and "worker" in e.info]
    assert workers and workers[-1].done == 2, [e.info for e in events]
    record = json.loads((tmp_path / "jobs2" / "fold-0" / "run.json").read_text())
    assert record["device"]["device"] == "cpu" and record["device"]["torch"]


def _fails(message: str) -> None:
    raise DataError(message, hint="fix the table")


def test_an_error_in_a_worker_comes_back_whole() -> None:
    with pytest.raises(DataError, match="bad row 3") as exc:
        run_in_workers(_fails, [("one", {"message": "bad row 3"})], jobs=2)
    assert exc.value.hint == "fix the table"


def test_jobs_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TrainError, match="--jobs 0"):
        check_jobs(0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(TrainError, match="accelerate launch"):
        check_jobs(2)
    assert check_jobs(1) == 1
    plan = worker_plan(4, 2)
    assert len(plan) == 2 and all(p["threads"] >= 1 for p in plan)


def test_jobs_without_folds_is_refused_before_training(tmp_path: Path, backbone: str) -> None:
    data = tmp_path / "adjudicated.csv"
    mohler_like_table(40).to_csv(data, index=False)
    res = CliRunner().invoke(app, ["train", "--table", str(data), "--rubric", "mohler", "--backbone", backbone,
                                   "--jobs", "2", "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "--jobs 2 trains folds in parallel" in res.output
    assert not (tmp_path / "run").exists()


def test_curve_cells_in_two_workers_are_the_serial_cells(tmp_path: Path, backbone: str) -> None:
    """learning_curve with jobs=2: every cell's metrics and test predictions are the serial cell's."""
    from rubrictool.curve import CurveOptions, learning_curve
    from rubrictool.train import TrainOptions

    df = mohler_like_table(48)
    kw: dict[str, Any] = {"options": CurveOptions(sizes=[16, "all"], variants=["reccbm"], repeats=1, folds=2,
                                                  fold_ids=[0], plot=False),
                          "training": TrainOptions(overrides=_overrides(backbone))}
    learning_curve("mohler", df, tmp_path / "serial", **kw)
    events: list[Any] = []
    learning_curve("mohler", df, tmp_path / "jobs2", jobs=2, progress=events.append, **kw)
    cells = sorted((tmp_path / "serial" / "cells").glob("*.json"))
    assert len(cells) == 2
    for cell in cells:
        a, b = (json.loads((tmp_path / d / "cells" / cell.name).read_text()) for d in ("serial", "jobs2"))
        a.pop("train_seconds"), b.pop("train_seconds")
        assert _same(a, b), cell.name
    assert any(e.task == "cells in workers" and e.done == 2 for e in events)


def test_ablation_combinations_in_two_workers_are_the_serial_ones(tmp_path: Path, backbone: str) -> None:
    """run_ablation with jobs=2: each combination's run is the serial run (its test metrics to the last bit)."""
    from rubrictool.report.ablate import run_ablation

    data = tmp_path / "adjudicated.csv"
    mohler_like_table(40).to_csv(data, index=False)
    from rubrictool.train import TrainOptions

    options = TrainOptions(overrides={"model": {"backbone": backbone, "max_len": 32},
                                      "stage1": {"epochs": 1, "device": "cpu"}})
    kw: dict[str, Any] = {"variants": ["vanilla", "plm"], "data": data, "rubric": "mohler", "benchmark": None,
                          "options": options, "split_seed": 0, "data_dir": None}
    serial, _ = run_ablation(tmp_path / "serial", **kw)
    par, _ = run_ablation(tmp_path / "jobs2", jobs=2, **kw)
    for name in ("vanilla", "plm"):
        a, b = (json.loads((tmp_path / d / name / "metrics.json").read_text())["seeds"][0]["test"]
                for d in ("serial", "jobs2"))
        assert _same(a, b), name
    pd.testing.assert_frame_equal(serial, par)
