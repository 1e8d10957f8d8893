"""Level-share calibration (``stage2.calibrate``): each concept's level biases fitted on the dev outputs and added to
V_k's bias, so that p̂ gives each level as often as the answers have it, before LCEC and the head are fitted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import reccbm
from reccbm import JointConfig, StageIConfig, StageIIConfig
from reccbm.data import collate
from reccbm.model import calibrated, fit_level_bias
from tests.support.tiny_models import encoded, mohler_like_table, tiny_model, toy_table, train_with_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def _skewed(n: int = 3000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two concepts, three levels: the labels are spread evenly, the outputs lean to the top level (and carry some
    signal: the true level's logit is raised)."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(0, 3, (n, 2), generator=g)
    logits = torch.randn(n, 2, 3, generator=g) + 1.5 * torch.nn.functional.one_hot(c, 3) + torch.tensor([0.0, 0.0, 1.5])
    return logits.softmax(-1), c


def test_the_calibrated_shares_match_the_labels_and_the_fit_is_better() -> None:
    p, c = _skewed()
    b = fit_level_bias(p, c)
    assert b.shape == (2, 3) and bool((b[:, 0] == 0).all())
    q = calibrated(p, b)
    labels = torch.nn.functional.one_hot(c, 3).double().mean(0)  # (K, M+1)
    assert float((p.double().mean(0) - labels).abs().max()) > 0.15  # skewed before ...
    torch.testing.assert_close(q.double().mean(0), labels, atol=5e-3, rtol=0)  # ... the shares of the labels after
    nll = lambda x: float(torch.nn.functional.nll_loss(x.clamp_min(1e-8).log().reshape(-1, 3), c.reshape(-1)))
    assert nll(q) < nll(p) - 0.05
    p_new, c_new = _skewed(seed=1)  # and on answers it was not fitted on, more levels are right
    assert float((calibrated(p_new,
        b).argmax(-1) == c_new).double().mean()) > float((p_new.argmax(-1) == c_new).double().mean())


def test_a_level_no_answer_has_keeps_a_finite_bias() -> None:
    p, c = _skewed(200)
    c[:, 1] = c[:, 1].clamp_max(1)  # concept 1 never at the top level
    b = fit_level_bias(p, c)
    assert bool(torch.isfinite(b).all())
    assert float(calibrated(p, b)[:, 1, 2].mean()) < 0.05


def test_the_bias_added_to_the_bottleneck_gives_the_calibrated_outputs(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(12, seed=3))
    batch = collate(items, list(range(12)), tok.pad_token_id)
    model.eval()
    with torch.no_grad():
        p = model.concepts(batch)[0].softmax(-1)
        b = fit_level_bias(p, torch.tensor(items.concepts))
        model.bottleneck.V_bias.add_(b)
        after = model.concepts(batch)[0].softmax(-1)
    torch.testing.assert_close(after, calibrated(p, b), atol=1e-5, rtol=1e-4)


def _recipe(backbone: str, calibrate: bool) -> reccbm.Recipe:
    mcfg = reccbm.ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level",
                              center=True, condition=True)
    return reccbm.Recipe(mcfg, StageIConfig(lr=3e-3, epochs=1, batch_size=8, eval_batch_size=16, device="cpu"),
                         JointConfig(epochs=1),
                         StageIIConfig(epochs=2, lcec_fit="moments", calibrate=calibrate,
                                       calibrate_min_dev=8)).seeded(0)


def test_fit_calibrates_the_levels_before_lcec_and_the_head(backbone: str) -> None:
    """The same seeds with and without: the encoder, queries and classifiers are the same but for V's bias; LCEC's
    noise and the head are fitted on the calibrated outputs; the dev outputs give the levels as the labels do."""
    _, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(16, seed=2))
    plain = reccbm.fit(train, dev, _recipe(backbone, False), tok).model
    cal = reccbm.fit(train, dev, _recipe(backbone, True), tok).model
    assert isinstance(plain, reccbm.RecCBM) and isinstance(cal, reccbm.RecCBM)
    a, b = plain.state_dict(), cal.state_dict()
    changed = {k for k in a if not torch.equal(a[k], b[k])}
    assert "bottleneck.V_bias" in changed
    # the head (W, U) and LCEC's noise are refitted on the calibrated outputs; nothing before them moved
    assert changed <= {"bottleneck.V_bias", "W.weight", "W.bias", "U", "lcec.eta"}, sorted(changed)
    assert {"W.weight", "lcec.eta"} <= changed
    pad = tok.pad_token_id
    labels = torch.nn.functional.one_hot(torch.tensor(dev.concepts), 3).double().mean(0)
    gap = {name: float((reccbm.cache_concepts(m, dev, pad).double().mean(0) - labels).abs().mean())
           for name, m in (("plain", plain), ("calibrated", cal))}
    assert gap["calibrated"] < gap["plain"]


@pytest.mark.parametrize("stage2", [{"lcec_fit": "train"}, {"lcec_fit": "moments", "crossfit": 2},
                                    {"calibrate_min_dev": 17}])
def test_without_a_head_refitted_on_its_outputs_the_calibration_is_not_applied(
        backbone: str, stage2: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    """LCEC fitted with the head on the training outputs (the paper), or the head refitted on cross-fitted models'
    outputs: calibrating the kept model would leave the head reading outputs it was not fitted on; fewer dev answers
    than calibrate_min_dev (16 here): each level's share is a few answers'. It is skipped and the log says so; the
    bottleneck's bias is the run's without calibration."""
    _, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(16, seed=2))
    models = []
    for calibrate in (False, True):
        r = _recipe(backbone, calibrate)
        r = replace(r, stage2=replace(r.stage2, **stage2))  # type: ignore[arg-type]
        with caplog.at_level("INFO", logger="reccbm"):
            models.append(reccbm.fit(train, dev, r, tok).model)
    assert torch.equal(models[0].state_dict()["bottleneck.V_bias"], models[1].state_dict()["bottleneck.V_bias"])
    assert "stage2.calibrate: not applied" in caplog.text


def test_a_run_says_why_the_calibration_it_asked_for_was_not_applied(tmp_path: Path, backbone: str) -> None:
    """`rubrictool train --cfg stage2.calibrate=true` on a course with fewer dev answers than calibrate_min_dev: the
    run trains, and its notes (printed, and kept in metrics.json) say that and why the calibration was skipped."""
    code, out, run = train_with_cli(tmp_path, backbone, mohler_like_table(40), "--cfg", "stage2.calibrate=true")
    assert code == 0, out
    assert "level calibration (stage2.calibrate) not applied" in " ".join(out.split())
    assert "fewer than stage2.calibrate_min_dev = 50" in (run / "metrics.json").read_text()
