"""Only the encoder's top layers train (StageIConfig.train_top_layers): the layers below and the embeddings stay
pretrained, their output is computed once per input, and the layers above run on it each step and give the encoder's
own states."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import reccbm
from reccbm import JointConfig, ModelConfig, ReccbmError, Recipe, StageIConfig, StageIIConfig, TextEncoder
from reccbm.encoder import parameter_depths, states_layer
from tests.support.tiny_models import (
    FAST1,
    WORDS,
    build_tokenizer,
    encoded,
    fits_counting_encoder_runs,
    toy_table,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(family: str, layers: int) -> Any:
    import transformers as tf

    h: dict[str, Any] = {"vocab_size": len(WORDS) + 5, "hidden_size": 32, "num_hidden_layers": layers,
                         "num_attention_heads": 2, "intermediate_size": 37}
    if family == "bert":
        return tf.BertConfig(**h)
    if family == "roberta":
        return tf.RobertaConfig(pad_token_id=0, **h)
    return tf.MPNetConfig(pad_token_id=0, **h)


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random BERT of three layers + its tokenizer, saved like a hub model."""
    from transformers import AutoModel

    path = tmp_path_factory.mktemp("deep") / "tiny-bert-3"
    build_tokenizer(path, "bert")
    torch.manual_seed(0)
    AutoModel.from_config(_config("bert", 3)).save_pretrained(str(path))  # type: ignore[no-untyped-call]
    return str(path)


@pytest.mark.parametrize("family", ["bert", "roberta", "mpnet"])
def test_the_layers_above_a_cut_give_the_encoders_own_states(family: str) -> None:
    torch.manual_seed(0)
    enc = TextEncoder.from_config(_config(family, 3)).eval()
    ids = torch.randint(5, len(WORDS) + 5, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:], mask[2, 4:] = 0, 0
    with torch.no_grad():
        H = enc(ids, mask)
        assert torch.equal(enc.lower(ids, mask), H) and enc.upper(H, mask) is H  # no cut: the states are H
        for cut in (1, 2):
            enc.states_layer = cut
            S = enc.lower(ids, mask)
            assert not torch.allclose(S, H)  # a lower layer's output, not H
            torch.testing.assert_close(enc.upper(S, mask), H, atol=1e-6, rtol=1e-5)
        assert torch.equal(enc(ids, mask), H)  # every layer is back in place
    assert enc.n_layers() == 3 and states_layer(enc, 0) is None and states_layer(enc, 1) == 2


def _recipe(backbone: str, plm: bool = False, epochs: int = 2, **stage1: Any) -> Recipe:
    model = ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level",
                        plm=plm, race=not plm, lcec=not plm)
    return Recipe(model, replace(FAST1, encoder="train", epochs=epochs, **{"train_top_layers": 1, **stage1}),
                  JointConfig(epochs=0 if plm else 1, lr=3e-3, select="last", intervention_p=0.25),
                  StageIIConfig(lr=0.05, epochs=3, batch_size=8, lcec_fit="dev"))


def _data(backbone: str) -> tuple[Any, reccbm.EncodedItems, reccbm.EncodedItems]:
    tok = reccbm.load_tokenizer(backbone)
    return tok, encoded(tok, toy_table(48, seed=0)), encoded(tok, toy_table(24, seed=1))


@pytest.mark.parametrize("plm", [False, True], ids=["reccbm", "plm"])
def test_only_the_top_layer_trains_on_states_computed_once(deep: str, plm: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    tok, train, dev = _data(deep)
    pretrained = TextEncoder.from_pretrained(deep)
    depths, L = parameter_depths(pretrained)
    names = {id(p): n for n, p in pretrained.named_parameters()}
    below = {names[i] for i, d in depths.items() if d <= L - 1}  # the embeddings and layers 1..2
    top = {names[i] for i, d in depths.items() if d == L}
    assert len(below) > len(top) > 0 and L == 3  # the embeddings and two layers below the cut; one layer above
    fits, runs = fits_counting_encoder_runs(monkeypatch, lambda cache, epochs: reccbm.fit(
        train, dev, _recipe(deep, plm, epochs, cache_states=cache), tok))
    cached, uncached = fits[True, 2], fits[False, 2]
    state, before = cached.model.encoder.state_dict(), pretrained.state_dict()
    assert cached.encoder == "train" and cached.states_seconds > 0 and uncached.states_seconds == 0
    assert [k for k in below if not torch.equal(state[k], before[k])] == []
    assert sum(not torch.equal(state[k], before[k]) for k in top) > len(top) // 2
    # the cache gives what running the pretrained layers every step gives (dropout off under the cut either way)
    a = reccbm.predict(cached.model, dev, tok.pad_token_id)
    b = reccbm.predict(uncached.model, dev, tok.pad_token_id)
    np.testing.assert_allclose(a.grade_probs, b.grade_probs, atol=1e-5)
    losses = [[h["train_loss"] for h in f.stage1.history] for f in (cached, uncached)]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    # the whole encoder on new answers reads them as the cut one trained on them
    cut = TextEncoder.from_pretrained(deep)
    cut.states_layer = L - 1
    states = reccbm.encoder_states(cut, dev, tok.pad_token_id)
    c = reccbm.predict(cached.model, dev, tok.pad_token_id, states=states)
    np.testing.assert_allclose(a.grade_probs, c.grade_probs, atol=1e-5)
    # the pretrained layers run a fixed number of times (states once, the final dev metrics), not once per step
    assert runs[True, 2] == runs[True, 4] < runs[False, 2]


def test_top_layers_beyond_the_backbone_or_below_zero_are_refused(deep: str) -> None:
    with pytest.raises(ValueError, match="train_top_layers is >= 0"):
        StageIConfig(train_top_layers=-1)
    tok, train, dev = _data(deep)
    with pytest.raises(ReccbmError, match=r"train_top_layers 3: the backbone has 3 layers; use 1\.\.2, or 0"):
        reccbm.fit(train, dev, _recipe(deep, train_top_layers=3), tok)


def test_a_frozen_encoder_ignores_top_layers(deep: str, tmp_path: Path) -> None:
    """encoder "frozen" trains no layer whatever train_top_layers says: its states are H, uncut."""
    tok, train, dev = _data(deep)
    r = _recipe(deep)
    fitted = reccbm.fit(train, dev, replace(r, stage1=replace(r.stage1, encoder="frozen")), tok)
    assert fitted.encoder == "frozen" and fitted.model.encoder.states_layer is None
    before = TextEncoder.from_pretrained(deep).state_dict()
    assert all(torch.equal(v, before[k]) for k, v in fitted.model.encoder.state_dict().items())


def test_a_course_trains_its_top_layers_from_the_cli_and_a_cut_too_high_is_one_line(deep: str, tmp_path: Path) -> None:
    """On a course that is not Mohler (stats101: three concepts on 0..2, grade 0..2, its own rubric)."""
    import yaml

    from tests.support.stats_course import stats_table, train_stats

    code, output, run = train_stats(tmp_path, deep, stats_table(40), "--encoder", "train", "--cfg",
                                    "stage1.train_top_layers=1")
    assert code == 0, output
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["stage1"]["train_top_layers"] == 1 and config["stage1"]["encoder"] == "train"
    pretrained = TextEncoder.from_pretrained(deep).state_dict()
    trained = reccbm.load_checkpoint(run)[0].encoder.state_dict()
    moved = {k.split(".layer.")[1].split(".")[0] for k in pretrained
             if ".layer." in k and not torch.equal(pretrained[k], trained[k])}
    assert moved == {"2"}  # the top layer of three, alone
    assert all(torch.equal(pretrained[k], trained[k]) for k in pretrained if "embeddings" in k)

    (tmp_path / "high").mkdir()
    code, output, run = train_stats(tmp_path / "high", deep, stats_table(40), "--encoder", "train", "--cfg",
                                    "stage1.train_top_layers=3")
    text = " ".join(output.split())
    assert code == 1 and "Traceback" not in output, output
    assert "train_top_layers 3: the backbone has 3 layers; use 1..2, or 0 for all" in text
    assert not run.exists()


@pytest.mark.parametrize("family,why", [
    ("bart", "does not give its own states"),  # positions added after the embeddings: they would be added twice
    ("gpt2", "cannot find the transformer layers"),
    ("t5", "cannot be cut at a layer"),
])
def test_a_backbone_that_cannot_be_cut_is_refused_and_left_whole(family: str, why: str) -> None:
    import transformers as tf

    cfg = {"bart": lambda: tf.BartConfig(vocab_size=60, d_model=32, encoder_layers=3, decoder_layers=1,
                                         encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
                                         decoder_ffn_dim=37, max_position_embeddings=128, pad_token_id=0),
           "gpt2": lambda: tf.GPT2Config(vocab_size=60, n_embd=32, n_layer=3, n_head=2, n_positions=128,
                                         bos_token_id=1, eos_token_id=1),
           "t5": lambda: tf.T5Config(vocab_size=60, d_model=32, d_kv=16, d_ff=37, num_layers=3, num_decoder_layers=1,
                                     num_heads=2, pad_token_id=0)}[family]()
    torch.manual_seed(0)
    enc = TextEncoder.from_config(cfg).eval()
    ids, mask = torch.randint(2, 60, (2, 7)), torch.ones(2, 7, dtype=torch.long)
    with torch.no_grad():
        H = enc(ids, mask)
    with pytest.raises(ReccbmError, match=why):
        states_layer(enc, 1)
    with torch.no_grad():
        assert enc.states_layer is None and torch.equal(enc(ids, mask), H)  # layers and embeddings back in place
