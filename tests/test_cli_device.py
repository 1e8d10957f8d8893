"""The device on the command line: train names it in its first line and in run.json; grade --device."""

from __future__ import annotations

import json
from dataclasses import replace
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
    assert device["kernels"] == torch.backends.cpu.get_cpu_capability() and "processor" in device
    import transformers

    packages = json.loads((run / "run.json").read_text())["packages"]
    assert packages["transformers"] == transformers.__version__ and packages["torch"] == torch.__version__
    data = tmp_path / "new.csv"
    mohler_like_table(12, seed=3).to_csv(data, index=False)
    ok = CliRunner().invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out", str(tmp_path / "g.csv"),
                                  "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    if not torch.cuda.is_available():
        bad = CliRunner().invoke(app, ["grade", "--run", str(run), "--items", str(data), "--out",
                                       str(tmp_path / "g2.csv"), "--device", "cuda"])
        assert bad.exit_code == 1 and "torch sees no CUDA GPU here" in bad.output
        assert "Traceback" not in bad.output and not (tmp_path / "g2.csv").exists()


@pytest.mark.parametrize("scale", [2, 4])
def test_on_a_gpu_a_run_records_and_says_the_scaled_batches(monkeypatch: pytest.MonkeyPatch, scale: int) -> None:
    """With stage1.gpu_batch_scale on a GPU (its device faked: nothing trains), the run's config.yaml holds the stages
    as they run there — the same as lab/configs/gpu-scale{2,4}.yaml on top of the default, what the CPU measured
    of them — and its notes say so; on the CPU the same overrides change nothing."""
    import sys

    import yaml

    from rubrictool.train.recipe import resolve_training
    from rubrictool.train.run import _auto_notes

    asked = {"stage1": {"gpu_batch_scale": scale}}
    on_cpu = resolve_training("mohler", overrides=asked).for_answers(2000)
    assert on_cpu.batch_scale == 1 and on_cpu.recipe.stage1.batch_size == 8
    monkeypatch.setattr(sys.modules["reccbm.fit"], "resolve_device", lambda d=None: torch.device("cuda", 0))
    gpu = resolve_training("mohler", overrides=asked).for_answers(2000)
    assert gpu.batch_scale == scale and gpu.config["stage1"]["batch_size"] == 8 * scale
    assert gpu.config["stage2"]["batch_size"] == 8 * scale and gpu.config["joint"]["lr"] == pytest.approx(5e-5 * scale)
    written = yaml.safe_load((Path(__file__).parents[1] / f"lab/configs/gpu-scale{scale}.yaml").read_text())
    measured = resolve_training("mohler", overrides=written).for_answers(2000).recipe  # what the CPU measured
    assert replace(measured.stage1, gpu_batch_scale=1) == gpu.recipe.stage1 and measured.joint == gpu.recipe.joint
    assert measured.stage2 == gpu.recipe.stage2
    assert any(f"batches of {8 * scale} on the GPU" in n and "gpu_batch_scale=1" in n for n in _auto_notes(gpu))
    assert not any("on the GPU" in n for n in _auto_notes(on_cpu))

