"""An answer read over the orders of its sentences (``ModelConfig.sentence_orders``; not in the paper).

A teacher does not mark the order in which a short answer puts its sentences, but a reader of the whole text reads the
order, and a rotation of an answer's sentences can carry its mark across a boundary. With ``sentence_orders`` = n,
an answer of two or more sentences is read in several orders of its sentences and its grade and concept outputs are
the mean over those readings (test-time averaging):

* up to three sentences: every order (at most six);
* more: the sentences sorted (ignoring case), and n − 1 more distinct orders of them drawn from a generator seeded by
  their number alone, so that an edit inside a sentence (a typo, a synonym) changes what is read, not which orders.

Either way the orders read are a function of the answer's *set* of sentences, not of the order it was written in, so
two answers that differ only in the order of their sentences get the same reading. An answer of one sentence is read
once, as it is. The last sentence is read with a full stop when it has none (an answer's final punctuation is no
part of it, :mod:`reccbm.normalise`), so it reads alike wherever it stands. Sentences end at ``.``, ``!`` or ``?``
followed by a space, except after a common abbreviation ("e.g.", "i.e.", "etc.", "vs.").
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["average_readings", "expand_orders", "sentence_orders", "sentences"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ABBREVIATION = re.compile(r"(?:^|\s)(?:e\.g|i\.e|etc|vs|cf|approx|resp|fig|eq|dr|mr|mrs|ms|prof)\.$", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, in its order."""
    out: list[str] = []
    for p in _SENTENCE_END.split(str(text).strip()):
        if out and _ABBREVIATION.search(out[-1]):
            out[-1] = f"{out[-1]} {p}"
        elif p:
            out.append(p)
    return out


def sentence_orders(text: str, n: int) -> list[str]:
    """The texts an answer is read as (module docstring); ``[text]`` for an answer of one sentence or n < 2."""
    parts = sentences(text)
    if n < 2 or len(parts) < 2:
        return [text]
    if parts[-1][-1] not in ".!?":  # the last sentence ends as the others do, wherever it is read
        parts[-1] += "."
    canon = sorted(parts, key=lambda p: (p.lower(), p))
    if len(canon) <= 3:
        return [" ".join(p) for p in sorted(set(itertools.permutations(canon)))]
    rng = random.Random(len(canon))  # the same orders of positions for every answer of this many sentences
    orders = [tuple(range(len(canon)))]
    while len(orders) < min(n, math.factorial(len(canon))):  # distinct orders: 4 sentences have 24
        order = list(orders[0])
        rng.shuffle(order)
        if tuple(order) not in orders:
            orders.append(tuple(order))
    return [" ".join(canon[i] for i in order) for order in orders]


def expand_orders(responses: Sequence[str], n: int) -> tuple[list[str], np.ndarray[Any, Any]]:
    """Every text to read (each answer's :func:`sentence_orders`, one after another) and, per text, the position of its
    answer."""
    flat: list[str] = []
    owner: list[int] = []
    for i, r in enumerate(responses):
        texts = sentence_orders(r, n)
        flat.extend(texts)
        owner.extend([i] * len(texts))
    return flat, np.asarray(owner, dtype=np.int64)


def average_readings(values: np.ndarray[Any, Any], owner: np.ndarray[Any, Any], count: int) -> np.ndarray[Any, Any]:
    """The mean of ``values`` (one row per text read) over each answer's texts: ``count`` rows."""
    sums = np.zeros((count, *values.shape[1:]), dtype=np.float64)
    np.add.at(sums, owner, values)
    per = np.bincount(owner, minlength=count).reshape((count,) + (1,) * (values.ndim - 1))
    out: np.ndarray[Any, Any] = (sums / per).astype(values.dtype)
    return out
