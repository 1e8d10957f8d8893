"""Tiny random backbones of the paper's five families, built locally (no download), toy tables and
a tiny trained run, for the trainer and grading tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from typer.testing import CliRunner

from reccbm import (
    PLM,
    EncodedItems,
    ModelConfig,
    RecCBM,
    StageIConfig,
    StageIIConfig,
    TextEncoder,
    encode_inputs,
    load_tokenizer,
)
from reccbm.data import collate
from rubrictool.cli import app

WORDS = ["what", "is", "a", "stack", "queue", "list", "array", "pointer", "the", "of", "and", "to", "it", "in", "that",
         "data", "structure", "first", "last", "out", "element", "elements", "value", "values", "stores", "store",
         "memory", "node", "nodes", "linked", "order", "returns", "function", "variable", "program", "loop", "computer",
         "yes", "no", "not", "maybe", "random", "wrong", "right", "good", "bad", "answer", "question", "reference"]

FAMILIES = ["bert", "roberta", "gpt2", "bart", "t5"]


def build_tokenizer(path: Path, family: str, words: Sequence[str] = WORDS) -> None:
    """A WordLevel fast tokenizer over ``words`` (default WORDS) with the family's special-token layout."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "eos": "[EOS]"}
    vocab = {t: i for i, t in enumerate(list(specials.values()) + list(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    kw: dict[str, Any] = {"pad_token": "[PAD]", "unk_token": "[UNK]", "eos_token": "[EOS]"}
    names = ["input_ids", "attention_mask"]
    if family == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        kw |= {"cls_token": "[CLS]", "sep_token": "[SEP]"}
        names = ["input_ids", "token_type_ids", "attention_mask"]
    elif family in ("roberta", "bart"):
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [EOS]", pair="[CLS] $A [EOS] [EOS] $B [EOS]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[EOS]", vocab["[EOS]"])],
        )
        kw |= {"cls_token": "[CLS]", "sep_token": "[EOS]", "bos_token": "[CLS]"}
    elif family == "t5":
        tok.post_processor = processors.TemplateProcessing(
            single="$A [EOS]", pair="$A [EOS] $B [EOS]", special_tokens=[("[EOS]", vocab["[EOS]"])]
        )
    else:  # gpt2: no special tokens added, no pad token (the loader sets pad = eos)
        kw.pop("pad_token")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=names, **kw)  # type: ignore[no-untyped-call]
    fast.save_pretrained(str(path))


def tiny_hf_config(family: str, vocab_size: int) -> Any:
    import transformers as tf

    h: dict[str, Any] = {"vocab_size": vocab_size}
    if family == "bert":
        return tf.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, **h)
    if family == "roberta":
        return tf.RobertaConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, pad_token_id=0, **h
        )
    if family == "gpt2":
        return tf.GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=128, **h)
    if family == "bart":
        return tf.BartConfig(
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128, pad_token_id=0, **h,
        )
    if family == "t5":
        return tf.T5Config(d_model=32, d_kv=16, d_ff=37, num_layers=1, num_decoder_layers=1, num_heads=2,
                           pad_token_id=0, **h)
    raise ValueError(family)


def build_backbone(root: Path, family: str = "bert", seed: int = 0, words: Sequence[str] = WORDS) -> str:
    """A saved tiny random backbone + tokenizer folder, loadable by name like a hub model; ``words`` is its
    vocabulary (default WORDS, a course fixture passes its own)."""
    path = root / f"tiny-{family}"
    if not (path / "config.json").is_file():
        build_tokenizer(path, family, words)
        torch.manual_seed(seed)
        from transformers import AutoModel

        AutoModel.from_config(tiny_hf_config(family, len(words) + 5)).save_pretrained(str(path))  # type: ignore[no-untyped-call]
    return str(path)


def fits_counting_encoder_runs(monkeypatch: Any, fit: Callable[[bool, int], Any]
                               ) -> tuple[dict[tuple[bool, int], Any], dict[tuple[bool, int], int]]:
    """``fit(cache_states, epochs)`` for (cached, 2), (uncached, 2) and (cached, 4) epochs, each with the number of
    times it ran TextEncoder.forward (the whole encoder, or the layers under a cut): (fits, runs), keyed (cache,
    epochs)."""
    calls = {"n": 0}
    forward = TextEncoder.forward

    def counted(self: TextEncoder, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls["n"] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(TextEncoder, "forward", counted)
    fits, runs = {}, {}
    for cache, epochs in ((True, 2), (False, 2), (True, 4)):
        calls["n"] = 0
        fits[cache, epochs] = fit(cache, epochs)
        runs[cache, epochs] = calls["n"]
    return fits, runs


def toy_table(n: int = 48, K: int = 3, seed: int = 0) -> dict[str, Any]:
    """Toy items whose concept levels (0..2) and grade (0..3) follow the words in the response."""
    rng = np.random.default_rng(seed)
    good, bad = ["right", "good", "yes"], ["wrong", "bad", "no"]
    questions, responses, contexts, concepts, grades = [], [], [], [], []
    for i in range(n):
        lv = rng.integers(0, 3, size=K)
        words = [good[k] if lv[k] == 2 else (bad[k] if lv[k] == 0 else "maybe") for k in range(K)]
        responses.append(" ".join(words + list(rng.choice(WORDS[:20], size=int(rng.integers(2, 9))))))
        questions.append("what is a stack")
        contexts.append("a stack stores elements last in first out" if i % 3 else "")
        concepts.append(lv)
        grades.append(int(min(3, lv.sum() // 2)))
    return {"q": questions, "r": responses, "a": contexts, "c": np.array(concepts), "y": np.array(grades)}


def collated(tokenizer: Any, questions: list[str], answers: list[str], refs: list[str],
             max_len: int = 32) -> dict[str, torch.Tensor]:
    """One batch of x = (q, r, a) inputs as the loader collates them (no labels)."""
    feats = encode_inputs(tokenizer, questions, answers, refs, max_len)
    return collate(EncodedItems(feats), list(range(len(feats))), tokenizer.pad_token_id)


def encoded(tokenizer: Any, table: dict[str, Any], max_len: int = 32) -> EncodedItems:
    feats = encode_inputs(tokenizer, table["q"], table["r"], table["a"], max_len)
    return EncodedItems(feats, table["c"].astype(np.int64), table["y"].astype(np.int64))


def tiny_model(backbone: str, K: int = 3, **flags: Any) -> tuple[RecCBM, Any]:
    cfg = ModelConfig(num_concepts=K, num_levels=3, num_grades=4, backbone=backbone, max_len=32, **flags)
    return RecCBM(cfg, TextEncoder.from_pretrained(backbone)), load_tokenizer(backbone)


def tiny_plm(backbone: str, K: int = 3) -> tuple[PLM, Any]:
    """The PLM baseline on ``backbone`` with tiny_model's sizes."""
    cfg = ModelConfig(num_concepts=K, num_levels=3, num_grades=4, backbone=backbone, max_len=32, plm=True,
                      race=False, lcec=False)
    return PLM(cfg, TextEncoder.from_pretrained(backbone)), load_tokenizer(backbone)


KEYS = ["FC", "CC", "TU", "CP", "R", "DU", "EE", "FR"]


def mohler_like_table(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """Items on the Mohler rubric (8 concepts, levels 1..3, grades 0..5) with learnable signal."""
    t = toy_table(n, K=3, seed=seed)
    c = t["c"]  # (n, 3) in 0..2
    df = pd.DataFrame({"id": [f"q.{i}" for i in range(n)], "question": t["q"], "response": t["r"],
                       "reference": t["a"], "context": None})
    for k, key in enumerate(KEYS):
        df[key] = c[:, k % 3] + 1
    df["grade"] = np.clip(c.sum(1), 0, 5)
    return df


def train_with_cli(tmp_path: Path, backbone: str, df: pd.DataFrame, *extra: str) -> tuple[int, str, Path]:
    data = tmp_path / "adjudicated.csv"
    df.to_csv(data, index=False)
    out = tmp_path / "run"
    args = ["train", "--table", str(data), "--rubric", "mohler", "--backbone", backbone, "--epochs", "2",
            "--max-len", "32", "--out", str(out), "--device", "cpu", "--lr", "3e-3", *extra]
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output, out


def tiny_bert_run(tmp: Path, *extra: str) -> Path:
    """A run directory trained through the CLI on 40 Mohler-like items with a tiny BERT (for grading tests)."""
    code, output, run = train_with_cli(tmp, build_backbone(tmp, "bert"), mohler_like_table(40), *extra)
    assert code == 0, output
    return run


# One short Stage I epoch and three Stage II epochs: enough for a tiny model to move, fast on one thread.
FAST1 = StageIConfig(lr=3e-3, epochs=1, batch_size=8, patience=3, eval_batch_size=16, device="cpu")
FAST2 = StageIIConfig(lr=0.05, epochs=3, batch_size=8)
