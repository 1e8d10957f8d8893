"""The grader-quality levers on a tiny model: level head, joint stage, rubric queries, L_con reduction,
Stage II selection, interventions and attention diagnostics."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import reccbm
import reccbm.train
from reccbm import (
    JointConfig,
    StageIIConfig,
    attention_diagnostics,
    cache_concepts,
    decision_trace,
    grades_from_levels,
    init_rubric_queries,
    predict,
    train_concepts,
    train_grader,
    train_joint,
)
from reccbm.data import EncodedItems, collate, encode_inputs
from reccbm.model import concept_loss, rubric_queries
from tests.support.tiny_models import FAST1, FAST2, encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")





def _random_head(model: torch.nn.Module) -> None:
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.stage2_parameters():  # type: ignore[operator]
            p.normal_(0, 0.5) if p.ndim != 2 or p.shape[0] != p.shape[1] else None


@pytest.mark.parametrize("lcec", [True, False])
@pytest.mark.parametrize("head", ["scalar", "level"])
def test_contributions_plus_bias_equal_the_grade_logit(backbone: str, head: str, lcec: bool) -> None:
    model, tok = tiny_model(backbone, head=head, lcec=lcec)
    _random_head(model)
    items = encoded(tok, toy_table(12))
    preds = predict(model, items, tok.pad_token_id)
    tr = decision_trace(model, preds)
    assert tr.contributions.shape == (12, 3)
    with torch.no_grad():
        logits = model.grade_from_concepts(torch.as_tensor(preds.p_hat)).grade_logits.numpy()  # (N, S+1)
    chosen = logits[np.arange(12), tr.grade]
    np.testing.assert_allclose(tr.contributions.sum(1) + tr.bias, chosen, rtol=1e-5, atol=1e-5)


def test_level_head_has_a_weight_per_level_and_starts_as_the_scalar_head(backbone: str) -> None:
    level, _tok = tiny_model(backbone, head="level", lcec=False)
    scalar, _ = tiny_model(backbone, head="scalar", lcec=False)
    assert level.U is not None and tuple(level.U.shape) == (4, 3, 3)  # (S+1, K, M+1)
    assert scalar.U is None and any(p is level.U for p in level.stage2_parameters())
    scalar.load_state_dict({k: v for k, v in level.state_dict().items() if k != "U"})
    p = torch.softmax(torch.randn(5, 3, 3), -1)
    torch.testing.assert_close(level.grade_from_concepts(p).grade_logits, scalar.grade_from_concepts(p).grade_logits)
    with torch.no_grad():  # without LCEC μ_post = ĉ/M: a level weight adds to its grade's logit at its level
        level.U[2, 1, 0] = 1.5
    onehot = torch.zeros(1, 3, 3)
    onehot[0, :, 1] = 1.0
    base = level.grade_from_concepts(onehot).grade_logits
    onehot[0, 1] = torch.tensor([1.0, 0.0, 0.0])
    moved = level.grade_from_concepts(onehot).grade_logits
    delta = (moved - base)[0].detach()
    assert math.isclose(float(delta[2] - delta[0]), 1.5 + (level.W.weight[2, 1] - level.W.weight[0, 1]).item() * -0.5,
                        rel_tol=1e-4, abs_tol=1e-5)


def test_concept_loss_mean_is_the_sum_over_K() -> None:
    logits, c = torch.randn(4, 5, 3), torch.randint(0, 3, (4, 5))
    torch.testing.assert_close(concept_loss(logits, c, "mean") * 5, concept_loss(logits, c, "sum"))


def test_rubric_queries_are_unit_centred_directions(backbone: str) -> None:
    E = torch.randn(4, 16) + 5.0  # a large shared component, as pooled embeddings have
    Q = rubric_queries(E)
    torch.testing.assert_close(Q.norm(dim=1), torch.ones(4))
    centred = E - E.mean(0)
    for k in range(4):  # each q_k points along its centred embedding
        assert float(torch.nn.functional.cosine_similarity(Q[k], centred[k], dim=0)) > 0.999
    model, tok = tiny_model(backbone, query_init="rubric")
    before = model.bottleneck.Q.detach().clone()
    Q = init_rubric_queries(model, tok, ["stack first out", "queue first in", "pointer node memory"])
    assert torch.equal(model.bottleneck.Q.detach(), Q) and not torch.equal(Q, before)
    with pytest.raises(Exception, match="concept texts"):
        init_rubric_queries(model, tok, ["only one"])


def test_joint_stage_updates_encoder_concept_heads_and_grade_head(backbone: str) -> None:
    model, tok = tiny_model(backbone, head="level")
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    r1 = train_concepts(model, train, dev, FAST1, tok.pad_token_id)
    p_tr, p_dev = cache_concepts(model, train, tok.pad_token_id), cache_concepts(model, dev, tok.pad_token_id)
    train_grader(model, p_tr, torch.tensor(train.concepts), torch.tensor(train.grades), p_dev,
                 torch.tensor(dev.grades), FAST2)
    enc = [p.detach().clone() for p in model.encoder.parameters()]
    V, W, U = (t.detach().clone() for t in (model.bottleneck.V, model.W.weight, model.U))
    # c_acc_drop = 1: any epoch may be selected; epoch 0 (the start) competes too
    joint = JointConfig(epochs=2, lr=3e-3, head_lr=1e-2, c_acc_drop=1.0)
    res = train_joint(model, train, dev, FAST1, joint, FAST2, tok.pad_token_id, r1.best["c_acc"])
    assert [h["epoch"] for h in res.history] == [0, 1, 2]
    assert {"t_f1", "t_acc", "c_acc"} <= set(res.best)
    if res.best_epoch > 0:
        assert any(not torch.equal(b, p.detach()) for b, p in zip(enc, model.encoder.parameters()))
        assert not torch.equal(V, model.bottleneck.V.detach())
        assert not torch.equal(W, model.W.weight.detach()) and not torch.equal(U, model.U.detach())
    else:  # the start was best on dev: the model is exactly the start
        assert all(torch.equal(b, p.detach()) for b, p in zip(enc, model.encoder.parameters()))


def test_joint_stage_moves_every_trainable_part(backbone: str) -> None:
    """Gradients of the joint loss reach the encoder, queries, concept classifiers, LCEC and the head."""
    from reccbm.losses import joint_loss as _joint_loss

    model, tok = tiny_model(backbone, head="level")
    batch = collate(encoded(tok, toy_table(8)), list(range(8)), tok.pad_token_id)
    _joint_loss(FAST1, JointConfig(epochs=1), FAST2)(model, batch).backward()  # type: ignore[no-untyped-call]
    named = dict(model.named_parameters())
    for name in ("bottleneck.Q", "bottleneck.V", "W.weight", "U", "lcec.eta"):
        g = named[name].grad
        assert g is not None and float(g.abs().sum()) > 0, name
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in model.encoder.parameters())


def test_joint_selection_respects_the_concept_accuracy_floor(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    # an impossible floor: no epoch qualifies, so selection falls back to T-F1 among all of them
    res = train_joint(model, train, dev, FAST1, JointConfig(epochs=1, lr=1e-3), FAST2, tok.pad_token_id, 2.0)
    assert res.best["t_f1"] == max(h["t_f1"] for h in res.history)
    # a floor every epoch meets: the selected epoch has the best T-F1
    res = train_joint(model, train, dev, FAST1, JointConfig(epochs=1, lr=1e-3, c_acc_drop=5.0), FAST2,
                      tok.pad_token_id, 0.0)
    assert res.best["t_f1"] == max(h["t_f1"] for h in res.history)


def test_joint_select_last_keeps_the_final_state_whatever_dev_says(backbone: str) -> None:
    """select="last": every epoch runs (no early stop, even at patience 1 on a dev set that cannot improve),
    the start is no candidate, and the model is the state after the last epoch."""
    from dataclasses import replace

    model, tok = tiny_model(backbone, head="level")
    train, dev = encoded(tok, toy_table(16, seed=1)), encoded(tok, toy_table(8, seed=2))
    seen: list[dict[str, torch.Tensor]] = []
    real_predict = reccbm.train.predict

    def spy(m, *a, **k):  # type: ignore[no-untyped-def]
        seen.append({n: t.detach().clone() for n, t in m.state_dict().items()})
        return real_predict(m, *a, **k)

    cfg = replace(FAST1, patience=1)
    joint = JointConfig(epochs=3, lr=3e-3, head_lr=1e-2, select="last")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reccbm.train, "predict", spy)
        res = train_joint(model, train, dev, cfg, joint, FAST2, tok.pad_token_id, 2.0)  # impossible C-Acc floor
    assert [h["epoch"] for h in res.history] == [1, 2, 3] and res.best_epoch == 3
    final = model.state_dict()
    assert all(torch.equal(final[n], t) for n, t in seen[-1].items())  # the state evaluated after epoch 3
    assert any(not torch.equal(final[n], t) for n, t in seen[0].items())  # ... not the one after epoch 1
    with pytest.raises(ValueError, match="unknown joint selection 'best'; use t_f1 or last"):
        JointConfig(epochs=1, select="best")


def test_stage2_selection_on_dev_nll(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    p_tr, p_dev = cache_concepts(model, train, tok.pad_token_id), cache_concepts(model, dev, tok.pad_token_id)
    cfg = StageIIConfig(lr=0.05, epochs=4, batch_size=8, select="nll")
    res = train_grader(model, p_tr, torch.tensor(train.concepts), torch.tensor(train.grades), p_dev,
                       torch.tensor(dev.grades), cfg)
    assert res.best["loss"] == min(h["loss"] for h in res.history)


def test_interventions_run_the_frozen_grade_path(backbone: str) -> None:
    model, tok = tiny_model(backbone, head="level")
    _random_head(model)
    items = encoded(tok, toy_table(10))
    preds = predict(model, items, tok.pad_token_id)
    assert preds.p_hat is not None and items.concepts is not None
    none = grades_from_levels(model, preds.p_hat, items.concepts, np.zeros_like(items.concepts, dtype=bool))
    np.testing.assert_allclose(none, preds.grade_probs, rtol=1e-5, atol=1e-6)
    allc = grades_from_levels(model, preds.p_hat, items.concepts, np.ones_like(items.concepts, dtype=bool))
    onehot = np.eye(3)[items.concepts]  # (N, K, 3)
    with torch.no_grad():
        ref = model.grade_from_concepts(torch.as_tensor(onehot).float()).grade_logits.softmax(-1).numpy()
    np.testing.assert_allclose(allc, ref, rtol=1e-5, atol=1e-6)


def test_attention_diagnostics_uniform_queries_give_mean_pooling(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(6))
    with torch.no_grad():
        model.bottleneck.Q.zero_()  # q = 0: every token scores 0, attention is uniform
    d = attention_diagnostics(model, items, tok.pad_token_id)
    np.testing.assert_allclose(d["entropy_ratio"], 1.0, atol=1e-4)
    np.testing.assert_allclose(d["cosine_to_mean"], 1.0, atol=1e-4)
    with torch.no_grad():
        model.bottleneck.Q.normal_(0, 50.0)  # sharp queries: attention concentrates
    d = attention_diagnostics(model, items, tok.pad_token_id)
    assert max(d["entropy_ratio"]) < 0.9


def test_random_interventions_replace_the_chosen_share_with_one_hot_labels() -> None:
    from reccbm.model import random_interventions

    p = torch.softmax(torch.randn(400, 8, 3), -1)
    c = torch.randint(0, 3, (400, 8))
    assert random_interventions(p, c, 0.0) is p
    all_ = random_interventions(p, c, 1.0)
    torch.testing.assert_close(all_, torch.nn.functional.one_hot(c, 3).float())
    g = torch.Generator().manual_seed(0)
    half = random_interventions(p, c, 0.25, g)
    replaced = (half != p).any(-1)  # (N, K)
    assert 0.2 < float(replaced.float().mean()) < 0.3
    torch.testing.assert_close(half[replaced], torch.nn.functional.one_hot(c, 3).float()[replaced])
    torch.testing.assert_close(half[~replaced], p[~replaced])


def test_stage2_with_interventions_learns_from_the_labels(backbone: str) -> None:
    """intervention_p = 1: the head only ever sees one-hot labels, so it grades the labels, not p̂."""
    model, tok = tiny_model(backbone, head="level", lcec=False)
    train, dev = encoded(tok, toy_table(48, seed=1)), encoded(tok, toy_table(16, seed=2))
    uniform = torch.full((48, 3, 3), 1 / 3)  # uninformative outputs: only the labels carry the grade
    res = train_grader(model, uniform, torch.tensor(train.concepts), torch.tensor(train.grades),
                       torch.full((16, 3, 3), 1 / 3), torch.tensor(dev.grades),
                       StageIIConfig(lr=0.05, epochs=20, batch_size=8, intervention_p=1.0, select="nll"))
    assert res.steps > 0
    onehot = torch.nn.functional.one_hot(torch.tensor(train.concepts), 3).float()
    with torch.no_grad():
        acc = float((model.grade_from_concepts(onehot).grade_logits.argmax(1).numpy() == train.grades).mean())
    majority = float(np.bincount(train.grades).max() / len(train.grades))
    assert acc > majority + 0.15, (acc, majority)


def test_question_offsets_train_beside_the_encoder_and_stay_out_of_what_it_keeps(
        backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """stage1.question_effects: each training question (its first segment, question and reference) gets level offsets
    that the concept losses of Stage I and the joint stage read and that train (they get gradients only there); the
    model's state, dev selection and prediction hold none of them."""
    import dataclasses

    from reccbm.batches import question_groups

    model, tok = tiny_model(backbone)
    table = toy_table(24, seed=1)
    train, dev = encoded(tok, table), encoded(tok, toy_table(8, seed=2))
    groups, n = question_groups(train)
    assert n == 2  # toy_table's one question, with and without its reference
    with_ref = np.array([bool(a) for a in table["a"]])
    assert len(set(groups[with_ref])) == len(set(groups[~with_ref])) == 1
    assert groups[with_ref][0] != groups[~with_ref][0]
    runs: list[reccbm.train._Run] = []
    prepare = reccbm.train._prepare
    monkeypatch.setattr(reccbm.train, "_prepare", lambda *a, **k: runs.append(prepare(*a, **k)) or runs[-1])
    keys = set(model.state_dict())
    cfg = dataclasses.replace(FAST1, question_effects=100.0)
    train_concepts(model, train, dev, cfg, tok.pad_token_id)
    train_joint(model, train, dev, cfg, JointConfig(epochs=1, select="last"), FAST2, tok.pad_token_id, 0.0)
    assert len(runs) == 2
    for run in runs:
        assert run.offsets is not None and tuple(run.offsets.shape) == (2, 3, 3)
        assert float(run.offsets.detach().abs().sum()) > 0, "the offsets never trained"
    assert set(model.state_dict()) == keys
    assert question_groups(encoded(tok, toy_table(8, seed=3)))[1] == 2


def _two_questions(n: int = 12) -> dict[str, object]:
    """Answers to two questions with their references, grades 0..3 (answer i of question q: grade i % 4)."""
    words = ["push", "pop", "top", "front", "rear", "order", "first", "last", "in", "out", "stack", "queue"]
    q, r, a, c, y = [], [], [], [], []
    for i in range(n):
        which = i % 2
        q.append(["what is a stack", "what is a queue"][which])
        a.append(["a stack stores elements last in first out", "a queue stores elements first in first out"][which])
        r.append(" ".join(words[(i + k) % len(words)] for k in range(2 + i % 3)))
        y.append((i // 2) % 4)
        c.append([y[-1] % 3] * 3)
    return {"q": q, "r": r, "a": a, "c": np.array(c), "y": np.array(y)}


def test_a_swapped_reference_is_another_top_graded_answer_to_the_same_question(backbone: str) -> None:
    """stage1.reference_swap (reccbm/references.py): at p = 1 every input whose question has another top-graded answer
    reads one of those answers in place of its reference — the question, the answer, its token types and its labels
    as they were; at p = 0 nothing changes; an input longer than max_len gets the stand-in cut; the draws are seeded."""
    from reccbm.align import segment_masks
    from reccbm.batches import question_groups
    from reccbm.contrast import infer_sep_id
    from reccbm.references import ReferenceSwap

    _, tok = tiny_model(backbone)
    items = encoded(tok, _two_questions())
    groups, n_q = question_groups(items)
    assert n_q == 2
    grades = np.asarray(items.grades)
    top = grades == grades.max()
    batch = collate(items, list(range(len(items))), 0)
    _, ans = segment_masks(batch["input_ids"], batch["attention_mask"], infer_sep_id(batch["input_ids"],
                                                                                        batch["attention_mask"]))
    answers = [batch["input_ids"][i][ans[i]].tolist() for i in range(len(items))]
    swap = ReferenceSwap.build(items, groups, 1.0, 32, seed=0)
    assert [f is items.features[i] for i, f in enumerate(ReferenceSwap.build(items, groups, 0.0, 32, 0).features(
        items, list(range(len(items)))))] == [True] * len(items)
    swapped = swap.features(items, list(range(len(items))))
    moved = 0
    for i, f in enumerate(swapped):
        donors = [j for j in range(len(items)) if j != i and groups[j] == groups[i] and top[j]]
        if not donors:
            assert f is items.features[i]
            continue
        b = collate(EncodedItems([f]), [0], 0)
        r_i, a_i = segment_masks(b["input_ids"], b["attention_mask"], infer_sep_id(b["input_ids"], b["attention_mask"]))
        assert b["input_ids"][0][a_i[0]].tolist() == answers[i]  # the answer as it was
        assert b["input_ids"][0][r_i[0]].tolist() in [answers[j] for j in donors]  # another top answer of its question
        first = f["input_ids"].index(tok.sep_token_id)
        assert f["input_ids"][: first + 1] == items.features[i]["input_ids"][: first + 1]  # the question as it was
        assert set(f["token_type_ids"][: int(a_i[0].nonzero()[0])]) == {0} and f["token_type_ids"][-1] == 1
        moved += 1
    assert moved >= len(items) // 2
    again = ReferenceSwap.build(items, groups, 1.0, 32, seed=0).features(items, list(range(len(items))))
    assert [f["input_ids"] for f in again] == [f["input_ids"] for f in swapped]
    short = ReferenceSwap.build(items, groups, 1.0, 14, seed=0).features(items, list(range(len(items))))
    assert all(len(f["input_ids"]) <= max(14, len(o["input_ids"])) for f, o in zip(short, items.features))


def test_training_with_other_references_reads_them_and_predicts_with_the_given_one(
        backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """stage1.reference_swap 1.0 through Stage I and the joint stage: the training batches read other references (a
    batch's ids differ from its inputs' own), the model trains, and prediction reads the inputs as given."""
    import dataclasses

    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, _two_questions(16)), encoded(tok, _two_questions(8))
    runs: list[reccbm.train._Run] = []
    prepare = reccbm.train._prepare
    monkeypatch.setattr(reccbm.train, "_prepare", lambda *a, **k: runs.append(prepare(*a, **k)) or runs[-1])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = dataclasses.replace(FAST1, reference_swap=1.0)
    train_concepts(model, train, dev, cfg, tok.pad_token_id)
    train_joint(model, train, dev, cfg, JointConfig(epochs=1, select="last"), FAST2, tok.pad_token_id, 0.0)
    assert len(runs) == 2
    own = {tuple(f["input_ids"]) for f in train.features}
    read = [tuple(row[m.bool()].tolist()) for b in runs[0].loader
            for row, m in zip(b["input_ids"], b["attention_mask"])]
    assert len(read) == len(train) and sum(r not in own for r in read) >= len(train) // 2
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    preds = predict(model, dev, tok.pad_token_id)
    assert np.isfinite(preds.p_hat).all()
    with pytest.raises(ValueError, match="reference_swap is a probability"):
        dataclasses.replace(FAST1, reference_swap=1.5)


def test_batches_of_answers_to_one_question_hold_runs_of_that_question(backbone: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """stage1.answers_per_question: each batch is made of runs of that many answers to one question, every training
    answer read once an epoch; with it off, today's length-grouped batches mix the questions. Stage I trains with it
    and the run's batches are the sampler's."""
    import dataclasses

    from reccbm.batches import QuestionBatches as _QuestionBatches
    from reccbm.batches import question_groups

    questions = np.repeat(np.arange(5), [7, 4, 9, 1, 6])  # 27 answers to 5 questions, one with a single answer
    sampler = _QuestionBatches(questions, batch_size=8, per=4, seed=3)
    assert len(sampler) == 4
    for epoch in range(2):
        batches = list(sampler)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(questions)))  # each answer once an epoch
        assert [len(b) for b in batches] == [8, 8, 8, 3]
        # a question's answers come in runs: at most ceil(n / 4) blocks of one question in a row (fewer where two of
        # its runs meet); a plain shuffle of these 27 answers gives some twenty blocks
        blocks = 1 + sum(questions[a] != questions[b] for a, b in itertools.pairwise(flat))
        assert len(set(questions.tolist())) <= blocks <= sum(math.ceil(n / 4) for n in (7, 4, 9, 1, 6))
    assert list(_QuestionBatches(questions, 8, 4, seed=3)) == list(_QuestionBatches(questions, 8, 4, seed=3))
    assert list(_QuestionBatches(questions, 8, 4, seed=3)) != list(_QuestionBatches(questions, 8, 4, seed=4))

    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, _two_questions(16)), encoded(tok, _two_questions(8))
    groups, _ = question_groups(train)
    runs_made: list[reccbm.train._Run] = []
    prepare = reccbm.train._prepare
    monkeypatch.setattr(reccbm.train, "_prepare", lambda *a, **k: runs_made.append(prepare(*a, **k)) or runs_made[-1])
    cfg = dataclasses.replace(FAST1, answers_per_question=4, batch_size=8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_concepts(model, train, dev, cfg, tok.pad_token_id)
    index = {tuple(f["input_ids"]): i for i, f in enumerate(train.features)}
    for b in runs_made[0].loader:
        seen = [groups[index[tuple(row[m.bool()].tolist())]] for row, m in zip(b["input_ids"], b["attention_mask"])]
        assert len(seen) == 8 and all(n % 4 == 0 for n in np.bincount(seen))  # runs of 4 answers to one question
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="answers_per_question is >= 0"):
        dataclasses.replace(FAST1, answers_per_question=-1)


def test_encoder_dropout_sets_every_dropout_of_the_encoder_while_it_trains(backbone: str) -> None:
    """stage1.encoder_dropout: every nn.Dropout of E (attention's included, which reads its module's p) trains at the
    given probability; the heads keep theirs; < 0 leaves the backbone's own; prediction is deterministic either way."""
    import dataclasses

    model, tok = tiny_model(backbone)
    train, dev = encoded(tok, _two_questions(16)), encoded(tok, _two_questions(8))
    own = {n: m.p for n, m in model.encoder.named_modules() if isinstance(m, torch.nn.Dropout)}
    assert own and set(own.values()) != {0.35}
    train_concepts(model, train, dev, dataclasses.replace(FAST1, encoder_dropout=-1.0), tok.pad_token_id)
    assert {n: m.p for n, m in model.encoder.named_modules() if isinstance(m, torch.nn.Dropout)} == own
    heads = {n: m.p for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)
             and not n.startswith("encoder.")}
    train_concepts(model, train, dev, dataclasses.replace(FAST1, encoder_dropout=0.35), tok.pad_token_id)
    assert {m.p for m in model.encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.35}
    assert {n: m.p for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)
            and not n.startswith("encoder.")} == heads
    a, b = predict(model, dev, tok.pad_token_id), predict(model, dev, tok.pad_token_id)
    assert np.array_equal(a.p_hat, b.p_hat)
    with pytest.raises(ValueError, match="encoder_dropout is a probability"):
        dataclasses.replace(FAST1, encoder_dropout=1.0)


def test_the_ordinal_concept_head_trains_and_comes_back_from_its_checkpoint(backbone: str, tmp_path: Path) -> None:
    """model.concept_head "ordinal": Stage I trains its one direction per concept and its level biases, and a checkpoint
    rebuilds the same head (its config kept), predicting the same level shares."""
    model, tok = tiny_model(backbone, concept_head="ordinal")
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    V, b = model.bottleneck.V.detach().clone(), model.bottleneck.V_bias.detach().clone()
    train_concepts(model, train, dev, FAST1, tok.pad_token_id)
    assert not torch.equal(V, model.bottleneck.V.detach()) and not torch.equal(b, model.bottleneck.V_bias.detach())
    reccbm.save_checkpoint(model, tok, tmp_path, "stage1", 1)
    loaded, _, _ = reccbm.load_checkpoint(tmp_path, device="cpu")
    assert isinstance(loaded, reccbm.RecCBM) and loaded.config.concept_head == "ordinal"
    assert tuple(loaded.bottleneck.V.shape) == (3, 1, model.encoder.hidden_size)
    test = encoded(tok, toy_table(6, seed=3))
    np.testing.assert_allclose(predict(loaded, test, tok.pad_token_id).p_hat,
                               predict(model, test, tok.pad_token_id).p_hat, rtol=1e-5, atol=1e-6)


def test_the_layer_mix_starts_as_the_mean_of_every_layer_trains_and_comes_back_from_its_checkpoint(
        backbone: str, tmp_path: Path) -> None:
    """model.layer_mix: H starts as the even mean of the embeddings' and every layer's states, its weights train (at the
    alignment weights' rate), and a checkpoint rebuilds the mix (its config kept), predicting the same level shares."""
    model, tok = tiny_model(backbone, layer_mix=True)
    enc = model.encoder
    assert isinstance(enc, reccbm.TextEncoder) and enc.mix is not None and enc.mix.w.numel() == enc.n_layers() + 1
    batch = collate(encoded(tok, toy_table(4, seed=5)), list(range(4)), tok.pad_token_id)
    enc.eval()
    with torch.no_grad():
        states = enc.module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            output_hidden_states=True).hidden_states
        H = enc(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(H, torch.stack(states).mean(0))
    assert not torch.allclose(H, states[-1])
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    train_concepts(model, train, dev, FAST1, tok.pad_token_id)
    w = enc.mix.w.detach()
    assert float(w.std()) > 1e-3 and float((enc.mix.gamma.detach() - 1).abs()) > 1e-4
    reccbm.save_checkpoint(model, tok, tmp_path, "stage1", 1)
    loaded, _, _ = reccbm.load_checkpoint(tmp_path, device="cpu")
    assert isinstance(loaded, reccbm.RecCBM) and loaded.config.layer_mix
    assert isinstance(loaded.encoder, reccbm.TextEncoder) and loaded.encoder.mix is not None
    torch.testing.assert_close(loaded.encoder.mix.w.detach(), w)
    test = encoded(tok, toy_table(6, seed=3))
    np.testing.assert_allclose(predict(loaded, test, tok.pad_token_id).p_hat,
                               predict(model, test, tok.pad_token_id).p_hat, rtol=1e-5, atol=1e-6)


def test_the_layer_mix_is_refused_beside_training_only_the_top_layers(backbone: str) -> None:
    """model.layer_mix reads every layer; stage1.train_top_layers caches the states under its top layers: one line."""
    import dataclasses

    model, tok = tiny_model(backbone, layer_mix=True)
    train, dev = encoded(tok, toy_table(8, seed=1)), encoded(tok, toy_table(4, seed=2))
    with pytest.raises(reccbm.ReccbmError, match="layer_mix reads every layer"):
        train_concepts(model, train, dev, dataclasses.replace(FAST1, train_top_layers=1), tok.pad_token_id)


def test_a_frozen_encoder_with_the_layer_mix_caches_the_mixed_states_the_model_reads(backbone: str) -> None:
    """With a frozen encoder the recipe's cached token states are those of the model's own (mixed) H, not the last
    layer's; and a recipe that asks for the mix beside stage1.train_top_layers is refused when it is built."""
    import dataclasses

    from reccbm.fit import _frozen_states
    from reccbm.inference import encoder_states

    model, tok = tiny_model(backbone, layer_mix=True)
    train, dev = encoded(tok, toy_table(6, seed=1)), encoded(tok, toy_table(3, seed=2))
    stage1 = dataclasses.replace(FAST1, encoder="frozen", device="cpu")
    cached = _frozen_states(train, dev, reccbm.Recipe(model.config, stage1), tok.pad_token_id)
    own = encoder_states(model.encoder, train, tok.pad_token_id)
    plain = encoder_states(reccbm.TextEncoder.from_pretrained(backbone), train, tok.pad_token_id)
    for c, o, p in zip(cached.train, own, plain, strict=True):
        torch.testing.assert_close(c, o)
        assert not torch.allclose(c, p)
    with pytest.raises(ValueError, match="model.layer_mix reads every layer"):
        reccbm.Recipe(model.config, dataclasses.replace(FAST1, train_top_layers=1))


def test_rdrop_divergence_is_the_symmetric_kl_summed_over_concepts() -> None:
    """½ (KL(p‖q) + KL(q‖p)) per concept, summed over concepts and averaged over answers; 0 for one reading twice."""
    from reccbm.losses import rdrop_divergence

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 3, 3, generator=g), torch.randn(4, 3, 3, generator=g)
    p, q = a.softmax(-1), b.softmax(-1)
    kl_pq = (p * (p.log() - q.log())).sum(-1)  # (4, 3)
    kl_qp = (q * (q.log() - p.log())).sum(-1)
    torch.testing.assert_close(rdrop_divergence(a, b), (0.5 * (kl_pq + kl_qp)).sum(1).mean())
    torch.testing.assert_close(rdrop_divergence(a, b), rdrop_divergence(b, a))
    assert float(rdrop_divergence(a, a)) == 0.0 and float(rdrop_divergence(a, b)) > 0


def test_two_readings_add_their_divergence_only_where_dropout_makes_them_differ(backbone: str) -> None:
    """stage1.rdrop: without dropout the two readings are one and the loss is the one reading's; with the encoder's
    dropout on they differ and the loss is the mean of the two readings' plus rdrop × their divergence (> 0); Stage I
    trains with it; a negative weight is refused."""
    import dataclasses

    from reccbm.losses import stage1_loss as _stage1_loss

    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(8, seed=4))
    batch = collate(items, list(range(8)), tok.pad_token_id)
    model.train()
    for m in model.encoder.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    plain = _stage1_loss(FAST1)(model, batch)
    torch.testing.assert_close(_stage1_loss(dataclasses.replace(FAST1, rdrop=1.0))(model, batch), plain)
    for m in model.encoder.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.3
    torch.manual_seed(1)
    two = _stage1_loss(dataclasses.replace(FAST1, rdrop=1.0))(model, batch)
    torch.manual_seed(1)
    first, second = _stage1_loss(FAST1)(model, batch), _stage1_loss(FAST1)(model, batch)
    torch.manual_seed(1)
    zero_weight = _stage1_loss(dataclasses.replace(FAST1, rdrop=1e-12))(model, batch)
    torch.testing.assert_close(zero_weight, 0.5 * (first + second), rtol=1e-5, atol=1e-6)
    assert float(two.detach()) > float(zero_weight.detach()) + 1e-4
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    V = model.bottleneck.V.detach().clone()
    train_concepts(model, train, dev, dataclasses.replace(FAST1, rdrop=1.0), tok.pad_token_id)
    assert not torch.equal(V, model.bottleneck.V.detach())
    with pytest.raises(ValueError, match="rdrop is a weight >= 0"):
        dataclasses.replace(FAST1, rdrop=-0.5)


def test_two_readings_of_part_of_the_batch(backbone: str) -> None:
    """stage1.rdrop_share: the second reading runs the encoder on the batch's first ceil(share × B) answers only;
    without dropout the loss is still the one reading's; with it the loss differs from both the one reading's and the
    whole batch read twice; Stage I trains with it; a share outside (0, 1] is refused."""
    import dataclasses

    from reccbm.losses import rdrop_rows
    from reccbm.losses import stage1_loss as _stage1_loss

    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(8, seed=4))
    batch = collate(items, list(range(8)), tok.pad_token_id)
    model.train()
    read: list[int] = []
    hook = model.encoder.register_forward_pre_hook(lambda _m, args: read.append(int(args[0].shape[0])))
    half = dataclasses.replace(FAST1, rdrop=1.0, rdrop_share=0.4)
    for m in model.encoder.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    plain = _stage1_loss(FAST1)(model, batch)
    read.clear()
    torch.testing.assert_close(_stage1_loss(half)(model, batch), plain)
    assert read == [8, 4]  # ceil(0.4 × 8) answers read again
    assert [rdrop_rows(s, b) for s, b in ((0.14, 50), (0.56, 25), (0.4, 8), (1.0, 8), (0.01, 8))] == [7, 14, 4, 8, 1]
    for m in model.encoder.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.3
    losses = {}
    for name, cfg in (("one", FAST1), ("part", half), ("whole", dataclasses.replace(FAST1, rdrop=1.0))):
        torch.manual_seed(1)
        losses[name] = float(_stage1_loss(cfg)(model, batch).detach())
    assert len({round(v, 6) for v in losses.values()}) == 3, losses
    hook.remove()
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    V = model.bottleneck.V.detach().clone()
    train_concepts(model, train, dev, half, tok.pad_token_id)
    assert not torch.equal(V, model.bottleneck.V.detach())
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"rdrop_share is the share of a batch read twice, in \(0, 1\]"):
            dataclasses.replace(FAST1, rdrop_share=bad)


def test_answer_views_are_edits_a_teacher_would_not_mark() -> None:
    """reccbm.views: a typo never touches a word of the question or the reference and keeps the word's letters; a
    reordering needs two sentences and keeps every sentence; a name is always possible; one edit drawn per answer, the
    same for the same seed; an answer no edit applies to is its own copy; an unknown edit is refused."""
    import random

    from reccbm.normalise import without_signature
    from reccbm.views import answer_views, name_view, order_view, typo_view

    rng = random.Random(0)
    for _ in range(20):
        t = typo_view("A stack stores elements in order", {"stack", "stores", "elements"}, rng)
        assert t is not None and t.startswith("A stack stores elements in ") and sorted(t[-5:]) == sorted("order")
        assert t != "A stack stores elements in order"
    assert typo_view("a pot of tea", set(), rng) is None and typo_view("a stack", {"stack"}, rng) is None
    assert order_view("One sentence only.", rng) is None
    two = order_view("First it pushes. Then it pops!", rng)
    assert two == "Then it pops! First it pushes."
    for _ in range(12):  # no label, no id: forms the normaliser leaves for the reader to learn
        named = name_view("It pops.", rng)
        assert "It pops." in named and named != "It pops." and not any(ch.isdigit() for ch in named)
        assert without_signature(named) == named
    q, c = ["what is a stack"] * 3, ["a stack stores elements last in first out"] * 3
    r = ["It is last in first out. It pushes on top.", "lifo", "A pile of plates: push, then popping"]
    views = answer_views(q, c, r, ("typo", "order"), seed=3)
    assert views == answer_views(q, c, r, ("typo", "order"), seed=3)
    assert views[1] == "lifo" and views[0] != r[0] and views[2] != r[2]
    assert all(v != a for v, a in zip(answer_views(q, c, r, ("name",), seed=3), r))
    with pytest.raises(ValueError, match="unknown answer edit 'synonym'"):
        answer_views(q, c, r, ("synonym",), seed=0)


def test_the_second_reading_reads_the_copies(backbone: str) -> None:
    """stage1.rdrop_views: the loader batches each answer's copy beside it; without dropout the loss is the mean of
    the answer's and the copy's terms plus rdrop × their divergence, so copies equal to the answers give the one
    reading's loss and edited copies a different one; Stage I trains with them; the edits without R-Drop are refused."""
    import dataclasses

    from reccbm.batches import training_loader
    from reccbm.losses import rdrop_divergence
    from reccbm.losses import stage1_loss as _stage1_loss
    from reccbm.views import answer_views, view_inputs

    model, tok = tiny_model(backbone)
    table = toy_table(8, seed=4)
    items = encoded(tok, table)
    model.train()
    for m in model.encoder.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    cfg = dataclasses.replace(FAST1, rdrop=1.0, rdrop_views=("name",))
    same = dataclasses.replace(items, views=list(items.features))
    batch = next(iter(training_loader(same, 8, tok.pad_token_id, seed=0)))
    assert torch.equal(batch["view_input_ids"], batch["input_ids"])
    plain = _stage1_loss(FAST1)(model, batch)
    torch.testing.assert_close(_stage1_loss(cfg)(model, batch), plain)
    named = encode_inputs(tok, table["q"], answer_views(table["q"], table["a"], table["r"], ("name",), 0), table["a"],
                          32)
    edited = dataclasses.replace(items, views=named)
    batch = next(iter(training_loader(edited, 8, tok.pad_token_id, seed=0)))
    second = view_inputs(batch)
    assert second is not None and set(second) >= {"input_ids", "attention_mask", "concepts", "grades"}
    assert not any(k.startswith("view_") for k in second)
    differ = second["input_ids"].shape != batch["input_ids"].shape or not torch.equal(second["input_ids"],
                                                                                     batch["input_ids"])
    assert differ and torch.equal(second["concepts"], batch["concepts"])  # the copies keep the answers' levels
    with torch.no_grad():
        a, b = model(batch).concept_logits, model(second).concept_logits
        one, copy = _stage1_loss(FAST1)(model, batch), _stage1_loss(FAST1)(model, second)
        both = _stage1_loss(cfg)(model, batch)
    assert a is not None and b is not None
    torch.testing.assert_close(both, 0.5 * (one + copy) + rdrop_divergence(a, b), rtol=1e-5, atol=1e-6)
    assert float(rdrop_divergence(a, b)) > 0
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    t = toy_table(24, seed=1)
    train.views = encode_inputs(tok, t["q"], answer_views(t["q"], t["a"], t["r"], ("typo", "name"), 0), t["a"], 32)
    assert len(train.subset([0, 3]).views or []) == 2
    V = model.bottleneck.V.detach().clone()
    train_concepts(model, train, dev, cfg, tok.pad_token_id)
    assert not torch.equal(V, model.bottleneck.V.detach())
    with pytest.raises(ValueError, match=r"set stage1.rdrop > 0"):
        dataclasses.replace(FAST1, rdrop_views=("typo",))
    with pytest.raises(reccbm.ReccbmError, match="one per answer"):
        EncodedItems(items.features, views=items.features[:3])


def test_a_library_grader_reads_its_answers_copies(backbone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``reccbm.Grader`` with ``stage1.rdrop_views`` fitted on arrays: every training answer comes with an edited copy
    (the name edit always applies, so each copy differs from its answer), the copies are the same for the same seed,
    and it trains and grades; without the option no copies are made."""
    import reccbm.estimator
    from reccbm import Concept, Grader, Rubric
    from tests.support.tiny_models import mohler_like_table

    seen: list[EncodedItems] = []
    real_fit = reccbm.fit

    def spy(train: EncodedItems, *args: object, **kw: object) -> object:
        seen.append(train)
        return real_fit(train, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(reccbm.estimator, "fit", spy)
    rubric = Rubric((Concept("EV", "Evidence.", ("none", "some", "strong")), Concept("MC", "Mechanism.")),
                    grades=(0, 3), levels=(0, 2))
    t = mohler_like_table(30)
    args = (t["question"], t["reference"].fillna(""), t["response"], t[["FC", "CC"]].to_numpy() - 1,
            t["grade"].clip(0, 3))
    over: dict[str, dict[str, Any]] = {"stage1": {"epochs": 1, "rdrop": 1.0, "rdrop_views": ["name"]},
                                       "stage2": {"epochs": 2}}
    g = Grader(rubric, backbone=backbone, overrides=over, seed=0).fit(*args)
    Grader(rubric, backbone=backbone, overrides=over, seed=0).fit(*args)
    first, again = seen[0], seen[1]
    assert first.views is not None and len(first.views) == len(first)
    assert all(v["input_ids"] != f["input_ids"] for v, f in zip(first.views, first.features))
    assert first.views == again.views
    assert set(np.asarray(g.predict(t["question"], t["reference"].fillna(""), t["response"])).tolist()) <= {0, 1, 2, 3}
    Grader(rubric, backbone=backbone, overrides={"stage1": {"epochs": 1}, "stage2": {"epochs": 2}}, seed=0).fit(*args)
    assert seen[2].views is None
