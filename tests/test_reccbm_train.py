"""Training: Algorithm 1's parameter split, every variant, a tiny run that learns, save/load."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from reccbm import (
    ReccbmError,
    StageIConfig,
    StageIIConfig,
    cache_concepts,
    decision_trace,
    load_checkpoint,
    predict,
    save_checkpoint,
    task_metrics,
    train_concepts,
    train_grader,
    train_plm,
)
from tests.support.tiny_models import FAST1, FAST2, encoded, tiny_model, tiny_plm, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")





def _snapshot(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.detach().clone() for p in params]


def _changed(before: list[torch.Tensor], params: list[torch.nn.Parameter]) -> list[bool]:
    return [not torch.equal(b, p.detach()) for b, p in zip(before, params)]


def test_stage1_updates_only_encoder_queries_classifiers_and_stage2_only_L_eta_W(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    s1, s2 = model.stage1_parameters(), model.stage2_parameters()
    assert {id(p) for p in s1}.isdisjoint(id(p) for p in s2)
    assert {id(p) for p in s1} | {id(p) for p in s2} == {id(p) for p in model.parameters()}
    assert model.lcec is not None
    assert any(p is model.bottleneck.Q for p in s1) and any(p is model.lcec.L for p in s2)
    b1, b2 = _snapshot(s1), _snapshot(s2)
    train_concepts(model, train, dev, FAST1, tok.pad_token_id)
    assert not any(_changed(b2, s2)), "Stage I touched L, η or W"
    changed = _changed(b1, s1)
    assert changed[-3:] == [True, True, True], "Q, V and V_bias must move in Stage I"
    assert sum(changed) > len(changed) // 2, "most encoder weights must move in Stage I"
    b1, b2 = _snapshot(s1), _snapshot(s2)
    p_tr, p_dev = cache_concepts(model, train, tok.pad_token_id), cache_concepts(model, dev, tok.pad_token_id)
    train_grader(model, p_tr, torch.as_tensor(train.concepts), torch.as_tensor(train.grades), p_dev,
                 torch.as_tensor(dev.grades), FAST2)
    assert not any(_changed(b1, s1)), "Stage II touched the encoder, Q or V"
    assert all(_changed(b2, s2)), "Stage II must move L, η and W"


@pytest.mark.parametrize(("race", "opcc", "lcec"), list(itertools.product([True, False], repeat=3)))
def test_every_race_opcc_lcec_combination_trains(backbone: str, race: bool, opcc: bool, lcec: bool) -> None:
    model, tok = tiny_model(backbone, race=race, lcec=lcec)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    cfg1 = StageIConfig(lr=1e-3, epochs=1, lambda_r=0.4 if opcc else 0.0, max_steps_per_epoch=1, device="cpu")
    r1 = train_concepts(model, train, dev, cfg1, tok.pad_token_id)
    assert r1.steps == 1 and np.isfinite(r1.history[0]["train_loss"])
    p_tr, p_dev = cache_concepts(model, train, tok.pad_token_id), cache_concepts(model, dev, tok.pad_token_id)
    r2 = train_grader(model, p_tr, torch.as_tensor(train.concepts), torch.as_tensor(train.grades), p_dev,
                      torch.as_tensor(dev.grades), StageIIConfig(epochs=1))
    assert r2.steps == 2
    assert (model.lcec is not None) == lcec and (model.bottleneck.Q is not None) == race


def test_plm_baseline_trains_without_a_bottleneck(backbone: str) -> None:
    model, tok = tiny_plm(backbone)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    r = train_plm(model, train, dev, StageIConfig(lr=1e-3, epochs=1, device="cpu"), tok.pad_token_id)
    assert r.steps == 2 and model.stage2_parameters() == []
    preds = predict(model, dev, tok.pad_token_id)
    assert preds.p_hat is None and preds.grade_probs.shape == (8, 4)
    with pytest.raises(ReccbmError, match="no concept stage"):
        train_concepts(model, train, dev, FAST1, tok.pad_token_id)


def test_tiny_training_run_beats_the_majority_class(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    table = toy_table(160, seed=3)
    items = encoded(tok, table)
    train, dev, test = items.subset(range(112)), items.subset(range(112, 136)), items.subset(range(136, 160))
    cfg1 = StageIConfig(lr=3e-3, epochs=6, batch_size=8, patience=3, device="cpu", lambda_r=0.4)
    r1 = train_concepts(model, train, dev, cfg1, tok.pad_token_id)
    p = {n: cache_concepts(model, s, tok.pad_token_id) for n, s in (("train", train), ("dev", dev))}
    train_grader(model, p["train"], torch.as_tensor(train.concepts), torch.as_tensor(train.grades),
                 p["dev"], torch.as_tensor(dev.grades), StageIIConfig(epochs=30, patience=30))
    preds = predict(model, test, tok.pad_token_id)
    assert test.grades is not None and test.concepts is not None
    assert train.grades is not None and train.concepts is not None
    majority = np.bincount(train.grades).argmax()
    base = task_metrics(test.grades, np.full_like(test.grades, majority))["t_acc"]
    acc = task_metrics(test.grades, preds.grades)["t_acc"]
    c_base = float((test.concepts == np.bincount(train.concepts.ravel()).argmax()).mean())
    assert r1.best["c_acc"] > c_base + 0.1
    assert acc > base, f"T-Acc {acc:.3f} does not beat the majority class {base:.3f}"


def test_save_load_gives_identical_predictions(backbone: str, tmp_path: Path) -> None:
    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(16, seed=4))
    train_concepts(model, items, items, StageIConfig(lr=1e-3, epochs=1, device="cpu"), tok.pad_token_id)
    p = cache_concepts(model, items, tok.pad_token_id)
    train_grader(model, p, torch.as_tensor(items.concepts), torch.as_tensor(items.grades), p,
                 torch.as_tensor(items.grades), StageIIConfig(epochs=2))
    before = predict(model, items, tok.pad_token_id)
    save_checkpoint(model, tok, tmp_path / "run", stage="stage2", step=7, meta={"concept_keys": ["a", "b", "c"]})
    loaded, tok2, meta = load_checkpoint(tmp_path / "run")
    assert meta["stage"] == "stage2" and meta["step"] == 7 and meta["concept_keys"] == ["a", "b", "c"]
    assert loaded.config == model.config
    after = predict(loaded, encoded(tok2, toy_table(16, seed=4)), tok2.pad_token_id)
    np.testing.assert_array_equal(before.grade_probs, after.grade_probs)
    np.testing.assert_array_equal(before.p_hat, after.p_hat)
    trace = decision_trace(loaded, after)
    logit = trace.contributions.sum(1) + trace.bias
    full = (after.mu_post @ loaded.W.weight.detach().numpy().T + loaded.W.bias.detach().numpy())
    np.testing.assert_allclose(logit, full[np.arange(16), trace.grade], rtol=1e-5, atol=1e-5)


def test_bad_inputs_end_in_a_clear_message(backbone: str, tmp_path: Path) -> None:
    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(8))
    with pytest.raises(ReccbmError, match="non-empty dev split"):
        train_concepts(model, items, items.subset([]), FAST1, tok.pad_token_id)
    with pytest.raises(ReccbmError, match="model.json is missing"):
        load_checkpoint(tmp_path)
    with pytest.raises(ReccbmError, match="cannot load backbone"):
        tiny_model(str(tmp_path / "nope"))


def test_centered_prior_mean_is_the_training_label_mean(backbone: str) -> None:
    model, tok = tiny_model(backbone, center=True)
    items = encoded(tok, toy_table(16, seed=5))
    p = cache_concepts(model, items, tok.pad_token_id)
    c, y = torch.as_tensor(items.concepts), torch.as_tensor(items.grades)
    train_grader(model, p, c, y, p, y, StageIIConfig(epochs=1))
    assert model.lcec is not None
    torch.testing.assert_close(model.lcec.mu0, c.float().mean(0) / 2)


def test_the_fused_optimizer_is_the_loop_s_update_and_can_be_turned_off(backbone: str) -> None:
    """AdamW as one fused kernel (stage1.fused_optimizer, on by default) makes the per-tensor loop's update to
    rounding, on every parameter group (decay, no decay, the queries' and the alignment weights' rates); off, the
    loop."""
    from reccbm.train import _fused, _optimizer

    grads: list[torch.Tensor] = []
    start: list[torch.Tensor] = []
    after: dict[bool, list[torch.Tensor]] = {}
    for fused in (True, False):
        torch.manual_seed(0)
        model, _ = tiny_model(backbone)
        params = [p for p in model.stage1_parameters() if p.requires_grad]
        if not grads:
            g = torch.Generator().manual_seed(1)
            grads = [torch.randn(p.shape, generator=g) for p in params]
            start = _snapshot(params)
        opt = _optimizer(model, StageIConfig(fused_optimizer=fused))
        assert bool(opt.defaults.get("fused")) is fused
        assert len(opt.param_groups) >= 3  # decay, no decay, the queries
        for _ in range(3):
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            opt.step()
        after[fused] = _snapshot(params)
    assert all(not torch.equal(a, b) for a, b in zip(start, after[True]))  # every parameter moved
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(after[True], after[False]))
    elsewhere = torch.nn.Parameter(torch.zeros(2, device="meta"))  # a device without the fused kernel: the loop
    assert _fused([{"params": [elsewhere]}], True) is None and _fused([{"params": params}], True) is True


def test_the_embeddings_stay_pretrained_when_asked_and_the_layers_train(backbone: str) -> None:
    """stage1.freeze_embeddings: an encoder stage moves the transformer layers and not the input embeddings (word,
    position, token type and their norm), and the optimiser does not hold them; off (the default), they move too."""
    from reccbm.encoder import parameter_depths

    for freeze in (True, False):
        torch.manual_seed(0)
        model, tok = tiny_model(backbone)
        train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
        depths, L = parameter_depths(model.encoder)
        assert L == model.encoder.hf_config.num_hidden_layers
        embeddings = [p for p in model.encoder.parameters() if depths[id(p)] == 0]
        layers = [p for p in model.encoder.parameters() if 1 <= depths[id(p)] <= L]
        assert len(embeddings) == 5 and layers  # word, position, token type, LayerNorm weight and bias
        e0, l0 = _snapshot(embeddings), _snapshot(layers)
        train_concepts(model, train, dev, dataclasses.replace(FAST1, freeze_embeddings=freeze),
                       tok.pad_token_id)
        assert any(_changed(e0, embeddings)) is not freeze
        assert sum(_changed(l0, layers)) > len(layers) // 2


def test_weight_average_follows_each_step_and_restores_the_weights() -> None:
    """WeightAverage: θ̄ ← θ̄ + (1 − d_t)(θ − θ̄), d_t = min(decay, (1 + t)/(10 + t)); applied() swaps θ̄ in and puts θ
    back bit for bit."""
    from reccbm.stages import WeightAverage

    p = torch.nn.Parameter(torch.tensor([0.0, 1.0]))
    avg = WeightAverage([p], 0.5)
    expected = p.detach().clone()
    for t, value in enumerate(([1.0, 1.0], [3.0, -1.0], [2.0, 5.0])):
        with torch.no_grad():
            p.copy_(torch.tensor(value))
        avg.update()
        d = min(0.5, (1 + t) / (10 + t))
        expected = expected + (1 - d) * (torch.tensor(value) - expected)
        torch.testing.assert_close(avg.average[0], expected)
    raw = p.detach().clone()
    with avg.applied():
        torch.testing.assert_close(p.detach(), expected)
    assert torch.equal(p.detach(), raw)
    with pytest.raises(ValueError, match="decay"):
        WeightAverage([p], 1.0)
    with pytest.raises(ValueError, match="ema"):
        StageIConfig(ema=1.0)


def test_an_encoder_stage_keeps_the_weights_average(backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """stage1.ema: the model a stage keeps is the moving average of its trained weights after its steps (evaluated
    and selected as such), not the last step's; off (the default), the last step's."""
    from reccbm import stages

    kept: dict[float, dict[str, torch.Tensor]] = {}
    seen: list[stages.WeightAverage] = []
    real_init = stages.WeightAverage.__init__

    def spy(self: stages.WeightAverage, params: list[torch.nn.Parameter], decay: float) -> None:
        real_init(self, params, decay)
        seen.append(self)

    monkeypatch.setattr(stages.WeightAverage, "__init__", spy)
    evaluated: list[list[torch.Tensor]] = []  # θ̄ at each epoch's evaluation
    real_applied = stages.WeightAverage.applied

    def applied(self: stages.WeightAverage) -> Any:
        evaluated.append([a.clone() for a in self.average])
        return real_applied(self)

    monkeypatch.setattr(stages.WeightAverage, "applied", applied)
    for ema in (0.0, 0.9):
        torch.manual_seed(0)
        model, tok = tiny_model(backbone)
        train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
        seen.clear()
        evaluated.clear()
        res = train_concepts(model, train, dev, dataclasses.replace(FAST1, epochs=2, ema=ema), tok.pad_token_id)
        kept[ema] = {k: v.clone() for k, v in model.state_dict().items()}
        if ema == 0.0:
            assert not seen
            continue
        (avg,) = seen
        assert avg.t == res.steps > 0 and len(evaluated) == 2  # one evaluation an epoch, with θ̄
        names = {id(p): n for n, p in model.named_parameters()}
        trained = [names[id(p)] for p in avg.params]
        assert names[id(model.bottleneck.Q)] in trained and len(trained) == len(
            [p for p in model.stage1_parameters() if p.requires_grad])
        assert res.best_epoch in (1, 2)
        for name, a in zip(trained, evaluated[res.best_epoch - 1]):  # the selected epoch's average, bit for bit
            assert torch.equal(kept[ema][name], a), name
    moved = [k for k in kept[0.0] if not torch.equal(kept[0.0][k], kept[0.9][k])]
    assert moved, "the average keeps other weights than the last step"


def test_layer_decay_gives_each_depth_its_rate(backbone: str) -> None:
    """stage1.layer_decay: layer l of L at lr × decay^(L + 1 − l), the embeddings at lr × decay^(L + 1), the heads
    (queries at their multiplier) and what sits above the layers at their own rate; 1 keeps the three groups."""
    from reccbm.encoder import parameter_depths
    from reccbm.train import _optimizer

    model, _ = tiny_model(backbone)
    depths, L = parameter_depths(model.encoder)
    cfg = StageIConfig(lr=1e-3, layer_decay=0.5, query_lr_multiplier=2.0)
    rate = {id(p): g["lr"] for g in _optimizer(model, cfg).param_groups for p in g["params"]}
    assert len(rate) == len(model.stage1_parameters())  # every parameter once
    for p in model.encoder.parameters():
        assert rate[id(p)] == pytest.approx(1e-3 * 0.5 ** (L + 1 - depths[id(p)]))
    assert rate[id(model.bottleneck.Q)] == pytest.approx(2e-3)
    assert rate[id(model.bottleneck.V)] == pytest.approx(1e-3)
    assert len(_optimizer(model, StageIConfig(lr=1e-3)).param_groups) == 3
    with pytest.raises(ValueError, match="layer_decay"):
        StageIConfig(layer_decay=0.0)
    with pytest.raises(ReccbmError, match="cannot tell the layers"):
        parameter_depths(torch.nn.Sequential(torch.nn.Embedding(3, 2), torch.nn.Linear(2, 2)))

