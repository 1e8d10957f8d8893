"""Rare levels weighed up in L_con (stage1.level_balance): the weights, the weighted losses, and a reader trained with
them reading a rare level more often than one trained without."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reccbm import StageIConfig, predict, train_concepts
from reccbm.losses import training_level_weights
from reccbm.model import concept_loss, level_weights, soft_concept_loss
from tests.support.tiny_models import FAST1, encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_weights_keep_the_mean_at_one_and_make_each_level_weigh_alike_at_one() -> None:
    c = torch.tensor([[0, 2], [2, 2], [2, 2], [2, 2], [1, 2], [2, 1]])
    for balance in (0.5, 1.0, 2.0):
        w = level_weights(c, 3, balance)
        per_answer = w.gather(1, c.T).T  # (N, K)
        torch.testing.assert_close(per_answer.mean(0), torch.ones(2))
        assert w[0, 0] > w[0, 2] and w[1, 1] > w[1, 2]  # the rarer level weighs more
        assert w[1, 0] == 1.0  # a level no answer has
    w1 = level_weights(c, 3, 1.0)
    counts = F.one_hot(c, 3).sum(0).float()
    totals = (counts * w1)[0]  # concept 0: levels 0, 1, 2 held by 1, 1, 4 answers
    torch.testing.assert_close(totals, torch.full((3,), 2.0))
    torch.testing.assert_close(level_weights(c, 3, 0.0), torch.ones(2, 3))


def test_the_weighted_losses_weigh_each_term_by_its_concept_and_level() -> None:
    torch.manual_seed(0)
    logits, c = torch.randn(5, 2, 3), torch.tensor([[0, 1], [2, 2], [1, 0], [2, 2], [0, 2]])
    w = torch.tensor([[3.0, 0.5, 1.0], [2.0, 4.0, 0.25]])
    ce = F.cross_entropy(logits.reshape(10, 3), c.reshape(10), reduction="none").view(5, 2)
    manual = (ce * torch.stack([w[k, c[:, k]] for k in range(2)], 1)).sum(1).mean()
    torch.testing.assert_close(concept_loss(logits, c, "sum", w), manual)
    torch.testing.assert_close(concept_loss(logits, c, "mean", w), manual / 2)
    torch.testing.assert_close(concept_loss(logits, c, "sum", torch.ones(2, 3)), concept_loss(logits, c, "sum"))
    soft = torch.full((5, 2, 3), 1 / 3)
    target = 0.5 * F.one_hot(c, 3).float() + 0.5 * soft
    soft_manual = (-(target * logits.log_softmax(-1)).sum(-1) * torch.stack([w[k, c[:, k]] for k in range(2)], 1))
    torch.testing.assert_close(soft_concept_loss(logits, c, soft, 0.5, "sum", w), soft_manual.sum(1).mean())


def test_no_weights_unless_the_recipe_asks() -> None:
    c = np.array([[0, 1], [1, 1]])
    assert training_level_weights(StageIConfig(), c, 2) is None
    assert training_level_weights(StageIConfig(level_balance=1.0), None, 2) is None
    w = training_level_weights(StageIConfig(level_balance=1.0), c, 2)
    assert w is not None and w.shape == (2, 2)
    with pytest.raises(ValueError, match="level_balance is >= 0"):
        StageIConfig(level_balance=-0.5)


def _rare_level_table(n: int, seed: int) -> dict[str, Any]:
    """The toy table with concept 0 at level 0 in about one answer in eight."""
    table = toy_table(n, seed=seed)
    c = table["c"].copy()
    rng = np.random.default_rng(seed)
    rare = rng.random(n) < 0.125
    c[:, 0] = np.where(rare, 0, np.maximum(c[:, 0], 1))
    words = {0: "wrong", 1: "maybe", 2: "right"}
    table["r"] = [" ".join([words[int(c[i, 0])], *str(r).split()[1:]]) for i, r in enumerate(table["r"])]
    table["c"] = c
    return table


def test_a_reader_trained_with_rare_levels_weighed_up_reads_the_rare_level_more(backbone: str) -> None:
    shares = {}
    for balance in (0.0, 1.0):
        model, tok = tiny_model(backbone)
        train, dev = encoded(tok, _rare_level_table(48, 1)), encoded(tok, _rare_level_table(16, 2))
        cfg = StageIConfig(**{**FAST1.__dict__, "epochs": 2, "patience": 5, "level_balance": balance})
        train_concepts(model, train, dev, cfg, tok.pad_token_id)
        p = predict(model, train, tok.pad_token_id)
        assert p.p_hat is not None and train.concepts is not None
        rare = train.concepts[:, 0] == 0
        shares[balance] = float(np.asarray(p.p_hat)[rare, 0, 0].mean())
    assert shares[1.0] > shares[0.0] + 0.01, shares
