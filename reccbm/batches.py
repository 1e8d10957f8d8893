"""Training batches for the encoder stages (Stage I, the joint stage, the PLM): which answers go together in a batch,
and the loader that collates them.

* :class:`LengthGroupedBatches` — shuffled batches of similar length (less padding, the same data);
* :class:`QuestionBatches` — batches of runs of answers to one question (``stage1.answers_per_question``);
* :func:`question_groups` — each input's question, from its tokens;
* :func:`training_loader` — the DataLoader a stage draws its steps from (:class:`HostCopy`: a batch's CPU inputs);
* :func:`epoch_steps` / :func:`take_batches` — how many steps an epoch takes, and drawing them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from reccbm.align import segment_masks
from reccbm.contrast import infer_sep_id
from reccbm.data import EncodedItems, collate
from reccbm.inference import States, collate_states
from reccbm.model import Model, RecCBM
from reccbm.references import ReferenceSwap
from reccbm.views import VIEW

__all__ = ["HostCopy", "LengthGroupedBatches", "QuestionBatches", "epoch_steps", "question_groups", "take_batches",
           "training_loader"]


class LengthGroupedBatches:
    """Shuffled batches of similar length (less padding, same data): each epoch permutes the items,
    sorts them by length within mega-batches of 32 batches, and shuffles the batch order."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int, group: bool = True) -> None:
        self.lengths, self.batch_size, self.seed, self.epoch = np.asarray(lengths), batch_size, seed, 0
        self.group = group

    def __iter__(self) -> Any:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        perm, mega = rng.permutation(len(self.lengths)), 32 * self.batch_size
        if not self.group:
            return iter([perm[i : i + self.batch_size].tolist() for i in range(0, len(perm), self.batch_size)])
        batches = []
        for s in range(0, len(perm), mega):
            chunk = perm[s : s + mega]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[i : i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        return iter([batches[i] for i in rng.permutation(len(batches))])

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.batch_size)


class QuestionBatches:
    """Batches made of runs of ``per`` answers to one question (StageIConfig.answers_per_question): each epoch shuffles
    each question's answers, cuts them into runs of ``per``, shuffles the runs and cuts their sequence into batches of
    ``batch_size`` (a question's last, shorter run can let a batch hold one question more)."""

    def __init__(self, questions: NDArray[Any], batch_size: int, per: int, seed: int) -> None:
        self.questions, self.batch_size, self.per = np.asarray(questions), batch_size, per
        self.seed, self.epoch = seed, 0

    def __iter__(self) -> Any:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        runs: list[NDArray[Any]] = []
        for q in np.unique(self.questions):
            own = rng.permutation(np.flatnonzero(self.questions == q))
            runs += [own[i : i + self.per] for i in range(0, len(own), self.per)]
        order = np.concatenate([runs[i] for i in rng.permutation(len(runs))]) if runs else np.zeros(0, dtype=np.int64)
        return iter([order[i : i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)])

    def __len__(self) -> int:
        return math.ceil(len(self.questions) / self.batch_size)


def question_groups(items: EncodedItems) -> tuple[NDArray[Any], int]:
    """Each input's question as an index 0..Q-1, and Q: inputs whose tokens before the answer (``[CLS] q [SEP] r
    [SEP]``, question and reference, as :func:`reccbm.align.segment_masks` splits them) are the same answer the same
    question. The separator is the token every input ends with (:func:`reccbm.contrast.infer_sep_id`)."""
    if not len(items):
        return np.zeros(0, dtype=np.int64), 0
    batch = collate_states(items, list(range(len(items))), 0, None)  # padding is masked: its id does not matter
    ids, mask = batch["input_ids"], batch["attention_mask"]
    _, ans = segment_masks(ids, mask, infer_sep_id(ids, mask))  # (N, T)
    starts = torch.where(ans.any(1), ans.long().argmax(1), mask.sum(1)).tolist()  # (N,) the answer's first token
    keys: dict[tuple[int, ...], int] = {}
    out = [keys.setdefault(tuple(f["input_ids"][:start]), len(keys)) for f, start in zip(items.features, starts)]
    return np.asarray(out, dtype=np.int64), len(keys)


class HostCopy:
    """A training batch's inputs on the CPU, as the loader made them: what a step reads on the host (the examples across
    questions, :func:`reccbm.contrast.contrast_batch`) without waiting for a GPU. Not a tensor: Accelerate, which moves
    the batch to the device, leaves it where it is."""

    def __init__(self, batch: dict[str, Tensor]) -> None:
        self.batch = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


def training_loader(items: EncodedItems, batch_size: int, pad_id: int, seed: int, group: bool = True,
            states: States | None = None, model: Model | None = None, questions: NDArray[Any] | None = None,
            swap: ReferenceSwap | None = None, per_question: int = 0) -> Any:
    """Length-grouped training batches; with ``model``'s alignment features (ModelConfig.align), each batch carries its
    token-id overlap features computed here on the CPU (:meth:`reccbm.align.AlignFeatures.overlap_features`), and its
    inputs' CPU copy (:class:`HostCopy`); with ``questions`` (N,), each answer's question (:func:`question_groups`);
    with ``swap``, some inputs read another top-graded answer as their reference (StageIConfig.reference_swap); with
    ``per_question`` > 0, batches of runs of that many answers to one question (StageIConfig.answers_per_question)."""
    from torch.utils.data import DataLoader

    align = model.align if isinstance(model, RecCBM) else None

    def collate_fn(idx: list[int]) -> dict[str, Any]:
        if swap is not None:  # the batch's own copy of its items, some references replaced
            sub = items.subset(idx)
            sub.features = swap.features(items, idx)
            batch: dict[str, Any] = collate_states(sub, list(range(len(idx))), pad_id, None)
        else:
            batch = collate_states(items, idx, pad_id, states)
        if align is not None:
            batch["overlap"] = align.overlap_features(batch["input_ids"], batch["attention_mask"])
        if items.views is not None:  # each answer's edited copy (StageIConfig.rdrop_views), batched as the answers
            view = collate(EncodedItems(items.views), idx, pad_id)
            if align is not None:
                view["overlap"] = align.overlap_features(view["input_ids"], view["attention_mask"])
            batch.update({VIEW + k: v for k, v in view.items()})
        batch["host"] = HostCopy(batch)
        if questions is not None:
            batch["question"] = torch.as_tensor(questions[np.asarray(idx)])  # (B,)
        return batch

    sampler: LengthGroupedBatches | QuestionBatches
    if per_question > 0:
        groups = questions if questions is not None else question_groups(items)[0]
        sampler = QuestionBatches(groups, batch_size, per_question, seed)
    else:
        sampler = LengthGroupedBatches([len(f["input_ids"]) for f in items.features], batch_size, seed, group)
    return DataLoader(
        range(len(items)),  # type: ignore[arg-type]
        batch_sampler=sampler,
        collate_fn=collate_fn,
    )


def epoch_steps(n_items: int, batch: int, cap: int, epochs: int = 1, min_steps: int = 0) -> int:
    """Optimiser steps per epoch: one pass over ``n_items`` in batches of ``batch``, capped at ``cap`` (> 0, smoke
    runs), or ceil(min_steps / epochs) when a pass is shorter (a small table, StageIConfig.min_steps)."""
    n = math.ceil(n_items / batch)
    if cap > 0:
        return min(n, cap)
    if min_steps > 0 and epochs > 0:
        return max(n, math.ceil(min_steps / epochs))
    return n


def take_batches(loader: Any, steps: int) -> Iterator[Any]:
    """``steps`` batches from ``loader``, starting another (reshuffled) pass when one is used up."""
    done = 0
    while done < steps:
        got = False
        for batch in loader:
            got = True
            yield batch
            done += 1
            if done >= steps:
                return
        if not got:
            return
