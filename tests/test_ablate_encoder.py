"""`rubrictool ablate --variants reccbm,reccbm-frozen,plm-frozen` on a course that is not Mohler (ecology: three
concepts on levels 0..2, grades 1..4): each encoder choice is its own run and row, and a frozen run's encoder is the
pretrained one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

import reccbm
from rubrictool.cli import app
from tests.support.tiny_models import build_backbone
from tests.support.toy_course import ecology_rubric, ecology_table

pytestmark = pytest.mark.usefixtures("one_thread")

runner = CliRunner()


def test_ablate_trains_frozen_variants_as_their_own_rows(tmp_path: Path) -> None:
    data = tmp_path / "ecology.csv"
    ecology_table(48).to_csv(data, index=False)
    backbone = build_backbone(tmp_path, "bert")
    out = tmp_path / "abl"
    args = ["ablate", "--table", str(data), "--rubric", str(ecology_rubric(tmp_path)), "--variants",
            "plm-frozen,reccbm,reccbm-frozen", "--backbone", backbone, "--epochs", "1", "--max-len", "32",
            "--device", "cpu", "--preset", "plain", "--out", str(out)]  # plain: "reccbm" fine-tunes at any size
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    t = pd.read_csv(out / "ablation.csv")
    assert list(t["variant"]) == ["reccbm", "reccbm-frozen", "plm-frozen"]  # the combinations' order
    assert list(t["encoder"]) == ["train", "frozen", "frozen"] and t["t_acc_mean"].between(0, 1).all()
    assert "| reccbm-frozen | ✓ | ✓ | ✓ | frozen |" in (out / "ablation.md").read_text()
    pretrained = reccbm.TextEncoder.from_pretrained(backbone).state_dict()
    for name, frozen in (("reccbm", False), ("reccbm-frozen", True), ("plm-frozen", True)):
        cfg = yaml.safe_load((out / name / "config.yaml").read_text())
        assert cfg["stage1"]["encoder"] == ("frozen" if frozen else "train")
        model, _, _ = reccbm.load_checkpoint(out / name)
        same = all(torch.equal(v, model.encoder.state_dict()[k]) for k, v in pretrained.items())
        assert same == frozen, name
    res = runner.invoke(app, args)  # resumable: every run is read back
    assert res.exit_code == 0 and res.output.count("finished earlier, read back") == 3
    res = runner.invoke(app, [*args[:6], "reccbm-fixed", *args[7:]])
    assert res.exit_code == 1 and "unknown variant(s) ['reccbm-fixed']" in res.output
