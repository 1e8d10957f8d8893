"""Copies of an answer that must read the same (not in the paper): the second reading of R-Drop on an edited copy.

R-Drop (``StageIConfig.rdrop``) reads each Stage I batch twice under two dropout masks and holds the two readings'
level distributions together. With ``StageIConfig.rdrop_views`` the second reading reads, for each training answer, a
copy of it with an edit a teacher would not mark, so the divergence term asks the reader to read the answer and its
copy alike — consistency training on label-preserving copies (Xie et al. 2020's UDA on labelled answers), at R-Drop's
cost. The edits, one per answer, drawn among those that apply to it:

* ``typo``: two neighbouring letters swapped in one word of five or more letters that is not a word of the question or
  the reference (the first letter kept, as most slips keep it);
* ``order``: the sentences of an answer of two or more sentences in another order;
* ``name``: the student's name written into the answer with no label or id ("Ana Silva" on a line below it, "Ana
  Silva:" or "A. Silva -" before it, "(Ana)" after it): the forms :func:`reccbm.normalise.without_signature` leaves
  alone, since the normaliser already reads a labelled name or id as no part of the answer.

An answer no chosen edit applies to is read again as it is (plain R-Drop for that answer). The copies are made once,
from the run's seed, before training; each is read as the answer itself is read (the same question, reference and
normalisation, :func:`reccbm.data.encode_inputs`). None of the edits changes what the answer says, so the levels of
the copy are the answer's: the copies carry no labels of their own and only the divergence term reads them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reccbm.data import encode_inputs, table_texts

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["EDITS", "VIEW", "answer_views", "encode_views", "name_view", "order_view", "typo_view", "view_inputs"]

EDITS = ("typo", "order", "name")
VIEW = "view_"  # a training batch's keys for its answers' copies: view_input_ids, view_attention_mask, …

_WORD = re.compile(r"[A-Za-z]{5,}")
_WORDS = re.compile(r"[A-Za-z]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_FIRST = ("Ana", "Tomasz", "Priya", "Diego", "Yuki", "Femi", "Lena", "Omar", "Ines", "Ravi")
_LAST = ("Silva", "Kowalski", "Sharma", "Castro", "Tanaka", "Adeyemi", "Berg", "Haddad", "Duarte", "Iyer")


def typo_view(text: str, keep: set[str], rng: random.Random) -> str | None:
    """``text`` with two neighbouring letters of one word of 5+ letters not in ``keep`` (lower case) swapped; None when
    it has no such word."""
    spots = [m for m in _WORD.finditer(text) if m.group(0).lower() not in keep]
    if not spots:
        return None
    m = rng.choice(spots)
    w = m.group(0)
    i = rng.randrange(1, len(w) - 2)
    return text[: m.start()] + w[:i] + w[i + 1] + w[i] + w[i + 2:] + text[m.end():]


def order_view(text: str, rng: random.Random) -> str | None:
    """The sentences of ``text`` in another order; None when it has fewer than two."""
    parts = [p for p in _SENTENCE_END.split(text.strip()) if p]
    if len(parts) < 2:
        return None
    order = list(range(len(parts)))
    while order == sorted(order):
        rng.shuffle(order)
    return " ".join(parts[i] for i in order)


def name_view(text: str, rng: random.Random) -> str:
    """``text`` with a student's name written into it with no label, in one of four forms (none of them one the
    normaliser's signature rule takes out)."""
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    forms = (f"{text}\n{first} {last}", f"{first} {last}: {text}", f"{first[0]}. {last} - {text}",
             f"{text} ({first})")
    return forms[rng.randrange(len(forms))]


def answer_views(questions: Sequence[str], contexts: Sequence[str], responses: Sequence[str],
                 edits: Sequence[str], seed: int) -> list[str]:
    """One copy of each response with one of ``edits`` (names in :data:`EDITS`) applied, drawn among those that apply
    to it (the response itself when none does); the same copies for the same ``seed``."""
    unknown = [e for e in edits if e not in EDITS]
    if unknown:
        raise ValueError(f"unknown answer edit {unknown[0]!r}; the edits are {', '.join(EDITS)}")
    rng = random.Random(seed)
    out = []
    for q, c, r in zip(questions, contexts, responses):
        keep = {w.lower() for w in _WORDS.findall(f"{q} {c}")}
        made: list[str] = []
        for e in edits:
            v = (typo_view(r, keep, rng) if e == "typo" else order_view(r, rng) if e == "order"
                 else name_view(r, rng) if r.strip() else None)
            if v is not None and v != r:
                made.append(v)
        out.append(rng.choice(made) if made else r)
    return out


def encode_views(tokenizer: Any, table: Any, max_len: int, edits: Sequence[str], seed: int, *,
                 question: bool = True, normalise: bool = False,
                 lexicon: tuple[str, ...] = ()) -> list[dict[str, list[int]]]:
    """The token features of one edited copy of each row of a table of answers (:func:`answer_views`), encoded as the
    rows themselves are (:func:`reccbm.encode_table`): ``EncodedItems.views`` for ``StageIConfig.rdrop_views``."""
    q, aux, r = table_texts(table)
    return encode_inputs(tokenizer, q, answer_views(q, aux, r, edits, seed), aux, max_len, question=question,
                         normalise=normalise, lexicon=lexicon)


def view_inputs(batch: dict[str, Any]) -> dict[str, Tensor] | None:
    """The inputs of a training batch's copies (the loader's ``view_*`` keys, without the prefix), with the batch's
    other per-answer entries (question offsets, labels) as they are; None when the batch carries no copies."""
    if VIEW + "input_ids" not in batch:
        return None
    inputs = {"input_ids", "attention_mask", "token_type_ids", "overlap", "states"}
    out = {k: v for k, v in batch.items() if k not in inputs and not k.startswith(VIEW)}
    out.update({k[len(VIEW):]: v for k, v in batch.items() if k.startswith(VIEW)})
    return out
