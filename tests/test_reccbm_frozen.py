"""A frozen encoder (StageIConfig.encoder = "frozen"): no stage updates the pretrained weights, only the heads train,
and training on token states computed once gives what running the frozen encoder every step gives."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

import reccbm
from reccbm import JointConfig, ModelConfig, Recipe, StageIConfig, StageIIConfig, TextEncoder, load_tokenizer
from tests.support.tiny_models import FAST1, encoded, fits_counting_encoder_runs, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def _recipe(backbone: str, encoder: str, plm: bool = False, crossfit: int = 0, epochs: int = 2,
            **stage1: Any) -> Recipe:
    model = ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level",
                        plm=plm, race=not plm, lcec=not plm)
    return Recipe(model, replace(FAST1, encoder=encoder, epochs=epochs, **stage1),
                  JointConfig(epochs=0 if plm else 1, lr=3e-3, select="last", intervention_p=0.25),
                  StageIIConfig(lr=0.05, epochs=3, batch_size=8, lcec_fit="dev", crossfit=crossfit))


def _data(backbone: str) -> tuple[Any, reccbm.EncodedItems, reccbm.EncodedItems]:
    tok = load_tokenizer(backbone)
    return tok, encoded(tok, toy_table(48, seed=0)), encoded(tok, toy_table(24, seed=1))


def _changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    return [k for k in a if not torch.equal(a[k], b[k])]


@pytest.mark.parametrize("plm,crossfit", [(False, 0), (False, 2), (True, 0)], ids=["reccbm", "crossfit", "plm"])
def test_a_frozen_encoder_is_bit_identical_after_training_and_a_trained_one_is_not(backbone: str, plm: bool,
                                                                                     crossfit: int) -> None:
    tok, train, dev = _data(backbone)
    pretrained = TextEncoder.from_pretrained(backbone).state_dict()
    frozen = reccbm.fit(train, dev, _recipe(backbone, "frozen", plm, crossfit), tok)
    assert frozen.encoder == "frozen" and frozen.stage1.steps > 0
    assert _changed(pretrained, frozen.model.encoder.state_dict()) == []  # every stage: Stage I, joint, the PLM
    heads = frozen.model.plm_head.weight if isinstance(frozen.model, reccbm.PLM) else frozen.model.bottleneck.V
    reccbm.set_seed(0)  # the initial heads, as fit built them
    fresh = reccbm.build_model(frozen.model.config, TextEncoder.from_pretrained(backbone))
    assert not torch.equal(heads, fresh.plm_head.weight if isinstance(fresh, reccbm.PLM) else fresh.bottleneck.V)
    if not plm:
        assert frozen.joint is not None and frozen.joint.steps > 0
        q, q0 = frozen.model.bottleneck.Q, fresh.bottleneck.Q
        assert q is not None and q0 is not None and not torch.equal(q, q0)
    trained = reccbm.fit(train, dev, _recipe(backbone, "train", plm, crossfit), tok)
    assert trained.encoder == "train"
    assert len(_changed(pretrained, trained.model.encoder.state_dict())) > 0


@pytest.mark.parametrize("plm", [False, True], ids=["reccbm", "plm"])
def test_cached_and_uncached_frozen_training_give_the_same_model(backbone: str, plm: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tok, train, dev = _data(backbone)
    fits, runs = fits_counting_encoder_runs(monkeypatch, lambda cache, epochs: reccbm.fit(
        train, dev, _recipe(backbone, "frozen", plm, epochs=epochs, cache_states=cache), tok))
    cached, uncached = fits[True, 2], fits[False, 2]
    a = reccbm.predict(cached.model, dev, tok.pad_token_id)
    b = reccbm.predict(uncached.model, dev, tok.pad_token_id)
    np.testing.assert_allclose(a.grade_probs, b.grade_probs, atol=1e-5)
    if not plm:
        assert a.p_hat is not None and b.p_hat is not None
        np.testing.assert_allclose(a.p_hat, b.p_hat, atol=1e-5)
    losses = [[h["train_loss"] for h in f.stage1.history] for f in (cached, uncached)]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    # the cache runs the encoder a fixed number of times (states once, the final dev metrics), not once per step
    assert runs[True, 2] == runs[True, 4] < runs[False, 2]
    assert cached.states_seconds > 0 and uncached.states_seconds == 0


def test_auto_freezes_below_the_threshold_of_labelled_answers(backbone: str) -> None:
    cfg = StageIConfig(encoder="auto", frozen_below=100)
    assert cfg.resolved(99).encoder == "frozen" and cfg.resolved(100).encoder == "train"
    assert StageIConfig(encoder="frozen").resolved(10_000).encoder == "frozen"
    tok, train, dev = _data(backbone)  # 48 + 24 labelled answers
    r = _recipe(backbone, "auto", plm=True, frozen_below=len(train) + len(dev) + 1)
    assert reccbm.fit(train, dev, r, tok).encoder == "frozen"
    r = replace(r, stage1=replace(r.stage1, frozen_below=len(train) + len(dev)))
    assert reccbm.fit(train, dev, r, tok).encoder == "train"


def test_an_unknown_encoder_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown encoder 'fixed'; use train or frozen or auto"):
        StageIConfig(encoder="fixed")
    with pytest.raises(ValueError, match="frozen_below"):
        StageIConfig(frozen_below=-1)
