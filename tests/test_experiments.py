"""experiments/configs: every screened configuration is either a `--config` file the current code accepts (its
header says how to run it) or says in its header which retired field keeps it to the revision that measured it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rubrictool.errors import TrainError
from rubrictool.train import load_train_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "experiments" / "configs").glob("*.yaml"))
RUNS_NOW = "# Run on the current code: python benchmarks/folds.py --config experiments/configs/"
RETIRED = "# Not a --config file for the current code: "


def test_there_are_configs() -> None:
    assert len(CONFIGS) >= 10


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_a_config_runs_on_the_current_code_or_says_why_not(path: Path) -> None:
    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.startswith("#"))
    assert "git checkout " in header, f"{path.name}: no revision it was measured at"
    if RUNS_NOW in header:
        assert f"{RUNS_NOW}{path.name}" in header, f"{path.name}: the command names another file"
        load_train_config(path)  # accepted as it is
        return
    assert RETIRED in header, f"{path.name}: says neither how to run it now nor why it cannot"
    with pytest.raises(TrainError, match="unknown") as refused:
        load_train_config(path)
    fields = re.findall(r"unknown (\w+) field\(s\) \[([^\]]+)\]", str(refused.value))
    named = [f"{sec}.{name.strip(chr(39))}" for sec, names in fields for name in names.split(", ")]
    assert named and all(n in header for n in named), f"{path.name}: the header does not name {named}"


def _curve_reach(argv: list[str]) -> int:
    import importlib.util

    spec = importlib.util.spec_from_file_location("curve_reach", ROOT / "experiments" / "curve_reach.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return int(mod.main(argv))


def test_curve_reach_reads_the_all_cell_from_a_kept_benchmark_fold_and_refuses_another_split(tmp_path: Path,
                                                                                             capsys: Any) -> None:
    """experiments/curve_reach.py: the 90 % point of a curve whose full-data cell is fold 0 of kept pooled
    predictions, and one line (no output written) when the kept folds are not the curve's."""
    import json

    import pandas as pd

    grades = [5] * 6 + [4] * 3 + [2]  # fold 0's test answers: the majority grade (5) on 6 of 10
    pooled = pd.DataFrame({"id": [str(i) for i in range(30)], "fold": [0] * 10 + [1] * 20,
                           "grade_true": grades + [5] * 14 + [3] * 6, "grade": [5] * 30})
    kept = tmp_path / "kept"
    kept.mkdir()
    pooled.to_csv(kept / "pooled_predictions.csv", index=False)
    meta = {"folds": 2, "by": "question", "fold_seed": 0, "n_items": 30,
            "per_fold": [{"t_acc": 0.8, "qwk": 0.7, "t_f1": 0.5}, {"t_acc": 0.9, "qwk": 0.8, "t_f1": 0.6}]}
    (kept / "folds.json").write_text(json.dumps(meta))
    curve = tmp_path / "curve"
    curve.mkdir()
    cols = {"fold": 0, "repeat": 0, "variant": "reccbm", "n_dev": 1, "t_f1": 0.3, "majority_t_acc": 0.6,
            "majority_qwk": 0.0, "majority_t_f1": 0.1, "encoder_epochs": 0, "train_seconds": 1.0, "encoder": "frozen"}
    pd.DataFrame([{**cols, "size": "5", "n_train": 5, "t_acc": 0.55, "qwk": 0.2},
                  {**cols, "size": "10", "n_train": 10, "t_acc": 0.7, "qwk": 0.66}]).to_csv(curve / "curve.csv", index=False)
    (curve / "curve.json").write_text(json.dumps({"settings": {"folds": 2, "by": "question", "fold_seed": 0}}))

    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "out")]) == 0
    reading = json.loads((tmp_path / "out" / "curve.json").read_text())["reading"]
    assert reading["full"] == {"n_train": 20.0, "qwk": 0.7, "t_acc": 0.8, "majority_t_acc": 0.6}
    assert reading["reach"]["size"] == "10" and reading["reach"]["target"] == pytest.approx(0.63)
    assert 5 < reading["reach"]["n_estimate"] <= 10 and (tmp_path / "out" / "curve.png").stat().st_size > 0

    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(curve)]) == 2  # over its own input
    assert "all" not in set(pd.read_csv(curve / "curve.csv", dtype={"size": str})["size"])
    capsys.readouterr()
    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "out")]) == 0  # its own output again

    pooled.assign(grade_true=[5] * 10 + [5] * 14 + [3] * 6).to_csv(kept / "pooled_predictions.csv", index=False)
    assert _curve_reach([str(curve), "--all-from", str(kept), "--out", str(tmp_path / "other")]) == 2
    assert "not the curve's" in capsys.readouterr().err and not (tmp_path / "other").exists()
