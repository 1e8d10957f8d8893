"""Text beside the point (StageIConfig.padding, reccbm/padding.py): padded answers built from a batch's token ids, the
hinge that keeps them from reading above the answer, and its place in Stage I."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
import torch

from reccbm import train_concepts
from reccbm.config import StageIConfig, config_from_dict
from reccbm.data import collate
from reccbm.fit import Recipe
from reccbm.model import expected_scores
from reccbm.padding import MIN_ROOM, padding_batch, padding_loss
from reccbm.recipes import recipe
from tests.support.tiny_models import FAST1, collated, encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def _words(tok: object, extra: dict[str, torch.Tensor]) -> list[str]:
    return [tok.decode(r[m.bool()].tolist())  # type: ignore[attr-defined]
            for r, m in zip(extra["input_ids"], extra["attention_mask"])]


def test_padded_inputs_append_another_questions_answer_or_repeat_the_answers_first_words(backbone: str) -> None:
    _, tok = tiny_model(backbone)
    b = collated(tok, ["what is a stack", "what is a queue", "what is a stack"],
               ["a stack stores elements", "first in first out", "last in first out order"],
               ["last in first out", "first in first out order", "last in first out"])
    built = padding_batch(b, n_each=1, tokens=4, max_len=32, pad_id=tok.pad_token_id)
    assert built is not None
    extra, source = built
    words = _words(tok, extra)
    # filler: the first answer, then the first 4 tokens of the answer to the other question
    assert words[0] == ("[CLS] what is a stack [SEP] last in first out [SEP] "
                        "a stack stores elements first in first out [SEP]")
    # repetition, on another answer than the filler's: its first 4 // 2 tokens twice more
    assert words[1] == ("[CLS] what is a queue [SEP] first in first out order [SEP] "
                        "first in first out first in first in [SEP]")
    assert source.tolist() == [0, 1]
    types = extra["token_type_ids"][0][extra["attention_mask"][0].bool()].tolist()
    assert types == [0] * 11 + [1] * 9  # the padded answer is the pair's second segment
    two = padding_batch(b, n_each=2, tokens=4, max_len=32, pad_id=tok.pad_token_id)
    # two fillers (each answer has another question's beside it), and the one answer left repeated
    assert two is not None and two[1].tolist() == [0, 1, 2]


def test_answers_without_room_are_not_padded_and_one_question_gets_no_filler(backbone: str) -> None:
    _, tok = tiny_model(backbone)
    same = collated(tok, ["what is a stack"] * 2, ["a stack stores elements", "last in"], ["last in first out"] * 2)
    built = padding_batch(same, n_each=2, tokens=6, max_len=32, pad_id=tok.pad_token_id)
    assert built is not None
    extra, source = built
    assert source.tolist() == [0, 1]  # repetition only: no answer to another question in the batch
    assert _words(tok, extra)[1].endswith("[SEP] last in last in last in [SEP]")
    # max_len leaves the first input 3 tokens, below MIN_ROOM, and the second 5: it alone is padded, by what fits
    long_len = int(same["attention_mask"][0].sum())
    built = padding_batch(same, n_each=2, tokens=24, max_len=long_len + 3, pad_id=tok.pad_token_id)
    assert built is not None and built[1].tolist() == [1]
    assert int(built[0]["attention_mask"][0].sum()) <= long_len + 3
    short_len = int(same["attention_mask"][1].sum())
    assert padding_batch(same, 2, 24, short_len + MIN_ROOM - 1, tok.pad_token_id) is None  # no input has room


def test_the_hinge_pushes_a_padded_reading_down_only_where_it_reads_above_the_answer() -> None:
    own = torch.tensor([[1.0, 2.0], [0.5, 1.5]], requires_grad=True)
    padded = torch.tensor([[1.5, 1.0], [0.5, 2.0]], requires_grad=True)
    loss = padding_loss(padded, own)
    assert float(loss.detach()) == pytest.approx((0.5 + 0.5) / 4)
    loss.backward()
    assert own.grad is None or float(own.grad.abs().sum()) == 0.0  # the answer's own reading is held fixed
    assert padded.grad is not None
    assert padded.grad.tolist() == [[0.25, 0.0], [0.0, 0.25]]  # only where the padded answer reads higher
    assert float(padding_loss(own.detach() - 0.1, own)) == 0.0


def test_the_padding_term_enters_stage1_only_when_asked_and_training_lowers_it(backbone: str) -> None:
    from reccbm.losses import padding_term as _padding_term
    from reccbm.losses import stage1_loss as _stage1_loss

    model, tok = tiny_model(backbone)
    table = toy_table(16)
    table["q"] = [f"what is a {w}" for w in ["stack", "queue"] * 8]  # two questions: filler can be built
    items = encoded(tok, table)
    b = collate(items, list(range(16)), tok.pad_token_id)
    model.eval()  # no dropout: the losses differ by the padding term alone
    cfg = config_from_dict(StageIConfig, {**asdict(FAST1), "padding": 1.0, "padding_per_batch": 4})
    with torch.no_grad():
        base = float(_stage1_loss(FAST1)(model, b))
        more = float(_stage1_loss(cfg)(model, b))
        own = expected_scores(model.concepts(b)[0].float().softmax(-1))
        term = float(_padding_term(model, b, cfg, own, torch.zeros(())))
    assert more == pytest.approx(base + term, rel=1e-5, abs=1e-6)
    # the term alone, trained: the padded answers come to read no higher than their own
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = term
    for _ in range(15):
        own = expected_scores(model.concepts(b)[0].float().softmax(-1))
        loss = _padding_term(model, b, cfg, own, torch.zeros(()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        own = expected_scores(model.concepts(b)[0].float().softmax(-1))
        last = float(_padding_term(model, b, cfg, own, torch.zeros(())))
    assert first > 0 and last < first / 2
    train_concepts(model, items, items, replace(cfg, max_steps_per_epoch=2), tok.pad_token_id)


def test_padding_settings_are_checked_and_scale_with_a_gpus_batch() -> None:
    for bad in ({"padding": -1.0}, {"padding_per_batch": 0}, {"padding_tokens": 1}):
        with pytest.raises(ValueError, match="padding is >= 0"):
            StageIConfig(**bad)  # type: ignore[arg-type]
    r = recipe("default", 3, 3, 4, {"stage1": {"padding": 0.5, "padding_per_batch": 2}})
    assert isinstance(r, Recipe)
    scaled = r.scaled(4)
    assert scaled.stage1.padding_per_batch == 8 and scaled.stage1.padding == 0.5
    off = recipe("default", 3, 3, 4)
    assert off.stage1.padding == 0.0  # off by default: a GPU's batches leave its size as the recipe has it
    assert off.scaled(4).stage1.padding_per_batch == off.stage1.padding_per_batch
