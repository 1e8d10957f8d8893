"""Text beside the point (not in the paper): an answer with words appended that say nothing more reads no higher than
the answer itself.

A reader trained on answers alone learns that a longer answer is a more elaborate, deeper one: appending two sentences
from answers to other questions, or repeating the answer's first words, raises the levels it reads (docs/results.md,
the grader under gaming). From each Stage I batch of x = (q, r, a) (reccbm/data.py: ``[CLS] q [SEP] r [SEP] a [SEP]``)
two kinds of padded input are built from the token ids, without the tokenizer (split as reccbm/contrast.py splits them):

* filler, ``[CLS] q [SEP] r [SEP] a a'[:L] [SEP]``: the first L tokens of an answer to another question of the batch
  after the answer (they say nothing about this question);
* repetition, ``[CLS] q [SEP] r [SEP] a a[:L/2] a[:L/2] [SEP]``: the answer's first L/2 tokens twice more (nothing new).

L is ``StageIConfig.padding_tokens``, cut to what ``max_len`` leaves; an input with fewer than four tokens of room is
not padded. The loss is a hinge on each concept's expected level ĉ_k = Σ_m m · p̂_{k,m} (Eq. 13, what OPCC ranks):

    L_pad = mean over (padded input x̃ of x, concept k) of max(0, ĉ_k(x̃) − ĉ_k(x)),

with ĉ_k(x), the answer's own reading in the same step, held fixed (no gradient): a padded answer is pushed down only
where it reads above the answer, never up toward it, and the answer's reading is left to L_con. Weighted by
``StageIConfig.padding``, it is added to Stage I's loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reccbm.contrast import pack_inputs, split_inputs

__all__ = ["MIN_ROOM", "padding_batch", "padding_loss"]

MIN_ROOM = 4  # tokens an input must have left below max_len to be padded


def padding_batch(batch: dict[str, Tensor], n_each: int, tokens: int, max_len: int,
                  pad_id: int) -> tuple[dict[str, Tensor], Tensor] | None:
    """Up to ``n_each`` filler and ``n_each`` repetition inputs built from ``batch`` (different answers for the two
    kinds where the batch has enough), and ``source`` (N,): the position in ``batch`` of the answer each pads; None
    when none can be built (every input too long, or no answer to another question for the filler)."""
    parts = split_inputs(batch)
    prefixes, answers, sep = parts.prefixes, parts.answers, parts.sep
    B = len(prefixes)
    room = [max_len - (len(prefixes[b]) + len(answers[b]) + 1) for b in range(B)]  # + the closing separator
    fits = [b for b in range(B) if answers[b] and room[b] >= MIN_ROOM]
    rows: list[list[int]] = []
    source: list[int] = []
    done = 0
    for b in fits:  # filler: another question's answer, its first tokens
        if done >= n_each:
            break
        other = next((j for j in range(B) if prefixes[j] != prefixes[b] and answers[j]), None)
        if other is None:
            continue
        rows.append(prefixes[b] + answers[b] + answers[other][: min(tokens, room[b])] + [sep])
        source.append(b)
        done += 1
    rest = [b for b in fits if b not in source] or fits  # repetition: other answers than the filler's where possible
    for b in rest[:n_each]:
        head = answers[b][: max(1, min(tokens, room[b]) // 2)]
        rows.append(prefixes[b] + answers[b] + head + head + [sep])
        source.append(b)
    if not rows:
        return None
    return pack_inputs(rows, parts, pad_id), torch.tensor(source, dtype=torch.long)


def padding_loss(c_padded: Tensor, c_own: Tensor) -> Tensor:
    """L_pad: the mean of max(0, ĉ(x̃) − ĉ(x)) over (padded input, concept); ``c_padded`` (N, K) the padded inputs'
    expected levels, ``c_own`` (N, K) their answers' own (held fixed: detached here)."""
    return torch.relu(c_padded.float() - c_own.detach().float()).mean()
