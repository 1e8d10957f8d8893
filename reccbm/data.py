"""Inputs for REC-CBM: tokenising x = (q, r, a) and batching encoded items.

One sequence per item, built with the backbone's own special tokens as a pair:
``first = question [SEP] auxiliary context`` and ``second = response`` (``[SEP]`` is the
tokenizer's sep token, else its eos token). Truncation keeps the response: it gets up to
3/4 of the budget even when the question and context are long, and the first segment is cut
from its end (the context tail goes first). Backbones without pair tokens (GPT-2) get the
eos token between the two segments.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from reccbm.errors import ReccbmError
from reccbm.normalise import course_lexicon, normaliser_for, vocabulary_words

__all__ = ["TEXT_COLUMNS", "EncodedItems", "check_labels", "collate", "encode_inputs", "encode_table", "load_tokenizer",
           "read_responses", "responses_as_read", "table_lexicon", "table_texts"]

TEXT_COLUMNS = ("question", "reference", "context", "response")  # the text columns of a table of answers


def load_tokenizer(name_or_path: str) -> Any:
    """The backbone's tokenizer (local paths never touch the network); GPT-2 style: pad = eos."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=os.path.isdir(name_or_path))
    except (OSError, ValueError) as exc:
        raise ReccbmError(f"cannot load the tokenizer of {name_or_path!r}: {exc}".splitlines()[0]) from exc
    if not getattr(tok, "is_fast", False):
        raise ReccbmError(f"the tokenizer of {name_or_path!r} is not a fast (Rust) tokenizer")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    tok.padding_side = "right"
    return tok


def _cut(texts: Sequence[str], offsets: Sequence[Sequence[tuple[int, int]]], keep: Sequence[int]) -> list[str]:
    """Each text cut after its keep-th token (character offsets from the fast tokenizer)."""
    out = []
    for text, offs, k in zip(texts, offsets, keep):
        out.append(text if k >= len(offs) else (text[: offs[k - 1][1]] if k > 0 else ""))
    return out


def encode_inputs(
    tokenizer: Any,
    questions: Sequence[str],
    responses: Sequence[str],
    contexts: Sequence[str],
    max_len: int,
    truncated: list[int] | None = None,
    question: bool = True,
    normalise: bool = False,
    lexicon: tuple[str, ...] = (),
) -> list[dict[str, list[int]]]:
    """Token ids (and token type ids when the backbone uses them) for each x = (q, r, a).

    ``truncated``, when given, receives the positions of the items whose text did not fit in
    ``max_len`` tokens and was cut (the caller decides how to tell the user). ``question`` False
    leaves the questions out (``ModelConfig.question_input``): the first segment is ``[SEP] r``. ``normalise``
    (``ModelConfig.normalise``): each response read after :mod:`reccbm.normalise` (whitespace, final punctuation,
    one-letter slips) against its own question and reference, and ``lexicon`` (``ModelConfig.lexicon``: the course's
    words, :func:`reccbm.normalise.course_lexicon`).
    """
    if not (len(questions) == len(responses) == len(contexts)):
        raise ReccbmError("questions, responses and contexts must have the same length")
    if normalise:
        responses = read_responses(tokenizer, questions, responses, contexts, lexicon)
    if not question:
        questions = [""] * len(questions)
    sep = tokenizer.sep_token or tokenizer.eos_token or "\n"
    pair_specials = tokenizer.num_special_tokens_to_add(pair=True)
    manual_sep = pair_specials == 0  # decoder-only: join the segments with eos ourselves
    budget = max_len - (1 if manual_sep else pair_specials)
    if budget < 4:
        raise ReccbmError(f"max_len={max_len} leaves no room for the text")
    firsts = [f"{q} {sep} {c}" if c.strip() else q for q, c in zip(questions, contexts)]
    # The fast tokenizer's Rust backend, called as the transformers wrapper calls it (no padding; truncation as
    # asked), without the wrapper's per-item conversion to Python dicts (most of the time on thousands of answers).
    backend = tokenizer.backend_tokenizer
    backend.no_padding()
    backend.no_truncation()  # full lengths on purpose: the cut happens below
    enc_f = backend.encode_batch(firsts, add_special_tokens=False)
    enc_r = backend.encode_batch(list(responses), add_special_tokens=False)
    keep_f, keep_r = [], []
    for i, (ef, er) in enumerate(zip(enc_f, enc_r)):
        n_f, n_r = len(ef.ids), len(er.ids)
        r_keep = min(n_r, budget - min(n_f, budget // 4))
        keep_r.append(r_keep)
        keep_f.append(min(n_f, budget - r_keep))
        if truncated is not None and (r_keep < n_r or keep_f[-1] < n_f):
            truncated.append(i)
    firsts = _cut(firsts, [e.offsets for e in enc_f], keep_f)
    resp = _cut(responses, [e.offsets for e in enc_r], keep_r)
    backend.enable_truncation(max_len, strategy="longest_first",
                              direction=getattr(tokenizer, "truncation_side", "right"))  # a safety net
    try:
        if manual_sep:
            enc = backend.encode_batch([f"{f} {sep} {r}" for f, r in zip(firsts, resp)], add_special_tokens=True)
        else:
            enc = backend.encode_batch(list(zip(firsts, resp)), add_special_tokens=True)
    finally:
        backend.no_truncation()
    types = "token_type_ids" in tokenizer.model_input_names
    return [{"input_ids": e.ids, "token_type_ids": e.type_ids} if types else {"input_ids": e.ids} for e in enc]


def read_responses(tokenizer: Any, questions: Sequence[str], responses: Sequence[str],
                   contexts: Sequence[str], lexicon: tuple[str, ...] = ()) -> list[str]:
    """Each response as a model with ``ModelConfig.normalise`` reads it (:mod:`reccbm.normalise`, against its own
    question and reference, and the run's ``lexicon``): what :func:`encode_inputs` encodes, for whatever else must
    judge the same text."""
    fix = normaliser_for(tokenizer, tuple(lexicon))
    return [fix(r, q, c) for r, q, c in zip(responses, questions, contexts)]


def responses_as_read(tokenizer: Any, table: Any, normalise: bool, lexicon: tuple[str, ...] = ()) -> list[str]:
    """The responses of a table's rows (:func:`table_texts`) as a model reads them: normalised with ``normalise``
    (the model's ``ModelConfig.normalise``, and its ``lexicon``), else as written."""
    q, aux, r = table_texts(table)
    return read_responses(tokenizer, q, r, aux, lexicon) if normalise else r


def table_texts(table: Any) -> tuple[list[str], list[str], list[str]]:
    """(questions, contexts, responses) of a table's rows (a DataFrame with TEXT_COLUMNS): the reference answer and the
    context joined as the context, each left out when blank. A missing column or an empty cell is empty text."""
    n = len(table)
    text = {c: table[c].fillna("").astype(str).tolist() if c in table.columns else [""] * n for c in TEXT_COLUMNS}
    aux = [" \n ".join(p for p in (r, c) if p.strip()) for r, c in zip(text["reference"], text["context"])]
    return text["question"], aux, text["response"]


def encode_table(tokenizer: Any, table: Any, max_len: int, truncated: list[int] | None = None, *,
                 question: bool = True, normalise: bool = False,
                 lexicon: tuple[str, ...] = ()) -> list[dict[str, list[int]]]:
    """:func:`encode_inputs` of every row of a table of answers (:func:`table_texts`): the one input rule that
    training, grading and the report share."""
    q, aux, r = table_texts(table)
    return encode_inputs(tokenizer, q, r, aux, max_len, truncated, question=question, normalise=normalise,
                         lexicon=lexicon)


def table_lexicon(tokenizer: Any, table: Any, min_answers: int) -> tuple[str, ...]:
    """The course lexicon (``ModelConfig.lexicon``) of a table's answers — the training answers a run learns from:
    :func:`reccbm.normalise.course_lexicon` against the tokenizer's vocabulary; () when ``min_answers`` is 0."""
    if min_answers <= 0:
        return ()
    q, aux, r = table_texts(table)
    return course_lexicon(r, q, aux, vocabulary_words(tokenizer), min_answers)


def check_labels(values: Any, lo: int, hi: int, names: Sequence[str], rows: Sequence[Any] | None = None,
                 where: str = "") -> NDArray[np.int64]:
    """``values`` (N,) or (N, K) as int64, after checking every label is a whole number in ``lo``..``hi``; the first
    that is not raises a ReccbmError naming its row (``rows[i]``, else its position), its field (``names``: one per
    column) and the allowed range. ``where`` starts the message (e.g. "train")."""
    arr = np.asarray(values, dtype=object)
    flat = arr.reshape(len(arr), -1)  # (N, K)
    if flat.shape[1] != len(names):
        raise ReccbmError(f"{where + ': ' if where else ''}{flat.shape[1]} label column(s) for {len(names)} field(s)")
    num = np.full(flat.shape, np.nan)  # (N, K) the labels as floats, NaN where one is not a number
    for idx, v in np.ndenumerate(flat):
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
            num[idx] = float(v)
    bad = ~(np.isfinite(num) & (num == np.round(num)) & (num >= lo) & (num <= hi))  # (N, K)
    if bad.any():
        i, k = (int(x) for x in np.argwhere(bad)[0])
        label = rows[i] if rows is not None else i
        raise ReccbmError(f"{where + ' ' if where else ''}row {label}: {names[k]} is {flat[i, k]!r}, "
                          f"outside the allowed {lo}..{hi}")
    out: NDArray[np.int64] = num.astype(np.int64).reshape(np.shape(arr))
    return out


@dataclass
class EncodedItems:
    """Encoded inputs with their (0-based) labels: concepts (N, K) in 0..M and grades (N,) in 0..S."""

    features: list[dict[str, list[int]]]
    concepts: NDArray[Any] | None = None  # (N, K) int64
    grades: NDArray[Any] | None = None  # (N,) int64
    # (N, K, M+1) float: per answer and concept, the share of the reviewers who gave each level (soft targets,
    # StageIConfig.soft_targets); None = only the adjudicated level is known
    soft: NDArray[Any] | None = None
    # per answer, the token features of an edited copy that must read the same (StageIConfig.rdrop_views,
    # :func:`reccbm.views.encode_views`); None = no copies
    views: list[dict[str, list[int]]] | None = None

    def __post_init__(self) -> None:
        n = len(self.features)
        if self.views is not None and len(self.views) != n:
            raise ReccbmError(f"the answers' copies must be one per answer (N={n}), got {len(self.views)}")
        if self.soft is not None and (self.soft.ndim != 3 or len(self.soft) != n):
            raise ReccbmError(f"soft concept targets must be (N={n}, K, M+1), got {self.soft.shape}")
        if self.concepts is not None and (self.concepts.ndim != 2 or len(self.concepts) != n):
            raise ReccbmError(f"concept labels must be (N={n}, K), got {self.concepts.shape}")
        if self.grades is not None and self.grades.shape != (n,):
            raise ReccbmError(f"grades must be (N={n},), got {self.grades.shape}")

    def __len__(self) -> int:
        return len(self.features)

    def subset(self, idx: Sequence[int]) -> EncodedItems:
        ix = np.asarray(idx, dtype=np.int64)
        return EncodedItems(
            [self.features[i] for i in ix],
            None if self.concepts is None else self.concepts[ix],
            None if self.grades is None else self.grades[ix],
            None if self.soft is None else self.soft[ix],
            None if self.views is None else [self.views[i] for i in ix],
        )


def collate(items: EncodedItems, idx: Sequence[int] | NDArray[Any], pad_id: int) -> dict[str, Tensor]:
    """A right-padded batch (dynamic padding to the longest item) with labels when present."""
    feats = [items.features[i] for i in idx]
    T = max(len(f["input_ids"]) for f in feats)
    batch: dict[str, Tensor] = {}
    for name, fill in (("input_ids", pad_id), ("token_type_ids", 0)):
        if name in feats[0]:
            batch[name] = torch.tensor([f[name] + [fill] * (T - len(f[name])) for f in feats])  # (B, T)
    batch["attention_mask"] = torch.tensor([[1] * len(f["input_ids"]) + [0] * (T - len(f["input_ids"])) for f in feats])
    if items.concepts is not None:
        batch["concepts"] = torch.as_tensor(items.concepts[np.asarray(idx)])  # (B, K)
    if items.soft is not None:
        batch["concept_soft"] = torch.as_tensor(items.soft[np.asarray(idx)], dtype=torch.float32)  # (B, K, M+1)
    if items.grades is not None:
        batch["grades"] = torch.as_tensor(items.grades[np.asarray(idx)])  # (B,)
    return batch
