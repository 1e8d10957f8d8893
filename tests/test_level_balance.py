"""Rare levels and rare grades weighed up in L_con (stage1.level_balance, stage1.grade_balance): the weights, the
weighted losses, and a reader trained with them reading a rare level more often than one trained without."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reccbm import StageIConfig, predict, train_concepts
from reccbm.errors import ReccbmError
from reccbm.losses import TermWeights, training_term_weights
from reccbm.model import concept_loss, rarity_weights, soft_concept_loss
from tests.support.tiny_models import FAST1, encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_weights_keep_the_mean_at_one_and_make_each_level_weigh_alike_at_one() -> None:
    c = torch.tensor([[0, 2], [2, 2], [2, 2], [2, 2], [1, 2], [2, 1]])
    for balance in (0.5, 1.0, 2.0):
        w = rarity_weights(c, 3, balance)
        per_answer = w.gather(1, c.T).T  # (N, K)
        torch.testing.assert_close(per_answer.mean(0), torch.ones(2))
        assert w[0, 0] > w[0, 2] and w[1, 1] > w[1, 2]  # the rarer level weighs more
        assert w[1, 0] == 1.0  # a level no answer has
    w1 = rarity_weights(c, 3, 1.0)
    counts = F.one_hot(c, 3).sum(0).float()
    totals = (counts * w1)[0]  # concept 0: levels 0, 1, 2 held by 1, 1, 4 answers
    torch.testing.assert_close(totals, torch.full((3,), 2.0))
    torch.testing.assert_close(rarity_weights(c, 3, 0.0), torch.ones(2, 3))


def test_the_weighted_losses_weigh_each_term_by_its_concept_level_and_grade() -> None:
    torch.manual_seed(0)
    logits, c = torch.randn(5, 2, 3), torch.tensor([[0, 1], [2, 2], [1, 0], [2, 2], [0, 2]])
    y = torch.tensor([0, 3, 1, 3, 2])
    W = torch.tensor([[3.0, 0.5, 1.0], [2.0, 4.0, 0.25]])
    v = torch.tensor([5.0, 2.0, 0.5, 0.2])
    batch = {"concepts": c, "grades": y}
    terms = torch.stack([W[k, c[:, k]] for k in range(2)], 1)  # (B, K)
    torch.testing.assert_close(TermWeights(W).of(batch), terms)
    torch.testing.assert_close(TermWeights(None, v).of(batch), v[y].unsqueeze(1).expand(5, 2))
    both = TermWeights(W, v).of(batch)
    assert both is not None
    torch.testing.assert_close(both, terms * v[y].unsqueeze(1))
    ce = F.cross_entropy(logits.reshape(10, 3), c.reshape(10), reduction="none").view(5, 2)
    manual = (ce * both).sum(1).mean()
    torch.testing.assert_close(concept_loss(logits, c, "sum", both), manual)
    torch.testing.assert_close(concept_loss(logits, c, "mean", both), manual / 2)
    torch.testing.assert_close(concept_loss(logits, c, "sum", torch.ones(5, 2)), concept_loss(logits, c, "sum"))
    soft = torch.full((5, 2, 3), 1 / 3)
    target = 0.5 * F.one_hot(c, 3).float() + 0.5 * soft
    soft_manual = -(target * logits.log_softmax(-1)).sum(-1) * both
    torch.testing.assert_close(soft_concept_loss(logits, c, soft, 0.5, "sum", both), soft_manual.sum(1).mean())
    with pytest.raises(ReccbmError, match="grade_balance needs each training answer's grade"):
        TermWeights(None, v).of({"concepts": c})


def test_no_weights_unless_the_recipe_asks() -> None:
    c, y = np.array([[0, 1], [1, 1], [1, 0]]), np.array([0, 2, 2])
    assert training_term_weights(StageIConfig(), c, y, 2, 3) is None
    assert training_term_weights(StageIConfig(level_balance=1.0), None, y, 2, 3) is None
    levels = training_term_weights(StageIConfig(level_balance=1.0), c, y, 2, 3)
    assert levels is not None and levels.levels is not None and levels.levels.shape == (2, 2) and levels.grades is None
    grades = training_term_weights(StageIConfig(grade_balance=1.0), c, y, 2, 3)
    assert grades is not None and grades.levels is None and grades.grades is not None
    torch.testing.assert_close(grades.grades, torch.tensor([1.5, 1.0, 0.75]))  # grade 0 once, grade 2 twice: 1.5 / 0.75
    with pytest.raises(ValueError, match="level_balance and grade_balance are >= 0"):
        StageIConfig(level_balance=-0.5)
    with pytest.raises(ValueError, match="level_balance and grade_balance are >= 0"):
        StageIConfig(grade_balance=-0.5)


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


def test_a_reader_trained_with_rare_grades_weighed_up_reads_their_answers_better(backbone: str) -> None:
    """The toy table's grade 0 answers (6 of 48) are rare; weighed up, their levels are read with a lower loss."""
    loss = {}
    for balance in (0.0, 1.0):
        model, tok = tiny_model(backbone)
        train, dev = encoded(tok, toy_table(48, seed=1)), encoded(tok, toy_table(16, seed=2))
        cfg = StageIConfig(**{**FAST1.__dict__, "epochs": 2, "patience": 5, "grade_balance": balance})
        train_concepts(model, train, dev, cfg, tok.pad_token_id)
        p = predict(model, train, tok.pad_token_id)
        assert p.p_hat is not None and train.concepts is not None and train.grades is not None
        rare = train.grades == 0
        p_true = np.take_along_axis(np.asarray(p.p_hat)[rare], train.concepts[rare][..., None], -1)
        loss[balance] = float(-np.log(p_true).mean())
    assert loss[1.0] < loss[0.0] - 0.05, loss
