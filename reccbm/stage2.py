"""REC-CBM's K-dimensional stages over cached concept outputs p̂ (N, K, M+1): Stage II and the LCEC fit.

* :func:`train_grader` — Stage II (Eq. 28): (L, η, W) on λ_t L_task + λ_d L_den + λ_s L_spa (Eq. 23-25) over
  the cached p̂ (Algorithm 1 recomputes frozen predictions per batch; they are identical, so we
  compute them once — Stage II then costs seconds); selection on dev task macro-F1 (T-F1).
* :func:`fit_lcec` — LCEC's (L, η) alone on L_den + λ_s L_spa (Eq. 24, 25), everything else frozen
  (``StageIIConfig.lcec_fit = "dev"``).

The cached outputs come from :func:`reccbm.cache_concepts`; both stages run on the device they are given
(:mod:`reccbm.device`; None: where the model is) and put the model back where it was afterwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reccbm.config import StageIIConfig
from reccbm.device import on_device
from reccbm.errors import ReccbmError
from reccbm.graphs import KDimSteps
from reccbm.metrics import task_metrics
from reccbm.model import RecCBM, expected_scores, random_conditioning
from reccbm.stages import (
    Callback,
    Event,
    StageResult,
    format_metrics,
    selection_key,
    train_only,
)

__all__ = ["fit_lcec", "train_grader"]

log = logging.getLogger("reccbm")


def _k_dim_steps(loss_of: Callable[[Tensor], Tensor], params: list[nn.Parameter], n_items: int, cfg: StageIIConfig,
                 device: torch.device) -> tuple[KDimSteps, torch.Generator]:
    """The optimiser steps of a K-dimensional stage over cached outputs (Stage II, the LCEC fit): AdamW with warm-up and
    linear decay, as CUDA graphs on a GPU with ``stage2.device`` "graph" (:class:`reccbm.graphs.KDimSteps`); and the
    seeded data-order generator."""
    graph = device.type == "cuda" and cfg.device == "graph"
    steps = KDimSteps(loss_of, params, cfg.lr, cfg.batch_size, n_items, cfg.epochs, cfg.warmup_ratio, device, graph)
    return steps, torch.Generator().manual_seed(cfg.seed)


def _stage2_loss(model: RecCBM, p_hat: Tensor, c: Tensor | None, y: Tensor, cfg: StageIIConfig) -> Tensor:
    observed = None
    if c is not None:
        p_hat, observed = random_conditioning(p_hat, c, cfg.intervention_p)
    out = model.grade_from_concepts(p_hat, observed)
    total = cfg.lambda_t * F.cross_entropy(out.grade_logits, y)  # Eq. 23
    if model.lcec is not None and c is not None:
        den, spa = model.lcec_losses(out, c)  # Eq. 24, 25
        total = total + cfg.lambda_d * den + cfg.lambda_s * spa
    return total  # Eq. 28


def train_grader(
    model: RecCBM,
    train_p_hat: Tensor,
    train_concepts_: Tensor | None,
    train_grades: Tensor,
    dev_p_hat: Tensor,
    dev_grades: Tensor,
    cfg: StageIIConfig,
    callback: Callback | None = None,
    head_only: bool = False,
    device: str | torch.device | None = None,
) -> StageResult:
    """Stage II: train (L, η, W) — only W without LCEC — over cached p̂; keep the best dev T-F1 epoch.

    train_concepts_ are the 0..M concept labels for L_den (Eq. 24); None skips L_den. head_only: train the grade
    head (W, U) alone, LCEC kept as it is (after :func:`fit_lcec`). ``device``: where it runs (None: where the model
    is); the model is put back where it was afterwards.
    """
    if model.config.plm:
        raise ReccbmError("the PLM baseline has no Stage II")
    if len(train_p_hat) == 0 or len(dev_p_hat) == 0:
        raise ReccbmError("Stage II needs non-empty train and dev splits")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # K-dimensional maths: one thread beats two (no sync overhead)
    try:
        with on_device(model, device) as dev:
            return _train_grader(model, train_p_hat.to(dev),
                                 None if train_concepts_ is None else train_concepts_.to(dev),
                                 train_grades.to(dev), dev_p_hat.to(dev), dev_grades.to(dev), cfg, callback, head_only)
    finally:
        torch.set_num_threads(threads)


def _train_grader(
    model: RecCBM,
    train_p_hat: Tensor,
    train_concepts_: Tensor | None,
    train_grades: Tensor,
    dev_p_hat: Tensor,
    dev_grades: Tensor,
    cfg: StageIIConfig,
    callback: Callback | None,
    head_only: bool = False,
) -> StageResult:
    torch.manual_seed(cfg.seed)
    if model.lcec is not None and model.config.center and not head_only:  # prior mean μ₀ (see LatentCorrection)
        with torch.no_grad():
            ref = train_concepts_.double() / model.config.M if train_concepts_ is not None else None
            model.lcec.mu0.copy_((ref if ref is not None else expected_scores(train_p_hat) / model.config.M).mean(0))
    params = model.stage2_parameters()
    if head_only:
        lcec = set(map(id, model.lcec.parameters())) if model.lcec is not None else set()
        params = [p for p in params if id(p) not in lcec]
    train_only(model, params)
    def loss_of(idx: Tensor) -> Tensor:
        c = None if train_concepts_ is None else train_concepts_[idx]
        return _stage2_loss(model, train_p_hat[idx], c, train_grades[idx], cfg)

    steps, gen = _k_dim_steps(loss_of, params, len(train_p_hat), cfg, train_p_hat.device)
    steps_per_epoch = steps.steps_per_epoch
    best_key: tuple[float, ...] | None = None
    best_state: list[Tensor] = []
    best, best_epoch, history, bad = {}, 0, [], 0
    t0 = time.perf_counter()
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        total = steps.epoch(torch.randperm(len(train_p_hat), generator=gen))
        with torch.no_grad():
            model.eval()
            logits = model.grade_from_concepts(dev_p_hat).grade_logits
            metrics = task_metrics(dev_grades.cpu().numpy(), logits.argmax(1).cpu().numpy())
            metrics["loss"] = float(F.cross_entropy(logits, dev_grades))
        history.append({"epoch": epoch, "train_loss": total / steps_per_epoch} | metrics)
        key = (-metrics["loss"],) if cfg.select == "nll" else selection_key(metrics, "t_f1", "t_acc")
        if best_key is None or key > best_key:
            best_key, best, best_epoch, bad = key, metrics, epoch, 0
            best_state = [p.detach().clone() for p in params]
        else:
            bad += 1
        if callback:
            callback(Event("stage2", "epoch", epoch, steps_per_epoch, steps_per_epoch, cfg.epochs, metrics=metrics))
        if bad >= cfg.patience:
            break
    with torch.no_grad():
        for p, best_p in zip(params, best_state):
            p.copy_(best_p)
    seconds = time.perf_counter() - t0
    log.info("stage2: best epoch %d of %d, dev %s (%.2f s)", best_epoch, len(history), format_metrics(best), seconds)
    return StageResult(best_epoch, best, history, seconds, steps.step, seconds / max(1, steps.step))



def fit_lcec(model: RecCBM, p_hat: Tensor, concepts: Tensor, cfg: StageIIConfig, callback: Callback | None = None,
             device: str | torch.device | None = None) -> StageResult:
    """LCEC's (L, η) alone on L_den + λ_s L_spa (Eq. 24, 25; λ_s = cfg.lcec_lambda_s) over cached outputs p̂ (N, K, M+1)
    and their 0..M labels, everything else frozen; the final state is kept. Given outputs for answers the encoder never
    trained on (the dev split's), σ² and Ω describe the errors it makes on new answers (StageIIConfig.lcec_fit = "dev").
    ``device`` as in :func:`train_grader`."""
    if model.lcec is None:
        raise ReccbmError("this model has no LCEC layer to fit")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with on_device(model, device) as dev:
            return _fit_lcec(model, p_hat.to(dev), concepts.to(dev), cfg, callback)
    finally:
        torch.set_num_threads(threads)


def _fit_lcec(model: RecCBM, p_hat: Tensor, concepts: Tensor, cfg: StageIIConfig,
              callback: Callback | None) -> StageResult:
    assert model.lcec is not None
    torch.manual_seed(cfg.seed)
    params = list(model.lcec.parameters())
    train_only(model, params)
    def loss_of(idx: Tensor) -> Tensor:
        den, spa = model.lcec_losses(model.grade_from_concepts(p_hat[idx]), concepts[idx])  # Eq. 24, 25
        return den + cfg.lcec_lambda_s * spa  # λ_d weighs L_den against the grade loss; alone it has weight 1

    steps, gen = _k_dim_steps(loss_of, params, len(p_hat), cfg, p_hat.device)
    steps_per_epoch = steps.steps_per_epoch
    history, t0 = [], time.perf_counter()
    model.train()
    for epoch in range(1, cfg.epochs + 1):
        total = steps.epoch(torch.randperm(len(p_hat), generator=gen))
        history.append({"epoch": epoch, "train_loss": total / steps_per_epoch})
        if callback:
            callback(Event("lcec", "epoch", epoch, steps_per_epoch, steps_per_epoch, cfg.epochs,
                           metrics={"loss": history[-1]["train_loss"]}))
    model.eval()
    seconds = time.perf_counter() - t0
    return StageResult(cfg.epochs, {"loss": history[-1]["train_loss"]}, history, seconds, steps.step,
                       seconds / max(1, steps.step))
