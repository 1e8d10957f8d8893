"""Supervision across questions (not in the paper): examples whose concept levels hold on every question.

From each Stage I batch of x = (q, r, a) (reccbm/data.py: ``[CLS] q [SEP] r [SEP] a [SEP]``) two kinds of extra input
are built from the token ids, without the tokenizer:

* the reference answer given as the answer, ``[CLS] q [SEP] r [SEP] r [SEP]``: the top level M of the concepts in
  ``StageIConfig.contrast_top`` (what a reference answer has by definition: it covers the concepts, it is correct);
* an answer to another question of the batch given as the answer, ``[CLS] q [SEP] r [SEP] a' [SEP]``: the bottom
  level 0 of the concepts in ``StageIConfig.contrast_bottom`` (it does not answer this question);
* with ``StageIConfig.contrast_question``, the question given as the answer, ``[CLS] q [SEP] r [SEP] q [SEP]``: the
  bottom level of the same concepts (restating the question answers nothing, though it shares the question's words).

The other concepts of these inputs are unlabelled (ignored by the loss). The loss is the mean cross-entropy over the
labelled (input, concept) pairs, weighted by ``StageIConfig.contrast``, added to Stage I's λ_c L_con + λ_r L_rank.
A question's own answers teach what its words mean for the concepts; these teach the comparison with the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from reccbm.align import segment_masks
from reccbm.errors import ReccbmError

__all__ = ["IGNORE", "SplitInputs", "contrast_batch", "contrast_loss", "infer_sep_id", "pack_inputs", "split_inputs"]

IGNORE = -100  # an unlabelled (input, concept) pair


def infer_sep_id(input_ids: Tensor, attention_mask: Tensor) -> int:
    """The separator id of a pair backbone's inputs: every input ends with it (BERT [SEP], RoBERTa/BART </s>, T5
    </s>). Raises for inputs that do not all end with the same token (a decoder-only backbone: no closing separator)."""
    last = attention_mask.long().sum(1) - 1  # (B,) position of each input's last real token
    ends = input_ids.gather(1, last.unsqueeze(1)).squeeze(1)  # (B,)
    if not bool((ends == ends[0]).all()):
        raise ReccbmError("stage1.contrast needs a backbone whose inputs end with a separator (BERT, RoBERTa, T5)")
    return int(ends[0])


def contrast_batch(batch: dict[str, Tensor], M: int, K: int, top: tuple[int, ...], bottom: tuple[int, ...],
                   n_each: int, pad_id: int, n_question: int = 0) -> dict[str, Tensor] | None:
    """Up to ``n_each`` reference-as-answer and ``n_each`` other-question inputs from ``batch`` (and up to
    ``n_question`` question-as-answer ones) with their targets ``contrast`` (N, K): M for ``top`` / 0 for ``bottom``
    concepts, IGNORE elsewhere; None when none can be built (no input with a reference, or no concept asked)."""
    parts = split_inputs(batch)
    ids, ref, sep, prefixes, answers = parts.ids, parts.ref, parts.sep, parts.prefixes, parts.answers
    B = ids.shape[0]
    rows: list[tuple[list[int], int, tuple[int, ...]]] = []  # token ids, level, concepts
    with_ref = [b for b in range(B) if bool(ref[b].any())]
    if top:
        for b in with_ref[:n_each]:  # the reference as the answer
            r = ids[b][ref[b]].tolist()
            rows.append((prefixes[b] + r + [sep], M, top))
    if bottom:
        done = 0
        for b in with_ref:
            if done >= n_each:
                break
            other = next((j for j in range(B) if prefixes[j] != prefixes[b] and answers[j]), None)
            if other is None:
                continue
            rows.append((prefixes[b] + answers[other] + [sep], 0, bottom))
            done += 1
        for b in with_ref[:n_question]:  # the question as the answer: [CLS] q [SEP] → q
            first = prefixes[b].index(sep, 1) if sep in prefixes[b][1:] else 1
            question = prefixes[b][1:first]
            if question:
                rows.append((prefixes[b] + question + [sep], 0, bottom))
    if not rows:
        return None
    out = pack_inputs([r[0] for r in rows], parts, pad_id)
    target = torch.full((len(rows), K), IGNORE, dtype=torch.long)
    for i, (_, level, concepts) in enumerate(rows):
        target[i, list(concepts)] = level
    out["contrast"] = target
    return out


@dataclass
class SplitInputs:
    """A batch's inputs on the CPU split as reccbm/data.py builds them: per input the tokens up to its answer
    (``[CLS] q [SEP] r [SEP]``, ``prefixes``) and its answer's tokens (``answers``), the separator ``sep``, the
    reference mask ``ref`` (B, T), and the dtypes of the ids, mask and token types (None: the backbone has none)."""

    ids: Tensor
    ref: Tensor
    sep: int
    prefixes: list[list[int]]
    answers: list[list[int]]
    mask_dtype: torch.dtype
    types_dtype: torch.dtype | None


def split_inputs(batch: dict[str, Tensor]) -> SplitInputs:
    """:class:`SplitInputs` of ``batch``, built on the CPU from one copy of the ids (on a GPU, every item's .tolist()
    would wait for it)."""
    ids, mask = batch["input_ids"].cpu(), batch["attention_mask"].cpu()  # (B, T)
    types = batch.get("token_type_ids")
    sep = infer_sep_id(ids, mask)
    ref, ans = segment_masks(ids, mask, sep)  # (B, T) each
    prefixes, answers = [], []
    for b in range(ids.shape[0]):
        real = ids[b][mask[b].bool()].tolist()
        first_ans = int(ans[b].nonzero()[0]) if bool(ans[b].any()) else len(real)
        prefixes.append(real[:first_ans])  # [CLS] q [SEP] r [SEP] (RoBERTa: [SEP] [SEP])
        answers.append(ids[b][ans[b]].tolist())
    return SplitInputs(ids, ref, sep, prefixes, answers, mask.dtype, types.dtype if types is not None else None)


def pack_inputs(rows: list[list[int]], like: SplitInputs, pad_id: int) -> dict[str, Tensor]:
    """Inputs of token ids ``rows`` (each ``[CLS] q [SEP] r [SEP] … [SEP]``) as a padded batch shaped as ``like``'s:
    ``input_ids``, ``attention_mask`` and, where the backbone has them, ``token_type_ids`` (1 on the answer segment)."""
    T = max(len(r) for r in rows)
    out_ids = torch.full((len(rows), T), pad_id, dtype=like.ids.dtype)
    out_mask = torch.zeros((len(rows), T), dtype=like.mask_dtype)
    out_types = torch.zeros((len(rows), T), dtype=like.types_dtype) if like.types_dtype is not None else None
    for i, r_ids in enumerate(rows):
        out_ids[i, : len(r_ids)] = torch.tensor(r_ids, dtype=like.ids.dtype)
        out_mask[i, : len(r_ids)] = 1
        if out_types is not None:
            out_types[i, _first_segment_length(r_ids, like.sep) : len(r_ids)] = 1  # the answer segment
    out = {"input_ids": out_ids, "attention_mask": out_mask}
    if out_types is not None:
        out["token_type_ids"] = out_types
    return out


def _first_segment_length(r_ids: list[int], sep: int) -> int:
    """Tokens of ``[CLS] q [SEP] r [SEP]`` (the pair's first segment, token type 0): up to the second separator."""
    seen = 0
    for i, t in enumerate(r_ids):
        if t == sep:
            seen += 1
            if seen == 2:
                return i + 1
    return len(r_ids)


def contrast_loss(logits: Tensor, target: Tensor) -> Tensor:
    """Mean cross-entropy over the labelled (input, concept) pairs: logits (N, K, M+1), target (N, K) with IGNORE."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE)
