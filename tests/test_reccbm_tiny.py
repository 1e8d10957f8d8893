"""Every one of the paper's five backbone families (tiny random models built locally by
tests/support/tiny_models.py) runs a training step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.tiny_models import FAMILIES, build_backbone, encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")

@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.mark.parametrize("family", FAMILIES)
def test_each_backbone_family_runs_a_step(tiny_root: Path, family: str) -> None:
    from reccbm.model import concept_loss, opcc_loss

    backbone = build_backbone(tiny_root, family)
    model, tok = tiny_model(backbone)
    items = encoded(tok, toy_table(8))
    from reccbm.data import collate

    batch = collate(items, list(range(8)), tok.pad_token_id)
    # padding is handled: an item's outputs do not depend on how much padding follows it
    i = int(batch["attention_mask"].sum(1).argmin())  # the most padded item
    n = int(batch["attention_mask"][i].sum())
    assert n < batch["attention_mask"].shape[1]
    tokens = ("input_ids", "attention_mask", "token_type_ids")
    model.eval()
    with torch.no_grad():
        alone = model({k: v[i : i + 1, :n] for k, v in batch.items() if k in tokens})
        padded = model(batch)
    torch.testing.assert_close(alone.p_hat[0], padded.p_hat[i], atol=1e-5, rtol=1e-4)
    model.train()
    out = model(batch)
    loss = concept_loss(out.concept_logits, batch["concepts"]) + opcc_loss(out.c_hat, batch["concepts"])
    loss.backward()  # type: ignore[no-untyped-call]
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_encode_inputs_reports_exactly_the_inputs_it_cut(tiny_root: Path, family: str) -> None:
    from reccbm.data import encode_inputs, load_tokenizer

    tok = load_tokenizer(build_backbone(tiny_root, family))
    max_len = 16
    responses = ["stack"] * 3 + ["the data structure stores the first element of the list in memory order"] * 3
    questions = ["what is a stack", "what is a queue of the data structure that stores values", "it"] * 2
    contexts = ["", "first in first out", ""] * 2
    cut: list[int] = []
    feats = encode_inputs(tok, questions, responses, contexts, max_len, cut)
    assert all(len(f["input_ids"]) <= max_len for f in feats)
    sep = tok.sep_token or tok.eos_token
    budget = max_len - (tok.num_special_tokens_to_add(pair=True) or 1)
    n_tokens = [len(tok(f"{q} {sep} {c}" if c else q, add_special_tokens=False)["input_ids"])
                + len(tok(r, add_special_tokens=False)["input_ids"]) for q, r, c in zip(questions, responses, contexts)]
    assert cut == [i for i, n in enumerate(n_tokens) if n > budget]
    assert 0 < len(cut) < len(responses)
    none: list[int] = []
    encode_inputs(tok, questions, responses, contexts, 512, none)
    assert none == []  # everything fits: nothing reported


def _encode_through_transformers(tok: Any, questions: list[str], responses: list[str], contexts: list[str],
                                 max_len: int) -> list[dict[str, list[int]]]:
    """encode_inputs as it was written through the transformers wrapper (the reference for the Rust-backend path)."""
    from reccbm.data import _cut

    sep = tok.sep_token or tok.eos_token or "\n"
    manual = tok.num_special_tokens_to_add(pair=True) == 0
    budget = max_len - (1 if manual else tok.num_special_tokens_to_add(pair=True))
    firsts = [f"{q} {sep} {c}" if c.strip() else q for q, c in zip(questions, contexts)]
    kw: dict[str, Any] = {"add_special_tokens": False, "return_offsets_mapping": True, "verbose": False}
    enc_f, enc_r = tok(firsts, **kw), tok(list(responses), **kw)
    keep_f, keep_r = [], []
    for f_ids, r_ids in zip(enc_f["input_ids"], enc_r["input_ids"]):
        keep_r.append(min(len(r_ids), budget - min(len(f_ids), budget // 4)))
        keep_f.append(min(len(f_ids), budget - keep_r[-1]))
    firsts = _cut(firsts, enc_f["offset_mapping"], keep_f)
    resp = _cut(responses, enc_r["offset_mapping"], keep_r)
    call: dict[str, Any] = {"truncation": "longest_first", "max_length": max_len}
    enc = tok([f"{f} {sep} {r}" for f, r in zip(firsts, resp)], **call) if manual else tok(firsts, resp, **call)
    names = [n for n in ("input_ids", "token_type_ids") if n in enc and n in tok.model_input_names]
    return [{n: list(enc[n][i]) for n in names} for i in range(len(firsts))]


@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2", "bart", "t5", "minilm"])
def test_encode_inputs_gives_the_ids_the_transformers_wrapper_gives(tiny_root: Path, family: str) -> None:
    """The Rust backend called directly gives the same ids and token types as the transformers call it replaces, cut
    or not, with and without a reference, and leaves the tokenizer as the wrapper expects it (no truncation set)."""
    from reccbm import default_backbone
    from reccbm.data import encode_inputs, load_tokenizer

    tok = load_tokenizer(default_backbone() if family == "minilm" else build_backbone(tiny_root, family))
    questions = ["What is a stack?", "what is a queue of the data structure that stores values", "it",
                 "Où est-il ?"] * 3
    responses = ["stack", "the data structure stores the first element of the list in memory order " * 3,
                 "LIFO: last-in, first-out.", "  "] * 3
    contexts = ["", "first in first out", "a stack stores elements last in first out", "référence"] * 3
    for max_len in (12, 24, 128):
        want = _encode_through_transformers(tok, questions, responses, contexts, max_len)
        assert encode_inputs(tok, questions, responses, contexts, max_len) == want
        assert tok.backend_tokenizer.truncation is None  # nothing left set for the next caller
