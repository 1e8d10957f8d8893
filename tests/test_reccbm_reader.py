"""The concept-reader levers on a tiny model: answer-reference alignment features in the concept heads
(ModelConfig.align, reccbm/align.py) and soft concept targets (StageIConfig.soft_targets, rubrictool/votes.py)."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import reccbm
from reccbm import EncodedItems, train_concepts
from reccbm.align import N_FEATURES, segment_masks, separator_id
from reccbm.config import StageIConfig, config_from_dict
from reccbm.data import collate
from reccbm.model import concept_loss, soft_concept_loss
from reccbm.train import _optimizer
from rubrictool.errors import TrainError
from rubrictool.rubric import load_rubric
from rubrictool.votes import attach_votes, has_votes, soft_targets
from tests.support.tiny_models import FAST1, collated, encoded, mohler_like_table, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def test_segment_masks_find_the_reference_and_the_answer(backbone: str) -> None:
    _, tok = tiny_model(backbone)
    b = collated(tok, ["what is a stack", "what is a stack"], ["a queue of nodes", "first out"],
               ["a stack stores elements", ""])
    ref, ans = segment_masks(b["input_ids"], b["attention_mask"], separator_id(tok))
    words = tok.convert_ids_to_tokens
    assert words(b["input_ids"][0][ref[0]].tolist()) == ["a", "stack", "stores", "elements"]
    assert words(b["input_ids"][0][ans[0]].tolist()) == ["a", "queue", "of", "nodes"]
    assert not ref[1].any()  # no reference given: nothing to compare with
    assert words(b["input_ids"][1][ans[1]].tolist()) == ["first", "out"]


def test_alignment_features_rise_with_what_the_answer_shares_with_the_reference(backbone: str) -> None:
    model, tok = tiny_model(backbone, align=True)
    assert model.align is not None
    model.align.set_sep(separator_id(tok))
    ref = "a stack stores elements last in first out"
    b = collated(tok, ["what is a stack"] * 3, [ref, "a stack stores elements", "wrong bad no random loop"], [ref] * 3)
    model.eval()
    with torch.no_grad():
        H = model.token_states(b)
        f, a2r = model.align.features(H, b["input_ids"], b["attention_mask"])
    assert f.shape == (3, N_FEATURES) and a2r.shape == b["input_ids"].shape
    precision, recall, share = f[:, 0], f[:, 1], f[:, 7]  # share: the reference's distinct ids in the answer
    torch.testing.assert_close(share, torch.tensor([1.0, 4 / 8, 0.0]))
    assert recall[0] > recall[1] > recall[2]  # the whole reference > half of it > none of its words
    assert precision[0] > precision[2] and precision[1] > precision[2]


def _overlap_one_answer_at_a_time(input_ids: torch.Tensor, ref: torch.Tensor, ans: torch.Tensor) -> torch.Tensor:
    """AlignFeatures._overlap as it was first written, answer by answer in torch (the reference for the list path)."""
    out = torch.zeros(input_ids.shape[0], 6)
    for b in range(input_ids.shape[0]):
        a_ids, r_ids = input_ids[b][ans[b]].tolist(), input_ids[b][ref[b]].tolist()
        sa, sr = set(a_ids), set(r_ids)
        shared, n_a, n_r = len(sa & sr), len(a_ids), len(r_ids)
        out[b, 0] = sum(i in sr for i in a_ids) / max(1, n_a)
        out[b, 1] = shared / max(1, len(sr))
        out[b, 2] = shared / max(1, len(sa))
        out[b, 3] = torch.log1p(torch.tensor(float(n_a))) / 4
        out[b, 4] = torch.log1p(torch.tensor(float(n_r))) / 4
        out[b, 5] = torch.log(torch.tensor((1.0 + n_a) / (1.0 + n_r))) / 2
    return out


def test_overlap_features_are_the_same_to_the_last_bit_as_answer_by_answer() -> None:
    from reccbm.align import AlignFeatures

    g = torch.Generator().manual_seed(0)
    for B, T in ((1, 5), (8, 40), (64, 128), (0, 7)):
        ids = torch.randint(0, 30, (B, T), generator=g)
        ref = torch.rand(B, T, generator=g) < 0.3
        ans = ~ref & (torch.rand(B, T, generator=g) < 0.6)
        if B > 1:
            ref[0] = False  # an answer without a reference
            ans[1] = False  # an empty answer
        got = AlignFeatures._overlap(ids, ref, ans)
        assert got.dtype == torch.float32 and got.shape == (B, 6)
        assert torch.equal(got, _overlap_one_answer_at_a_time(ids, ref, ans))


def test_the_kept_separator_follows_set_sep_and_a_loaded_state() -> None:
    """AlignFeatures keeps its separator as an int (no GPU read per batch); a loaded state brings its own."""
    from reccbm.align import AlignFeatures

    a, b = AlignFeatures(2, 3), AlignFeatures(2, 3)
    a.set_sep(5)
    assert a.separator() == 5
    b.set_sep(9)
    a.load_state_dict(b.state_dict())
    assert a.separator() == 9 and int(a.sep_id) == 9


def test_alignment_starts_as_the_plain_head_and_then_moves_the_logits(backbone: str) -> None:
    plain, tok = tiny_model(backbone)
    torch.manual_seed(0)
    aligned, _ = tiny_model(backbone, align=True)
    assert aligned.align is not None
    aligned.align.set_sep(separator_id(tok))
    aligned.load_state_dict(plain.state_dict(), strict=False)  # same encoder, queries and V_k
    items = encoded(tok, toy_table(8))
    b = collate(items, list(range(8)), tok.pad_token_id)
    plain.eval()
    aligned.eval()
    with torch.no_grad():
        torch.testing.assert_close(aligned.concepts(b)[0], plain.concepts(b)[0])  # G = 0 at init
        aligned.align.G.normal_(0, 1.0)
        assert not torch.allclose(aligned.concepts(b)[0], plain.concepts(b)[0])
    # the alignment weights are trained in Stage I, at their own learning rate
    ids = {id(p) for p in aligned.align.parameters()}
    assert ids <= {id(p) for p in aligned.stage1_parameters()}
    opt = _optimizer(aligned, replace(FAST1, align_lr_multiplier=7.0))
    group = next(g for g in opt.param_groups if {id(p) for p in g["params"]} == ids)
    assert group["lr"] == pytest.approx(FAST1.lr * 7.0)


def test_alignment_trains_and_survives_a_state_dict_round_trip(backbone: str) -> None:
    model, tok = tiny_model(backbone, align=True)
    assert model.align is not None
    model.align.set_sep(separator_id(tok))
    items = encoded(tok, toy_table(24))
    train_concepts(model, items.subset(range(16)), items.subset(range(16, 24)), replace(FAST1, max_steps_per_epoch=2),
                   tok.pad_token_id)
    assert model.align.G.abs().sum() > 0  # the features' weights moved off 0
    fresh, _ = tiny_model(backbone, align=True)
    fresh.load_state_dict(model.state_dict())
    assert fresh.align is not None and int(fresh.align.sep_id) == separator_id(tok)


def test_soft_concept_loss_is_l_con_at_w0_and_pulls_towards_the_votes() -> None:
    torch.manual_seed(0)
    logits, c = torch.randn(4, 5, 3), torch.randint(0, 3, (4, 5))
    onehot = torch.nn.functional.one_hot(c, 3).float()
    soft = torch.softmax(torch.randn(4, 5, 3), -1)
    for red in ("sum", "mean"):
        torch.testing.assert_close(soft_concept_loss(logits, c, soft, 0.0, red), concept_loss(logits, c, red))
        torch.testing.assert_close(soft_concept_loss(logits, c, onehot, 0.7, red), concept_loss(logits, c, red))
    # logits equal to the log of the votes' shares: the loss falls as w moves the target towards the votes
    at_votes = soft.log()
    losses = [float(soft_concept_loss(at_votes, c, soft, w)) for w in (0.0, 0.5, 1.0)]
    assert losses[0] > losses[1] > losses[2]


def test_soft_targets_reach_stage1_from_the_reviewers_votes(backbone: str) -> None:
    model, tok = tiny_model(backbone)
    table = toy_table(16)
    items = encoded(tok, table)
    cfg = replace(FAST1, soft_targets=0.5, max_steps_per_epoch=1)
    with pytest.raises(Exception, match="soft_targets"):  # no votes kept: said, not ignored
        train_concepts(model, items, items, cfg, tok.pad_token_id)
    soft = np.full((16, 3, 3), 1 / 3, dtype=np.float32)
    with_votes = EncodedItems(items.features, items.concepts, items.grades, soft)
    assert tuple(collate(with_votes, [0, 1], tok.pad_token_id)["concept_soft"].shape) == (2, 3, 3)
    assert with_votes.subset([3, 4]).soft is not None
    train_concepts(model, with_votes, with_votes, cfg, tok.pad_token_id)


def test_votes_columns_give_each_answers_level_shares() -> None:
    rb = load_rubric("mohler")
    keys = rb.keys
    table = pd.DataFrame({"id": ["a", "b"]})
    rows = [{"item": "a", "reviewer": r, "concept": k, "level": lv} for r, lv in (("A", 2), ("B", 3), ("C", 3))
            for k in keys]
    rows += [{"item": "b", "reviewer": "A", "concept": keys[0], "level": 1}]
    voted = attach_votes(table, pd.DataFrame(rows), rb)
    assert has_votes(voted, rb) and not has_votes(table, rb)
    assert voted[f"votes_{keys[0]}"].tolist() == ["2 3 3", "1"]
    for k in keys:
        voted[f"_c_{k}"] = [2, 1]  # adjudicated, 0-based
    soft = soft_targets(voted, rb)
    assert soft.shape == (2, len(keys), rb.scale.max - rb.scale.min + 1)
    np.testing.assert_allclose(soft[0, 0], [0, 1 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(soft[1, 0], [1, 0, 0])
    np.testing.assert_allclose(soft[1, 1], [0, 1, 0])  # no votes: the adjudicated level
    voted.loc[0, f"votes_{keys[2]}"] = "2 9"
    with pytest.raises(TrainError, match=f"votes_{keys[2]}, row 1: level 9"):
        soft_targets(voted, rb)


def test_contrast_inputs_pair_the_reference_and_other_answers_with_their_levels(backbone: str) -> None:
    from reccbm.contrast import IGNORE, contrast_batch, contrast_loss

    _, tok = tiny_model(backbone)
    b = collated(tok, ["what is a stack", "what is a queue", "what is a list"],
               ["a stack stores elements", "first in first out", "nodes"],
               ["last in first out", "first in first out order", ""])
    extra = contrast_batch(b, M=2, K=3, top=(0, 1), bottom=(1,), n_each=2, pad_id=tok.pad_token_id)
    assert extra is not None
    words = [tok.decode(r[m.bool()].tolist()) for r, m in zip(extra["input_ids"], extra["attention_mask"])]
    assert words[0] == "[CLS] what is a stack [SEP] last in first out [SEP] last in first out [SEP]"
    # another's answer
    assert words[2] == "[CLS] what is a stack [SEP] last in first out [SEP] first in first out [SEP]"
    assert len(words) == 4  # two of each kind: the third input has no reference
    assert extra["contrast"].tolist() == [[2, 2, IGNORE], [2, 2, IGNORE], [IGNORE, 0, IGNORE], [IGNORE, 0, IGNORE]]
    types = extra["token_type_ids"][0][extra["attention_mask"][0].bool()].tolist()
    assert types == [0] * 11 + [1] * 5  # the reference as the answer is the pair's second segment
    logits = torch.zeros(4, 3, 3)
    logits[:2, :, 2] = 5.0  # right about the references' top levels, unsure of the other answers
    unsure = contrast_loss(torch.zeros(4, 3, 3), extra["contrast"])
    assert float(contrast_loss(logits, extra["contrast"])) < float(unsure)
    assert contrast_batch(b, 2, 3, (), (), 2, 0) is None
    # the question as the answer, a third kind: the bottom level of the same concepts, one per input with a reference
    more = contrast_batch(b, M=2, K=3, top=(0, 1), bottom=(1,), n_each=2, pad_id=tok.pad_token_id, n_question=2)
    assert more is not None
    words = [tok.decode(r[m.bool()].tolist()) for r, m in zip(more["input_ids"], more["attention_mask"])]
    assert words[:4] == [tok.decode(r[m.bool()].tolist()) for r, m in zip(extra["input_ids"], extra["attention_mask"])]
    assert words[4:] == ["[CLS] what is a stack [SEP] last in first out [SEP] what is a stack [SEP]",
                         "[CLS] what is a queue [SEP] first in first out order [SEP] what is a queue [SEP]"]
    assert more["contrast"].tolist()[4:] == [[IGNORE, 0, IGNORE], [IGNORE, 0, IGNORE]]


def test_contrast_loss_enters_stage1_only_when_asked(backbone: str) -> None:
    from reccbm.losses import stage1_loss as _stage1_loss

    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(8))
    b = collate(items, list(range(8)), tok.pad_token_id)
    model.eval()  # no dropout: the two losses differ by the contrast term alone
    with torch.no_grad():
        base = float(_stage1_loss(FAST1)(model, b))
        as_yaml = {**asdict(FAST1), "contrast": 1.0, "contrast_top": [0, 1], "contrast_bottom": [0]}  # YAML lists
        more = float(_stage1_loss(config_from_dict(StageIConfig, as_yaml))(model, b))
    assert more > base
    train_concepts(model, items, items, replace(FAST1, contrast=0.5, contrast_top=(0,), max_steps_per_epoch=1),
                   tok.pad_token_id)


def test_the_default_trains_on_the_reviewers_levels_a_table_keeps(tmp_path: Path, backbone: str) -> None:
    """``train`` with the default preset: a table with votes_<KEY> columns trains on soft targets (other outputs than
    without them); a table without says in the run's notes that the adjudicated levels alone were the targets."""
    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, train_model
    from rubrictool.train.run import SOFT_TARGETS_OFF

    rb = load_rubric("mohler")
    df = mohler_like_table(60)
    rng = np.random.default_rng(0)
    votes = pd.DataFrame([{"item": i, "reviewer": r, "concept": k, "level": int(rng.integers(1, 4))}
                          for i in df["id"] for r in "ABC" for k in rb.keys])
    over = {"model": {"max_len": 32, "backbone": backbone}, "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu"},
            "joint": {"epochs": 1}, "stage2": {"epochs": 3}}
    split = split_items(df, seed=0)
    plain = train_model(rb, df, split, tmp_path / "hard", options=TrainOptions(overrides=over))
    soft = train_model(rb, attach_votes(df, votes, rb), split, tmp_path / "soft",
                       options=TrainOptions(overrides=over))
    assert SOFT_TARGETS_OFF in plain.notes and SOFT_TARGETS_OFF not in soft.notes
    p_hard, p_soft = (pd.read_csv(tmp_path / n / "test_predictions.csv") for n in ("hard", "soft"))
    assert not np.allclose(p_hard["FC_p1"], p_soft["FC_p1"])  # the votes reached the concept heads



def test_the_concepts_of_the_examples_across_questions_come_from_the_rubrics_marks_or_are_named() -> None:
    from reccbm.errors import ReccbmError
    from reccbm.recipes import contrast_concepts

    keys, top, bottom = ["FC", "CC", "TU"], [True, False, True], [False, True, False]
    on = {"contrast": 0.5}
    assert contrast_concepts(on, keys, top, bottom) == on | {"contrast_top": [0, 2], "contrast_bottom": [1]}
    assert contrast_concepts({"contrast": 0.0}, keys, top, bottom) == {"contrast": 0.0}  # off: nothing to resolve
    named = contrast_concepts(on | {"contrast_top": ["TU"], "contrast_bottom": [0, "1"]}, keys, top, bottom)
    assert (named["contrast_top"], named["contrast_bottom"]) == ([2], [0, 1])  # keys, positions, YAML strings
    assert contrast_concepts(on | {"contrast_top": []}, keys, top, bottom)["contrast_top"] == []  # none, on purpose
    with pytest.raises(ReccbmError, match="no concept 'XX'; the rubric's concepts are FC, CC, TU"):
        contrast_concepts(on | {"contrast_top": ["XX"]}, keys, top, bottom)
    with pytest.raises(ReccbmError, match="position 3 is outside the rubric's 3 concepts"):
        contrast_concepts(on | {"contrast_bottom": [3]}, keys, top, bottom)


def test_the_default_takes_mohlers_marks_and_a_cfg_names_concepts_by_key() -> None:
    from rubrictool.train import parse_cfg, resolve_training

    s1 = resolve_training("mohler").recipe.stage1
    assert s1.contrast > 0 and (s1.contrast_top, s1.contrast_bottom) == ((0, 1, 2, 4), (0, 1, 4))  # FC CC TU R; FC CC R
    assert resolve_training("mohler", preset="plain").recipe.stage1.contrast == 0
    named = resolve_training("mohler", overrides=parse_cfg(["stage1.contrast_top=[R, FC]"])).recipe.stage1
    assert (named.contrast_top, named.contrast_bottom) == ((4, 0), (0, 1, 4))
    with pytest.raises(TrainError, match="no concept 'fc'.*FC, CC"):
        resolve_training("mohler", overrides=parse_cfg(["stage1.contrast_bottom=[fc]"]))
    assert resolve_training("asap2").recipe.stage1.contrast_top == ()  # essays without a reference: none marked


def test_a_rubric_that_marks_no_concept_trains_without_examples_across_questions_and_says_so(
        tmp_path: Path, backbone: str) -> None:
    from rubrictool.data import split_items
    from rubrictool.train import TrainOptions, train_model
    from rubrictool.train.run import CONTRAST_OFF

    rb = load_rubric("mohler")
    unmarked = rb.model_copy(update={"concepts": [c.model_copy(update={"reference_is_top": False,
                                                                        "off_topic_is_bottom": False})
                                                  for c in rb.concepts]})
    df = mohler_like_table(60)
    over = {"model": {"max_len": 32, "backbone": backbone},
            "stage1": {"epochs": 1, "lr": 3e-3, "device": "cpu", "encoder": "train"}, "joint": {"epochs": 1},
            "stage2": {"epochs": 3}}
    split = split_items(df, seed=0)
    marked = train_model(rb, df, split, tmp_path / "marked", options=TrainOptions(overrides=over))
    bare = train_model(unmarked, df, split, tmp_path / "bare", options=TrainOptions(overrides=over))
    assert CONTRAST_OFF in bare.notes and CONTRAST_OFF not in marked.notes
    no_reference = unmarked.model_copy(update={"fields": {k: v for k, v in rb.fields.items() if k != "reference"}})
    essays = train_model(no_reference, df, split, tmp_path / "essays", options=TrainOptions(overrides=over))
    assert CONTRAST_OFF not in essays.notes  # nothing to mark without a reference answer: no advice to mark it
    p_marked, p_bare = (pd.read_csv(tmp_path / n / "test_predictions.csv") for n in ("marked", "bare"))
    assert not np.allclose(p_marked["FC_p1"], p_bare["FC_p1"])  # the marked rubric's examples reached the heads


def test_a_graders_rubric_marks_set_its_examples_across_questions() -> None:
    from reccbm import Concept, Grader, Rubric

    rubric = Rubric((Concept("EV", reference_is_top=True, off_topic_is_bottom=True), Concept("MC")), levels=(0, 2),
                    grades=(0, 3))
    assert Grader(rubric)._overrides()["stage1"] == {"contrast_top": [0], "contrast_bottom": [0]}
    assert "stage1" not in Grader(rubric, recipe="plain")._overrides()  # no contrast in that recipe
    named = Grader(rubric, overrides={"stage1": {"contrast_top": ["MC"]}})._overrides()["stage1"]
    assert named == {"contrast_top": [1], "contrast_bottom": [0]}


def _rubric_recipe(backbone: str, n: int, encoder: str = "train") -> reccbm.Recipe:
    mcfg = reccbm.ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32,
                              rubric_input=n)
    return reccbm.Recipe(mcfg, replace(FAST1, encoder=encoder), reccbm.JointConfig(epochs=1),
                         reccbm.StageIIConfig(epochs=2)).seeded(0)


TEXTS = ["Correctness. The answer is accurate. Incorrect. Correct.", "Coverage. All key ideas. Missing. Complete.",
         "Fluency. Reads well. Hard to read. Fluent."]


def test_the_rubric_in_the_input_is_read_with_the_answer_and_kept_with_the_model(backbone: str, tmp_path: Path) -> None:
    """model.rubric_input: each concept's text (at most n tokens) goes in the encoder's input after [CLS], one span per
    concept; H keeps the input's own positions; the shared classifier trains from zero; another rubric text gives
    other concept outputs for the same answer; a checkpoint restores the rubric and the predictions."""
    from reccbm.fit import rubric_tokens

    _, tok = tiny_model(backbone)
    ids, spans = rubric_tokens(tok, TEXTS, 4)
    sep = separator_id(tok)
    assert len(spans) == 4 and spans[0] == 0 and spans[-1] == len(ids)
    assert [ids[b - 1] for b in spans[1:]] == [sep] * 3  # each span ends with the separator
    assert all(1 < spans[k + 1] - spans[k] <= 5 for k in range(3))  # at most 4 tokens of each text
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    model = reccbm.fit(train, dev, _rubric_recipe(backbone, 4), tok, concept_texts=TEXTS).model
    assert isinstance(model, reccbm.RecCBM) and model.rubric_head is not None
    assert model.config.rubric_ids == ids and model.config.rubric_spans == spans
    assert float(model.rubric_head.weight.detach().abs().sum()) > 0  # trained from zero
    model.eval()
    batch = collate(dev, list(range(len(dev))), tok.pad_token_id)
    with torch.no_grad():
        H, r = model.read(batch)
        assert H.shape[:2] == batch["input_ids"].shape and r is not None and r.shape == (len(dev), 3, H.shape[-1])
        logits = model.concepts(batch)[0]
        other = reccbm.RecCBM(replace(model.config, rubric_ids=rubric_tokens(tok, TEXTS[::-1], 4)[0],
                                      rubric_spans=rubric_tokens(tok, TEXTS[::-1], 4)[1]), model.encoder)
        other.load_state_dict(model.state_dict())
        other.eval()
        assert not torch.allclose(other.concepts(batch)[0], logits, atol=1e-4)  # the rubric is read, not ignored
    reccbm.save_checkpoint(model, tok, tmp_path / "run", "joint", 0)
    back, _, _ = reccbm.load_checkpoint(tmp_path / "run")
    assert isinstance(back, reccbm.RecCBM) and back.config.rubric_ids == ids
    back.eval()
    with torch.no_grad():
        torch.testing.assert_close(back.concepts(batch)[0], logits)


def test_the_rubric_in_the_input_trains_a_frozen_encoder_without_cached_states_and_says_when_it_does_not_fit(
        backbone: str) -> None:
    """A frozen encoder reads the rubric with every input (no states to cache); a rubric longer than the backbone's
    positions with max_len, or no concept texts, end in one clear error."""
    _, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    fitted = reccbm.fit(train, dev, _rubric_recipe(backbone, 3, encoder="frozen"), tok, concept_texts=TEXTS)
    assert isinstance(fitted.model, reccbm.RecCBM) and fitted.model.rubric_head is not None
    with pytest.raises(reccbm.ReccbmError, match="concept texts"):
        reccbm.fit(train, dev, _rubric_recipe(backbone, 3), tok)
    positions = reccbm.TextEncoder.from_pretrained(backbone).hf_config.max_position_embeddings
    with pytest.raises(reccbm.ReccbmError, match="positions"):
        reccbm.fit(train, dev, _rubric_recipe(backbone, positions), tok,
                   concept_texts=[" ".join(["word"] * positions)] * 3)
