"""Other references in training (not in the paper): a training answer's reference replaced, now and then, by another
answer to the same question that got the top grade.

A question-grouped split trains on some sixty references and tests on others. Every answer to a training question is
read beside the same reference words, so the encoder can tie a level to those words as well as to the comparison of
the answer with them. With ``StageIConfig.reference_swap`` = p, each training input of an encoder stage's batch,
with probability p, has its reference r replaced by the answer a* of another training answer to the same question
with the top grade — ``[CLS] q [SEP] a* [SEP] a [SEP]`` with a's own levels and grade — so that one question is read
beside many wordings of a right answer. Dev answers, prediction and grading read the reference as given.

Built from token ids (reccbm/data.py's layout, split by :func:`reccbm.align.segment_masks`), without the tokenizer; an
input longer than ``max_len`` after the swap gets a* cut from its end; an input without a reference, or whose
question has no other top-graded answer, keeps its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from reccbm.align import segment_masks
from reccbm.contrast import infer_sep_id
from reccbm.data import EncodedItems, collate

__all__ = ["ReferenceSwap"]


@dataclass
class ReferenceSwap:
    """Where each training input's reference and answer lie, which answers may stand in for a reference, and the
    random draws (seeded: the same batches give the same swaps)."""

    p: float  # the chance that an input's reference is replaced
    max_len: int  # the longest input the model reads
    ref_span: NDArray[Any]  # (N, 2) the reference's first token and the end of its span; (0, 0): no reference
    ans_span: NDArray[Any]  # (N, 2) the answer's first token and the end of its span
    donors: list[NDArray[Any]]  # per input, the other inputs of its question with the top grade
    rng: np.random.Generator

    @classmethod
    def build(cls, items: EncodedItems, questions: NDArray[Any], p: float, max_len: int, seed: int) -> ReferenceSwap:
        """From the training items (their grades: ``items.grades``) and each one's question
        (:func:`question_groups`)."""
        n = len(items)
        batch = collate(items, list(range(n)), 0)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        ref, ans = segment_masks(ids, mask, infer_sep_id(ids, mask))  # (N, T) each
        pos = torch.arange(ids.shape[1])

        def spans(m: torch.Tensor) -> NDArray[Any]:
            first = torch.where(m.any(1), torch.where(m, pos, ids.shape[1]).min(1).values, 0)
            end = torch.where(m.any(1), torch.where(m, pos, -1).max(1).values + 1, 0)
            return torch.stack([first, end], 1).numpy()

        grades = np.asarray(items.grades) if items.grades is not None else np.zeros(n, dtype=np.int64)
        top = grades == grades.max() if n else np.zeros(0, dtype=bool)
        by_question: dict[int, NDArray[Any]] = {
            int(q): np.flatnonzero((questions == q) & top) for q in np.unique(questions)}
        donors = [by_question[int(questions[i])][by_question[int(questions[i])] != i] for i in range(n)]
        return cls(p, max_len, spans(ref), spans(ans), donors, np.random.default_rng(seed))

    def features(self, items: EncodedItems, idx: list[int]) -> list[dict[str, list[int]]]:
        """The features of inputs ``idx``, each reference replaced with probability p (a new dict where it is)."""
        out = []
        for i in idx:
            f = items.features[i]
            r0, r1 = (int(x) for x in self.ref_span[i])
            pool = self.donors[i]
            if r1 <= r0 or not len(pool) or self.rng.random() >= self.p:
                out.append(f)
                continue
            j = int(pool[self.rng.integers(len(pool))])
            a0, a1 = (int(x) for x in self.ans_span[j])
            star = items.features[j]["input_ids"][a0:a1]
            room = self.max_len - (len(f["input_ids"]) - (r1 - r0))
            star = star[: max(room, 0)]
            if not star:
                out.append(f)
                continue
            new = {"input_ids": f["input_ids"][:r0] + star + f["input_ids"][r1:]}
            if "token_type_ids" in f:
                t = f["token_type_ids"]
                new["token_type_ids"] = t[:r0] + [t[r0]] * len(star) + t[r1:]
            out.append(new)
        return out
