"""Training steps replayed as CUDA graphs: on a GPU, a step of MiniLM-sized work is the host's time to launch its
hundreds of small kernels, not the GPU's time to run them (docs/results.md, "On a GPU"). A CUDA graph records a
step's kernels once and launches them all in one call afterwards.

* :class:`KDimSteps` — the optimiser steps of a K-dimensional stage over cached outputs (Stage II, the LCEC fit):
  step by step (any device, the CPU's way), or on a CUDA device each full batch's whole step (loss, backward, AdamW)
  captured once and replayed, the batch's indices and the learning rate read from device buffers.
* :class:`EncoderGraphs` — a training encoder's forward and backward (``torch.cuda.make_graphed_callables``), one
  pair per input shape, the length padded up to a multiple of ``pad_to`` so that few shapes occur; the rest of the
  step (the heads, the losses, the optimiser) runs as before.

Both are used only on a CUDA device (``stage2.device`` "graph", ``stage1.cuda_graphs``), where asked. Where a capture
fails (an operation a graph cannot hold), the run says so in its log and goes on step by step: same numbers up to float
rounding, only slower. A graph computes what the steps compute, in another order of floating-point sums (a padded
length, a tensor learning rate), so a GPU run with graphs matches one without to float rounding, not bit for bit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

__all__ = ["EncoderGraphs", "KDimSteps", "padded_length"]

log = logging.getLogger("reccbm")

WARMUP = 3  # eager steps before a capture (the CUDA docs' side-stream warm-up: lazy initialisation, workspaces)


def capture(fn: Callable[[], Any], pool: Any = None) -> Callable[[], None]:
    """``fn``'s kernels recorded as a CUDA graph (nothing runs); returns the graph's replay. Tests on the CPU replace
    this function by one that returns ``fn`` itself (the bookkeeping around a graph, without CUDA)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        fn()
    return graph.replay


class KDimSteps:
    """The optimiser steps of one K-dimensional stage: ``loss_of(idx)`` is the loss of the items ``idx`` (a 1-D
    index tensor on ``device``), AdamW on ``params`` at ``lr`` with a linear warm-up over ``warmup_ratio`` of
    ``steps_per_epoch × epochs`` steps, then linear decay to 0 (:func:`reccbm.stages.warmup_linear`).

    ``graph`` False: each step as the CPU runs it (a Python-float learning rate from the schedule, the loss read each
    step). ``graph`` True (a CUDA device): the first :data:`WARMUP` full batches run step by step, then one full
    batch's step is captured and replayed for every other full batch; a shorter last batch runs step by step."""

    def __init__(self, loss_of: Callable[[Tensor], Tensor], params: list[nn.Parameter], lr: float, batch_size: int,
                 n_items: int, epochs: int, warmup_ratio: float, device: torch.device, graph: bool) -> None:
        from reccbm.stages import warmup_linear

        self.loss_of, self.bs, self.device = loss_of, batch_size, device
        self.steps_per_epoch = math.ceil(n_items / batch_size)
        total = self.steps_per_epoch * epochs
        self.graph = graph
        self.step = 0
        if not graph:
            self.opt: Any = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
            self.sched: Any = warmup_linear(self.opt, total, warmup_ratio)
            return
        # the schedule's rates, all of them on the device: a step copies its own into the optimiser's rate
        probe = torch.optim.SGD([torch.zeros(1)], lr=lr)
        sched = warmup_linear(probe, total, warmup_ratio)
        rates = []
        for _ in range(total):
            rates.append(probe.param_groups[0]["lr"])
            probe.step()
            sched.step()
        self.rates = torch.tensor(rates, dtype=torch.float32, device=device)  # (total,)
        self.lr = self.rates[:1].clone()  # (1,) the current step's rate
        self.opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=0.0, capturable=device.type == "cuda",
                                     foreach=device.type == "cuda")
        self.sched = None
        self.idx = torch.zeros(batch_size, dtype=torch.long, device=device)  # the batch a replay reads
        self.total = torch.zeros((), dtype=torch.float64, device=device)  # the epoch's summed loss
        self.replay: Callable[[], None] | None = None
        self.warm = 0
        self.failed: str | None = None  # why the capture failed (the run goes on step by step)

    def epoch(self, perm: Tensor) -> float:
        """One pass over the items in the order ``perm`` (a CPU permutation); returns the summed training loss."""
        if not self.graph:
            total = 0.0
            for start in range(0, len(perm), self.bs):
                loss = self.loss_of(perm[start : start + self.bs])
                self.opt.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                self.opt.step()
                self.sched.step()
                total += float(loss.detach())
                self.step += 1
            return total
        order = perm.to(self.device)
        self.total.zero_()
        for start in range(0, len(perm), self.bs):
            idx = order[start : start + self.bs]
            self.lr.copy_(self.rates[self.step : self.step + 1])
            if len(idx) == self.bs and self.failed is None:
                self.idx.copy_(idx)
                self._full_batch()
            else:
                self._eager(idx)
            self.step += 1
        return float(self.total)

    def _eager(self, idx: Tensor) -> None:
        loss = self.loss_of(idx)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self.opt.step()
        self.total.add_(loss.detach())

    def _full_batch(self) -> None:
        if self.replay is not None:
            self.replay()
            return
        if self.warm < WARMUP:  # on a side stream, as the CUDA docs ask before a capture
            side = torch.cuda.Stream() if self.device.type == "cuda" else None  # type: ignore[no-untyped-call]
            if side is not None:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._eager(self.idx)
                torch.cuda.current_stream().wait_stream(side)
            else:
                self._eager(self.idx)
            self.warm += 1
            return
        self.opt.zero_grad(set_to_none=True)  # the captured backward allocates the grads it writes each replay
        try:
            self.replay = capture(lambda: self._eager(self.idx))
        except (RuntimeError, AssertionError, TypeError, ValueError) as exc:  # an operation a graph cannot hold
            self.failed = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.warning("K-dimensional steps: the CUDA graph capture failed (%s); going on step by step", self.failed)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._eager(self.idx)
            return
        self.replay()


def padded_length(T: int, pad_to: int, limit: int | None) -> int:
    """The length a batch of length T is padded to: the next multiple of ``pad_to`` (T itself past ``limit``)."""
    padded = -(-T // pad_to) * pad_to
    return T if limit is not None and padded > limit else padded


class _Forward(nn.Module):
    """The backbone's last hidden states as a module of its own (what ``make_graphed_callables`` graphs)."""

    def __init__(self, backbone: nn.Module, types: bool) -> None:
        super().__init__()
        self.backbone, self.types = backbone, types

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.types:
            kwargs["token_type_ids"] = token_type_ids  # type: ignore[assignment]
        H: Tensor = self.backbone(**kwargs).last_hidden_state
        return H


class EncoderGraphs:
    """A training encoder's forward and backward as CUDA graphs, one pair per (batch size, padded length, token types)
    (``torch.cuda.make_graphed_callables``: autograd runs the recorded backward and accumulates the parameters'
    gradients as usual). The length is padded with masked positions up to a multiple of ``pad_to`` (at most the
    backbone's positions); the states come back at the input's own length. A shape whose capture fails runs
    eagerly from then on (the log says why)."""

    def __init__(self, backbone: nn.Module, pad_to: int = 32, max_positions: int | None = None) -> None:
        self.backbone, self.pad_to, self.limit = backbone, pad_to, max_positions
        self.graphed: dict[tuple[int, int, bool], Callable[..., Tensor]] = {}
        self.failed: dict[tuple[int, int, bool], str] = {}
        self.captures = 0

    def __call__(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None) -> Tensor:
        B, T = input_ids.shape
        Tp = padded_length(T, self.pad_to, self.limit)
        key = (B, Tp, token_type_ids is not None)
        if Tp > T:
            input_ids, attention_mask = _pad(input_ids, Tp), _pad(attention_mask, Tp)
            token_type_ids = _pad(token_type_ids, Tp) if token_type_ids is not None else None
        args = (input_ids, attention_mask) + ((token_type_ids,) if token_type_ids is not None else ())
        fn = self.graphed.get(key)
        if fn is None and key not in self.failed:
            fn = self._capture(key, args)
        H = fn(*args) if fn is not None else _Forward(self.backbone, key[2])(*args)
        return H[:, :T]

    def _capture(self, key: tuple[int, int, bool], args: tuple[Tensor, ...]) -> Callable[..., Tensor] | None:
        module = _Forward(self.backbone, key[2]).train()
        try:
            fn = cast(Callable[..., Tensor], torch.cuda.make_graphed_callables(module, args, num_warmup_iters=WARMUP,
                                                                               allow_unused_input=True))
        except (RuntimeError, AssertionError, TypeError, ValueError) as exc:
            self.failed[key] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.warning("encoder: the CUDA graph capture of batches %s failed (%s); those run step by step", key[:2],
                        self.failed[key])
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return None
        self.graphed[key] = fn
        self.captures += 1
        return fn


def _pad(x: Tensor, T: int) -> Tensor:
    """(B, t) -> (B, T): zeros after position t (masked positions; their ids do not matter)."""
    return torch.cat([x, x.new_zeros(x.shape[0], T - x.shape[1])], dim=1)
