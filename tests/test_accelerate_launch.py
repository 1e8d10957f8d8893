"""One training run under ``accelerate launch`` (docs/gpu.md): the same code as a plain process. Here with one CPU
process (no GPU on CI); several GPUs or machines are documented, not tested."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys
import numpy as np
import torch
torch.set_num_threads(1)
import reccbm
from reccbm import JointConfig, ModelConfig, Recipe, StageIConfig, StageIIConfig, load_tokenizer
from tests.support.tiny_models import encoded, toy_table

backbone, out = sys.argv[1], sys.argv[2]
tok = load_tokenizer(backbone)
train, dev = encoded(tok, toy_table(32, seed=1)), encoded(tok, toy_table(8, seed=2))
mcfg = ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level", center=True)
recipe = Recipe(mcfg, StageIConfig(lr=3e-3, epochs=1, batch_size=8, eval_batch_size=16),
                JointConfig(epochs=1, select="last"), StageIIConfig(epochs=3, lcec_fit="dev")).seeded(0)
fitted = reccbm.fit(train, dev, recipe, tok)
from accelerate import PartialState
state = PartialState()
np.savez(out, probs=reccbm.predict(fitted.model, dev, tok.pad_token_id).grade_probs,
         processes=state.num_processes, distributed=str(state.distributed_type))
"""


def _fit(backbone: str, out: Path, launcher: list[str]) -> dict[str, object]:
    script = out.parent / "fit_once.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    res = subprocess.run([*launcher, str(script), backbone, str(out)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_fit_under_accelerate_launch_is_the_plain_fit(backbone: str, tmp_path: Path) -> None:
    """reccbm.fit in `accelerate launch --cpu --num_processes 1` (the launcher's environment, one process) gives the
    numbers a plain process gives."""
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launched = _fit(backbone, tmp_path / "launched.npz", launch)
    plain = _fit(backbone, tmp_path / "plain.npz", [sys.executable])
    assert str(launched["processes"]) == "1"
    np.testing.assert_array_equal(launched["probs"], plain["probs"])
