"""experiments/configs: every screened configuration is either a `--config` file the current code accepts (its
header says how to run it) or says in its header which retired field keeps it to the revision that measured it."""

from __future__ import annotations

import re
from pathlib import Path

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
