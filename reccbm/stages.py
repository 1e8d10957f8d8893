"""What REC-CBM's training stages share: progress events, the record of a stage, the seed, the warm-up schedule,
which parameters train, the weights' moving average, and model selection on dev metrics.

The encoder stages (Stage I, Eq. 27; the joint stage; the PLM baseline) are in :mod:`reccbm.train`, the
K-dimensional ones over cached outputs (Stage II, Eq. 28; the LCEC fit) in :mod:`reccbm.stage2`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from reccbm.model import Model

__all__ = [
    "Callback",
    "Event",
    "StageResult",
    "WeightAverage",
    "format_metrics",
    "selection_key",
    "set_seed",
    "train_only",
    "warmup_linear",
]


@dataclass
class Event:
    """A progress report: kind is 'start', 'step' or 'epoch' (dev metrics after each epoch)."""

    stage: str  # "stage1", "stage2" or "plm"
    kind: str
    epoch: int
    step: int = 0  # optimiser steps done in this epoch
    steps_per_epoch: int = 0
    epochs: int = 0
    loss: float = float("nan")
    metrics: dict[str, float] = field(default_factory=dict)
    part: str = ""  # which of several models of one run reports, e.g. "cross-fit 1/2"; "" = the run's model


Callback = Callable[[Event], None]


@dataclass
class StageResult:
    """What one training stage did: best dev metrics, history and timing."""

    best_epoch: int
    best: dict[str, float]  # dev metrics of the selected epoch
    history: list[dict[str, float]]  # per epoch: epoch, loss, dev metrics
    seconds: float  # wall time of the stage
    steps: int  # optimiser steps taken
    step_seconds: float  # mean wall time of one optimiser step

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def set_seed(seed: int) -> None:
    """Seed Python, numpy and torch (all devices)."""
    from accelerate.utils import set_seed as _set

    _set(seed)


def warmup_linear(opt: torch.optim.Optimizer, total: int, warmup_ratio: float) -> Any:
    """Linear warm-up over warmup_ratio × total steps, then linear decay to 0."""
    warm = max(1, round(warmup_ratio * total))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def train_only(model: Model, params: list[nn.Parameter]) -> None:
    """requires_grad on ``params`` and on nothing else of ``model``."""
    train = set(map(id, params))
    for p in model.parameters():
        p.requires_grad_(id(p) in train)


def selection_key(metrics: dict[str, float], f1: str, acc: str) -> tuple[float, float, float]:
    """Model selection: dev macro-F1, ties broken by accuracy, then by lower dev loss."""
    return (round(metrics[f1], 10), round(metrics[acc], 10), -metrics["loss"])


def format_metrics(m: dict[str, float]) -> str:
    """Metrics for the log: "name value" with four decimals, comma-separated."""
    return ", ".join(f"{k} {v:.4f}" for k, v in m.items())


class WeightAverage:
    """An exponential moving average θ̄ of trained parameters θ (``StageIConfig.ema``): after optimiser step t,
    θ̄ ← θ̄ + (1 − d_t)(θ − θ̄) with d_t = min(decay, (1 + t) / (10 + t)) (the early steps, when θ̄ still holds the
    starting weights, follow θ closely). :meth:`applied` puts θ̄ in the parameters' place for evaluation and selection
    and θ back afterwards, so training goes on from its own weights."""

    def __init__(self, params: list[nn.Parameter], decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the average's decay is in (0, 1), got {decay}")
        self.params, self.decay, self.t = params, decay, 0
        self.average = [p.detach().clone() for p in params]
        self.tensors: list[torch.Tensor] = list(params)

    @torch.no_grad()
    def update(self) -> None:
        """Fold the parameters' current values into the average (call after each optimiser step)."""
        d = min(self.decay, (1 + self.t) / (10 + self.t))
        self.t += 1
        torch._foreach_lerp_(self.average, self.tensors, 1.0 - d)  # (no_grad: the parameters as they are, no copies)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """θ̄ in the parameters for the block; θ restored after it, bit for bit."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            torch._foreach_copy_([p.data for p in self.params], self.average)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_([p.data for p in self.params], raw)
