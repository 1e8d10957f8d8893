"""The device on the command line: train names it in its first line and in run.json; grade --device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rubrictool.cli import app
from tests.support.tiny_models import mohler_like_table, train_with_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def test_train_names_its_device_first_and_grade_takes_one(tmp_path: Path, backbone: str) -> None:
    code, output, run = train_with_cli(tmp_path, backbone, mohler_like_table(40))
    assert code == 0, output
    assert output.splitlines()[0].startswith("training on the CPU ("), output[:300]
    device = json.loads((run / "run.json").read_text())["device"]
    assert device["device"] == "cpu" and device["torch"] == torch.__version__ and device["threads"] >= 1
    import transformers

    packages = json.loads((run / "run.json").read_text())["packages"]
    assert packages["transformers"] == transformers.__version__ and packages["torch"] == torch.__version__
    data = tmp_path / "new.csv"
    mohler_like_table(12, seed=3).to_csv(data, index=False)
    ok = CliRunner().invoke(app, ["grade", "--run", str(run), "--data", str(data), "--out", str(tmp_path / "g.csv"),
                                  "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    if not torch.cuda.is_available():
        bad = CliRunner().invoke(app, ["grade", "--run", str(run), "--data", str(data), "--out",
                                       str(tmp_path / "g2.csv"), "--device", "cuda"])
        assert bad.exit_code == 1 and "torch sees no CUDA GPU here" in bad.output
        assert "Traceback" not in bad.output and not (tmp_path / "g2.csv").exists()
