"""What REC-CBM's training stages share: progress events, the record of a stage, the seed, the warm-up schedule,
which parameters train, and model selection on dev metrics.

The encoder stages (Stage I, Eq. 27; the joint stage; the PLM baseline) are in :mod:`reccbm.train`, the
K-dimensional ones over cached outputs (Stage II, Eq. 28; the LCEC fit) in :mod:`reccbm.stage2`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from reccbm.model import Model

__all__ = [
    "Callback",
    "Event",
    "StageResult",
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
