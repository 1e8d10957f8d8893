"""REC-CBM's training stages as building blocks, the PLM baseline, and batched prediction.

The order in which they run is :func:`reccbm.fit` (reccbm/fit.py).

* :func:`train_concepts` — Stage I (Eq. 27): (E, Q, {V_k}) on λ_c L_con + λ_r L_rank; model
  selection on dev concept macro-F1 (C-F1), early stopping with patience.
* :func:`cache_concepts` — runs the frozen Stage I model once and keeps p̂ (N, K, M+1).
* :func:`train_grader` — Stage II (Eq. 28): (L, η, W) on λ_t L_task + λ_d L_den + λ_s L_spa over
  the cached p̂ (Algorithm 1 recomputes frozen predictions per batch; they are identical, so we
  compute them once — Stage II then costs seconds); selection on dev task macro-F1 (T-F1).
* :func:`train_joint` — the joint stage (not in the paper): every parameter on the joint loss.
* :func:`train_plm` — black-box fine-tuning of the same backbone on the grade (selection on T-F1).
* :func:`encoder_states` — a frozen encoder's token states, once per input (``StageIConfig.encoder = "frozen"``:
  the encoder is never updated, so Stage I, the joint stage and the PLM reuse them instead of running it each step).

Stage I, the joint stage and the PLM run through Hugging Face Accelerate: one process on the CPU or one GPU, the
same code under ``accelerate launch`` for multi-GPU / multi-node; the model is placed on the accelerator's device at
the start of every stage. Stage II, the LCEC fit, prediction and a frozen encoder's states run on the device they are
given (:mod:`reccbm.device`; None: where the model is). Between calls a model lives on the CPU. Progress goes to an
optional callback (``reccbm`` never prints).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import Tensor, nn

from reccbm.config import JointConfig, StageIConfig, StageIIConfig
from reccbm.contrast import contrast_batch, contrast_loss
from reccbm.data import EncodedItems, collate
from reccbm.device import autocast, on_device
from reccbm.errors import ReccbmError
from reccbm.metrics import concept_metrics, task_metrics
from reccbm.model import (
    PLM,
    Model,
    RecCBM,
    TextEncoder,
    concept_loss,
    expected_scores,
    masked_mean,
    opcc_loss,
    random_conditioning,
    rubric_queries,
    soft_concept_loss,
)

__all__ = [
    "Event",
    "Predictions",
    "StageResult",
    "cache_concepts",
    "encoder_states",
    "fit_lcec",
    "init_rubric_queries",
    "predict",
    "quantize_encoder",
    "set_seed",
    "train_concepts",
    "train_grader",
    "train_joint",
    "train_plm",
]

log = logging.getLogger("reccbm")


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
_M = TypeVar("_M", RecCBM, PLM)  # the network a training loop runs: REC-CBM or the PLM baseline


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


@dataclass
class Predictions:
    """Model outputs for N items (numpy); concept fields are None for the PLM baseline."""

    grade_probs: NDArray[Any]  # (N, S+1)
    p_hat: NDArray[Any] | None = None  # (N, K, M+1)
    c_hat: NDArray[Any] | None = None  # (N, K) expected levels ĉ ∈ [0, M]
    mu_post: NDArray[Any] | None = None  # (N, K) corrected concepts (s̃ without LCEC)
    grade_logits: NDArray[Any] | None = None  # (N, S+1) ŷ before the softmax

    @property
    def grades(self) -> NDArray[Any]:
        out: NDArray[Any] = self.grade_probs.argmax(1)
        return out

    @property
    def levels(self) -> NDArray[Any]:
        assert self.p_hat is not None
        out: NDArray[Any] = self.p_hat.argmax(2)
        return out


def set_seed(seed: int) -> None:
    """Seed Python, numpy and torch (all devices)."""
    from accelerate.utils import set_seed as _set

    _set(seed)


# ---------------------------------------------------------------------------- shared pieces
def _accelerator(cfg: StageIConfig) -> Any:
    from accelerate import Accelerator

    return Accelerator(mixed_precision=cfg.mixed_precision, cpu=cfg.device == "cpu")


class _LengthGroupedBatches:
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


States = Sequence[Tensor]  # one (T_i, d) tensor of token states per input: a frozen encoder's, see encoder_states


def _batch(items: EncodedItems, idx: Any, pad_id: int, states: States | None) -> dict[str, Tensor]:
    """collate(), plus the inputs' cached token states right-padded with zeros to the batch's T (``states``, (B, T, d))
    when given: the model then skips its encoder (RecCBM.token_states)."""
    batch = collate(items, idx, pad_id)
    if states is not None:
        B, T = batch["input_ids"].shape
        H = torch.zeros(B, T, states[0].shape[-1], dtype=states[0].dtype)  # (B, T, d)
        for j, i in enumerate(idx):
            H[j, : len(states[i])] = states[i]
        batch["states"] = H
    return batch


def _loader(items: EncodedItems, batch_size: int, pad_id: int, seed: int, group: bool = True,
            states: States | None = None) -> Any:
    from torch.utils.data import DataLoader

    sampler = _LengthGroupedBatches([len(f["input_ids"]) for f in items.features], batch_size, seed, group)
    return DataLoader(
        range(len(items)),  # type: ignore[arg-type]
        batch_sampler=sampler,
        collate_fn=lambda idx: _batch(items, idx, pad_id, states),
    )


@torch.inference_mode()
def encoder_states(encoder: nn.Module, items: EncodedItems, pad_id: int, batch_size: int = 64,
                   device: str | torch.device | None = None, precision: str = "no") -> list[Tensor]:
    """The token states H = E(x) of every input, computed once (no grad, eval mode: dropout off), float32 on the CPU:
    one (T_i, d) tensor per input, its own tokens only. A frozen encoder gives the same H every epoch, so training
    reuses these instead of running E each step (:func:`train_concepts`, :func:`train_joint`, :func:`train_plm`).
    ``device``: where E runs (None: where it is; it is put back afterwards); ``precision`` "bf16": autocast on a GPU."""
    was_training = encoder.training
    encoder.eval()
    out: list[Tensor] = [torch.empty(0)] * len(items)
    order = np.argsort([len(f["input_ids"]) for f in items.features], kind="stable")  # length-sorted: less padding
    with on_device(encoder, device) as dev, autocast(dev, precision):
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = {k: v.to(dev) for k, v in collate(items, idx, pad_id).items()}
            H = encoder(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))  # (B, T, d)
            for j, i in enumerate(idx):
                out[i] = H[j, : len(items.features[i]["input_ids"])].float().cpu().clone()  # (T_i, d)
    encoder.train(was_training)
    return out


def _optimizer(model: Model, cfg: StageIConfig, stage: str = "stage1", joint: JointConfig | None = None) -> torch.optim.Optimizer:
    """AdamW over (E, Q, {V_k}) — or (E, head) — with decay on matrices only, Q at lr × multiplier.

    stage="joint": the same groups at joint.lr, plus (L, η, W, U) at joint.head_lr without decay."""
    q = model.bottleneck.Q if isinstance(model, RecCBM) else None
    lr = joint.lr if (stage == "joint" and joint is not None) else cfg.lr
    if stage != "joint" and cfg.encoder == "frozen" and cfg.frozen_lr > 0:
        lr = cfg.frozen_lr  # only heads train
    align = set(map(id, model.align.parameters())) if isinstance(model, RecCBM) and model.align is not None else set()
    groups: dict[str, list[nn.Parameter]] = {"decay": [], "no_decay": [], "query": [], "align": []}
    for p in model.stage1_parameters():
        if not p.requires_grad:  # a frozen encoder (_freeze): not even weight decay touches it
            continue
        key = "query" if p is q else "align" if id(p) in align else ("decay" if p.ndim >= 2 else "no_decay")
        groups[key].append(p)
    param_groups: list[dict[str, Any]] = [
        {"params": groups["decay"], "weight_decay": cfg.weight_decay},
        {"params": groups["no_decay"], "weight_decay": 0.0},
        {"params": groups["query"], "weight_decay": 0.0, "lr": lr * cfg.query_lr_multiplier},
    ]
    if groups["align"]:  # ModelConfig.align: weights that start at 0 over a dozen features
        param_groups.append({"params": groups["align"], "weight_decay": 0.0, "lr": lr * cfg.align_lr_multiplier})
    if stage == "joint" and joint is not None:
        param_groups.append({"params": model.stage2_parameters(), "weight_decay": 0.0, "lr": joint.head_lr})
    return torch.optim.AdamW(param_groups, lr=lr)


def _warmup_linear(opt: torch.optim.Optimizer, total: int, warmup_ratio: float) -> Any:
    """Linear warm-up over warmup_ratio × total steps, then linear decay to 0."""
    warm = max(1, round(warmup_ratio * total))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _freeze(model: Model, stage: str, frozen_encoder: bool = False) -> None:
    """requires_grad only on the parameters the stage trains (Algorithm 1: freeze after Stage I); with
    ``frozen_encoder`` never on the encoder's (StageIConfig.encoder = "frozen")."""
    params = {"stage1": model.stage1_parameters, "stage2": model.stage2_parameters, "joint": model.joint_parameters}
    encoder = set(map(id, model.encoder.parameters())) if frozen_encoder else set()
    _train_only(model, [p for p in params[stage]() if id(p) not in encoder])


def _train_only(model: Model, params: list[nn.Parameter]) -> None:
    """requires_grad on ``params`` and on nothing else of ``model``."""
    train = set(map(id, params))
    for p in model.parameters():
        p.requires_grad_(id(p) in train)


def _k_dim_optimiser(params: list[nn.Parameter], n_items: int, cfg: StageIIConfig) -> tuple[Any, Any, torch.Generator, int]:
    """(AdamW, warm-up + linear decay, the seeded data-order generator, steps per epoch) of a K-dimensional stage over
    cached outputs (Stage II, the LCEC fit)."""
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    steps_per_epoch = math.ceil(n_items / cfg.batch_size)
    sched = _warmup_linear(opt, steps_per_epoch * cfg.epochs, cfg.warmup_ratio)
    return opt, sched, torch.Generator().manual_seed(cfg.seed), steps_per_epoch


def _key(metrics: dict[str, float], f1: str, acc: str) -> tuple[float, float, float]:
    """Model selection: dev macro-F1, ties broken by accuracy, then by lower dev loss."""
    return (round(metrics[f1], 10), round(metrics[acc], 10), -metrics["loss"])


def _n_steps(n_items: int, batch: int, cap: int, epochs: int = 1, min_steps: int = 0) -> int:
    """Optimiser steps per epoch: one pass over ``n_items`` in batches of ``batch``, capped at ``cap`` (> 0, smoke
    runs), or ceil(min_steps / epochs) when a pass is shorter (a small table, StageIConfig.min_steps)."""
    n = math.ceil(n_items / batch)
    if cap > 0:
        return min(n, cap)
    if min_steps > 0 and epochs > 0:
        return max(n, math.ceil(min_steps / epochs))
    return n


def _batches(loader: Any, steps: int) -> Iterator[Any]:
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


def _fit_encoder(
    model: _M,
    train: EncodedItems,
    dev: EncodedItems,
    cfg: StageIConfig,
    pad_id: int,
    stage: str,
    loss_fn: Callable[[_M, dict[str, Tensor]], Tensor],
    dev_metrics: Callable[[Predictions, EncodedItems], dict[str, float]],
    select: Callable[[dict[str, float]], tuple[float, ...]],
    callback: Callback | None,
    joint: JointConfig | None = None,
    start_candidate: bool = False,
    keep_last: bool = False,
    states: tuple[States, States] | None = None,
) -> StageResult:
    """The epoch loop shared by Stage I, the PLM baseline and the joint stage (Accelerate, warm-up, early
    stopping). select maps dev metrics to a key (larger is better); start_candidate: the state before the
    first epoch is a candidate too (epoch 0), so a stage that does not help on dev changes nothing;
    keep_last: every epoch counts as the best so far, so all of them run and the final state is kept (dev
    metrics are logged, not used). With a frozen encoder (cfg.encoder, "auto" decided here for train + dev) only the
    heads train and the encoder stays in eval mode (dropout off); ``states`` (train, dev) are its token states
    (:func:`encoder_states`), computed here when not given and cfg.cache_states is on."""
    set_seed(cfg.seed)
    cfg = cfg.resolved(len(train) + len(dev))
    frozen = cfg.encoder == "frozen"
    train_stage = "joint" if stage == "joint" else "stage1"
    _freeze(model, train_stage, frozen)
    acc = _accelerator(cfg)
    # The model goes to the accelerator's device here, every stage: Accelerator.prepare returns a model it prepared
    # before (an earlier stage) as it is, without placing it, and the previous stage left it on the CPU.
    model.to(acc.device)
    if not frozen:
        states = None  # a trained encoder's states change every step
    elif states is None and cfg.cache_states:
        states = (encoder_states(model.encoder, train, pad_id, cfg.eval_batch_size, precision=cfg.mixed_precision),
                  encoder_states(model.encoder, dev, pad_id, cfg.eval_batch_size, precision=cfg.mixed_precision))
    dev_states = states[1] if states is not None else None
    epochs = joint.epochs if (stage == "joint" and joint is not None) else cfg.epochs
    min_steps = joint.min_steps if (stage == "joint" and joint is not None) else cfg.min_steps
    opt = _optimizer(model, cfg, train_stage, joint)
    steps_per_epoch = _n_steps(len(train), cfg.batch_size * acc.num_processes, cfg.max_steps_per_epoch, epochs,
                               min_steps)
    sched = _warmup_linear(opt, steps_per_epoch * epochs, cfg.warmup_ratio)
    loader = _loader(train, cfg.batch_size, pad_id, seed=cfg.seed, group=cfg.group_by_length,
                     states=states[0] if states is not None else None)
    pmodel, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    acc.unwrap_model(pmodel).to(acc.device)  # placed whether or not prepare placed it (see above)
    best_key: tuple[float, ...] | None = None
    best_state: dict[str, Tensor] = {}
    best, best_epoch, history, bad, steps, step_time = {}, 0, [], 0, 0, 0.0
    if start_candidate:
        best = dev_metrics(predict(acc.unwrap_model(pmodel), dev, pad_id, cfg.eval_batch_size, states=dev_states), dev)
        best_key = select(best)
        best_state = {k: v.detach().to("cpu", copy=True) for k, v in acc.unwrap_model(pmodel).state_dict().items()}
        history.append({"epoch": 0, "train_loss": float("nan")} | best)
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        pmodel.train()
        if frozen:
            acc.unwrap_model(pmodel).encoder.eval()  # dropout off: the states a cache holds
        if callback:
            callback(Event(stage, "start", epoch, 0, steps_per_epoch, epochs))
        total = 0.0
        for i, batch in enumerate(_batches(loader, steps_per_epoch)):
            ts = time.perf_counter()
            with acc.autocast():
                loss = loss_fn(pmodel, batch)
            acc.backward(loss)
            if cfg.grad_clip > 0:
                acc.clip_grad_norm_(pmodel.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step_time += time.perf_counter() - ts
            steps += 1
            total += float(loss.detach())
            if (i + 1) % 50 == 0:
                log.info("%s epoch %d step %d/%d: loss %.4f, %.3f s/step", stage, epoch, i + 1, steps_per_epoch,
                         total / (i + 1), step_time / steps)
            if callback:
                callback(Event(stage, "step", epoch, i + 1, steps_per_epoch, epochs, float(loss.detach())))
        unwrapped: Model = acc.unwrap_model(pmodel)
        metrics = dev_metrics(predict(unwrapped, dev, pad_id, cfg.eval_batch_size, states=dev_states), dev)
        history.append({"epoch": epoch, "train_loss": total / max(1, steps_per_epoch)} | metrics)
        log.info("%s epoch %d: train loss %.4f, dev %s", stage, epoch, history[-1]["train_loss"], _fmt(metrics))
        key = select(metrics)
        if keep_last or best_key is None or key > best_key:
            best_key, best, best_epoch, bad = key, metrics, epoch, 0
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in unwrapped.state_dict().items()}
        else:
            bad += 1
        if callback:
            callback(Event(stage, "epoch", epoch, steps_per_epoch, steps_per_epoch, epochs, metrics=metrics))
        if bad >= cfg.patience:
            log.info("%s: early stop after epoch %d (best epoch %d)", stage, epoch, best_epoch)
            break
    model = acc.unwrap_model(pmodel)
    model.load_state_dict(best_state)
    model.to("cpu")
    acc.free_memory()
    seconds = time.perf_counter() - t0
    return StageResult(best_epoch, best, history, seconds, steps, step_time / max(1, steps))


def _fmt(m: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in m.items())


# ---------------------------------------------------------------------------- Stage I
def _concept_loss(logits: Tensor, batch: dict[str, Tensor], cfg: StageIConfig) -> Tensor:
    """L_con (Eq. 12) on the adjudicated levels, or with ``cfg.soft_targets`` > 0 on the soft targets (the
    reviewers' level shares mixed in, :func:`reccbm.model.soft_concept_loss`)."""
    if cfg.soft_targets > 0:
        if "concept_soft" not in batch:
            raise ReccbmError("stage1.soft_targets needs each answer's reviewers' levels (EncodedItems.soft)")
        return soft_concept_loss(logits, batch["concepts"], batch["concept_soft"], cfg.soft_targets, cfg.concept_loss)
    return concept_loss(logits, batch["concepts"], cfg.concept_loss)


def _stage1_loss(cfg: StageIConfig) -> Callable[[RecCBM, dict[str, Tensor]], Tensor]:
    def loss(model: RecCBM, batch: dict[str, Tensor]) -> Tensor:
        out = model(batch)
        assert out.concept_logits is not None and out.c_hat is not None
        c = batch["concepts"]  # (B, K)
        total = cfg.lambda_c * _concept_loss(out.concept_logits, batch, cfg)  # Eq. 12
        if cfg.lambda_r > 0:
            total = total + cfg.lambda_r * opcc_loss(out.c_hat, c)  # Eq. 16
        if cfg.contrast > 0:  # supervision across questions (reccbm/contrast.py)
            total = total + cfg.contrast * _contrast_term(model, batch, cfg, total)
        return total  # Eq. 27

    return loss


def _contrast_term(model: RecCBM, batch: dict[str, Tensor], cfg: StageIConfig, like: Tensor) -> Tensor:
    """The cross-question loss on the inputs :func:`reccbm.contrast.contrast_batch` builds from ``batch``; 0 when none."""
    unwrapped: RecCBM = getattr(model, "module", model)  # under Accelerate's wrapper (multi-process)
    K, M = unwrapped.config.num_concepts, unwrapped.config.M
    # padding is masked, so its id does not matter: 0
    extra = contrast_batch(batch, M, K, cfg.contrast_top, cfg.contrast_bottom, cfg.contrast_per_batch, 0)
    if extra is None:
        return like * 0.0
    device = batch["input_ids"].device
    logits, _ = unwrapped.concepts({k: v.to(device) for k, v in extra.items() if k != "contrast"})  # (N, K, M+1)
    return contrast_loss(logits, extra["contrast"].to(device))


def _joint_loss(cfg: StageIConfig, joint: JointConfig, s2: StageIIConfig) -> Callable[[RecCBM, dict[str, Tensor]], Tensor]:
    """λ_c L_con + λ_r L_rank (Eq. 27) + λ_t L_task (+ λ_d L_den + λ_s L_spa) (Eq. 28), one backward pass."""
    def loss(model: RecCBM, batch: dict[str, Tensor]) -> Tensor:
        c = batch["concepts"]  # (B, K)
        logits, _ = model.concepts(batch)  # (B, K, M+1)
        total = cfg.lambda_c * _concept_loss(logits, batch, cfg)  # Eq. 12
        p_hat = logits.float().softmax(-1)  # (B, K, M+1), Eq. 11
        if cfg.lambda_r > 0:
            total = total + cfg.lambda_r * opcc_loss(expected_scores(p_hat), c)  # Eq. 16
        out = model.grade_from_concepts(*random_conditioning(p_hat, c, joint.intervention_p))
        total = total + joint.lambda_t * F.cross_entropy(out.grade_logits.float(), batch["grades"])  # Eq. 23
        if model.lcec is not None:
            den, spa = model.lcec_losses(out, c)  # Eq. 24, 25
            total = total + s2.lambda_d * den + s2.lambda_s * spa
        return total

    return loss


def train_concepts(
    model: RecCBM,
    train: EncodedItems,
    dev: EncodedItems,
    cfg: StageIConfig,
    pad_id: int,
    callback: Callback | None = None,
    states: tuple[States, States] | None = None,
) -> StageResult:
    """Stage I: train (E, Q, {V_k}) on λ_c L_con + λ_r L_rank; keep the epoch with the best dev C-F1. With a frozen
    encoder (cfg.encoder) only (Q, {V_k}); ``states``: its token states for (train, dev) (:func:`encoder_states`)."""
    if model.config.plm:
        raise ReccbmError("the PLM baseline has no concept stage; use train_plm")
    for name, items in (("train", train), ("dev", dev)):
        if items.concepts is None or len(items) == 0:
            raise ReccbmError(f"Stage I needs a non-empty {name} split with concept labels")

    def metrics(p: Predictions, items: EncodedItems) -> dict[str, float]:
        assert items.concepts is not None and p.p_hat is not None
        return concept_metrics(items.concepts, p.levels) | {"loss": _nll(p.p_hat, items.concepts)}

    return _fit_encoder(model, train, dev, cfg, pad_id, "stage1", _stage1_loss(cfg), metrics,
                        lambda m: _key(m, "c_f1", "c_acc"), callback, states=states)


def train_joint(
    model: RecCBM,
    train: EncodedItems,
    dev: EncodedItems,
    cfg: StageIConfig,
    joint: JointConfig,
    stage2: StageIIConfig,
    pad_id: int,
    reference_c_acc: float,
    callback: Callback | None = None,
    states: tuple[States, States] | None = None,
) -> StageResult:
    """Joint stage: every parameter on the joint loss through the soft bottleneck. Starts from a trained
    Stage I and a fitted grade head; keeps the epoch (0 = the starting state) with the best dev T-F1 among
    those whose dev C-Acc >= reference_c_acc − joint.c_acc_drop, or with joint.select == "last" the final state.
    With a frozen encoder (cfg.encoder) everything but E; ``states`` as in :func:`train_concepts`."""
    if model.config.plm:
        raise ReccbmError("the PLM baseline has no concept bottleneck to train jointly")
    for name, items in (("train", train), ("dev", dev)):
        if items.concepts is None or items.grades is None or len(items) == 0:
            raise ReccbmError(f"the joint stage needs a non-empty {name} split with concept labels and grades")

    def metrics(p: Predictions, items: EncodedItems) -> dict[str, float]:
        assert items.concepts is not None and items.grades is not None
        return (task_metrics(items.grades, p.grades) | concept_metrics(items.concepts, p.levels)
                | {"loss": _nll(p.grade_probs, items.grades)})

    floor = reference_c_acc - joint.c_acc_drop

    def select(m: dict[str, float]) -> tuple[float, ...]:
        return (float(m["c_acc"] >= floor - 1e-12),) + _key(m, "t_f1", "t_acc")

    return _fit_encoder(model, train, dev, cfg, pad_id, "joint", _joint_loss(cfg, joint, stage2), metrics, select,
                        callback, joint=joint, start_candidate=joint.select != "last", keep_last=joint.select == "last",
                        states=states)


@torch.no_grad()
def init_rubric_queries(model: RecCBM, tokenizer: Any, texts: list[str], max_len: int = 256) -> Tensor:
    """Set Q from the pretrained encoder's mean-pooled embedding of each concept's text (definition and
    level anchors), see :func:`reccbm.model.rubric_queries`; returns Q (K, d)."""
    if model.config.plm or model.bottleneck.Q is None:
        raise ReccbmError("rubric-initialised queries need a model with RACE")
    if len(texts) != model.config.num_concepts:
        raise ReccbmError(f"{len(texts)} concept texts for {model.config.num_concepts} concepts")
    enc = tokenizer(list(texts), truncation=True, max_length=max_len, padding=True, return_tensors="pt")
    was_training = model.training
    model.eval()
    H = model.encoder(enc["input_ids"], enc["attention_mask"], enc.get("token_type_ids"))  # (K, T, d)
    model.train(was_training)
    Q = rubric_queries(masked_mean(H, enc["attention_mask"]).float())  # (K, d)
    model.bottleneck.Q.data.copy_(Q.to(model.bottleneck.Q.dtype))
    return Q


def train_plm(
    model: PLM,
    train: EncodedItems,
    dev: EncodedItems,
    cfg: StageIConfig,
    pad_id: int,
    callback: Callback | None = None,
    states: tuple[States, States] | None = None,
) -> StageResult:
    """PLM baseline: fine-tune E and a linear head on the grade CE; keep the best dev T-F1 epoch. With a frozen encoder
    (cfg.encoder) the head alone, on the pooled states; ``states`` as in :func:`train_concepts`."""
    if not isinstance(model, PLM):
        raise ReccbmError("train_plm needs the PLM baseline (reccbm.PLM, a config with plm=True)")
    for name, items in (("train", train), ("dev", dev)):
        if items.grades is None or len(items) == 0:
            raise ReccbmError(f"the PLM baseline needs a non-empty {name} split with grades")

    def loss(m: PLM, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(m(batch).grade_logits.float(), batch["grades"])

    def metrics(p: Predictions, items: EncodedItems) -> dict[str, float]:
        assert items.grades is not None
        return task_metrics(items.grades, p.grades) | {"loss": _nll(p.grade_probs, items.grades)}

    return _fit_encoder(model, train, dev, cfg, pad_id, "plm", loss, metrics, lambda m: _key(m, "t_f1", "t_acc"),
                        callback, states=states)


# ---------------------------------------------------------------------------- prediction
@torch.inference_mode()
def predict(
    model: Model,
    items: EncodedItems,
    pad_id: int,
    batch_size: int = 64,
    on_batch: Callable[[int], None] | None = None,
    states: States | None = None,
    device: str | torch.device | None = None,
    precision: str = "no",
) -> Predictions:
    """Batched inference (length-sorted, dynamic padding). ``device``: where it runs (:func:`reccbm.device.resolve_device`;
    None: the model's current device); the model is put back where it was afterwards. ``precision`` "bf16": bf16
    autocast on a GPU that has it (off by default). ``states``: the items' token states from this model's (frozen)
    encoder (:func:`encoder_states`), used instead of running it."""
    if len(items) == 0:
        raise ReccbmError("nothing to predict: no items")
    was_training = model.training
    model.eval()
    order = np.argsort([len(f["input_ids"]) for f in items.features], kind="stable")  # length-sorted
    parts: dict[str, list[NDArray[Any]]] = {"grade_probs": [], "grade_logits": [], "p_hat": [], "c_hat": [], "mu_post": []}
    with on_device(model, device) as dev, autocast(dev, precision):
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = {k: v.to(dev) for k, v in _batch(items, idx, pad_id, states).items()}
            out = model(batch)
            parts["grade_probs"].append(out.grade_logits.float().softmax(-1).cpu().numpy())
            parts["grade_logits"].append(out.grade_logits.float().cpu().numpy())
            for name in ("p_hat", "c_hat", "mu_post"):
                t = getattr(out, name)
                if t is not None:
                    parts[name].append(t.float().cpu().numpy())
            if on_batch:
                on_batch(len(idx))
    model.train(was_training)
    inv = np.argsort(order)  # back to the input order

    def cat(name: str) -> NDArray[Any] | None:
        return np.concatenate(parts[name])[inv] if parts[name] else None

    probs = cat("grade_probs")
    assert probs is not None
    return Predictions(probs, cat("p_hat"), cat("c_hat"), cat("mu_post"), cat("grade_logits"))


def _nll(probs: NDArray[Any], labels: NDArray[Any]) -> float:
    """Mean negative log-likelihood of integer labels under probabilities (..., C)."""
    p = np.take_along_axis(probs, labels[..., None], axis=-1)[..., 0]
    return float(-np.log(np.clip(p, 1e-12, 1.0)).mean())


def quantize_encoder(model: Model) -> Model:
    """CPU inference: int8 dynamic quantisation of the encoder's Linear layers, weights per output channel (in
    place; ~1.5x faster on AVX2 CPUs; per channel changes fewer grades than one scale per tensor, at the same speed;
    docs/runs.md gives the share). Never use it before training."""
    import warnings

    if not isinstance(model.encoder, TextEncoder):
        raise ReccbmError("int8 quantisation needs the torch encoder (the ONNX engine has its own int8 file)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        model.encoder.module = quantize_dynamic(  # type: ignore[no-untyped-call]
            model.encoder.module, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
    return model


def cache_concepts(model: Model, items: EncodedItems, pad_id: int, batch_size: int = 64,
                   states: States | None = None, device: str | torch.device | None = None,
                   precision: str = "no") -> Tensor:
    """Frozen Stage I outputs p̂ (N, K, M+1), computed once for Stage II (float32, CPU); ``states``, ``device`` and
    ``precision`` as in :func:`predict`."""
    p = predict(model, items, pad_id, batch_size, states=states, device=device, precision=precision).p_hat
    if p is None:
        raise ReccbmError("the PLM baseline has no concept outputs to cache")
    return torch.from_numpy(p)


# ---------------------------------------------------------------------------- Stage II
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
            return _train_grader(model, train_p_hat.to(dev), None if train_concepts_ is None else train_concepts_.to(dev),
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
    _train_only(model, params)
    opt, sched, gen, steps_per_epoch = _k_dim_optimiser(params, len(train_p_hat), cfg)
    best_key: tuple[float, ...] | None = None
    best_state: list[Tensor] = []
    best, best_epoch, history, bad, steps = {}, 0, [], 0, 0
    t0 = time.perf_counter()
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        perm = torch.randperm(len(train_p_hat), generator=gen)
        total = 0.0
        for start in range(0, len(perm), cfg.batch_size):
            idx = perm[start : start + cfg.batch_size]
            c = None if train_concepts_ is None else train_concepts_[idx]
            loss = _stage2_loss(model, train_p_hat[idx], c, train_grades[idx], cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            sched.step()
            steps += 1
            total += float(loss.detach())
        with torch.no_grad():
            model.eval()
            logits = model.grade_from_concepts(dev_p_hat).grade_logits
            metrics = task_metrics(dev_grades.cpu().numpy(), logits.argmax(1).cpu().numpy())
            metrics["loss"] = float(F.cross_entropy(logits, dev_grades))
        history.append({"epoch": epoch, "train_loss": total / steps_per_epoch} | metrics)
        key = (-metrics["loss"],) if cfg.select == "nll" else _key(metrics, "t_f1", "t_acc")
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
    log.info("stage2: best epoch %d of %d, dev %s (%.2f s)", best_epoch, len(history), _fmt(best), seconds)
    return StageResult(best_epoch, best, history, seconds, steps, seconds / max(1, steps))



def fit_lcec(model: RecCBM, p_hat: Tensor, concepts: Tensor, cfg: StageIIConfig, callback: Callback | None = None,
             device: str | torch.device | None = None) -> StageResult:
    """LCEC's (L, η) alone on L_den + λ_s L_spa (Eq. 24, 25; λ_s = cfg.lcec_lambda_s) over cached outputs p̂ (N, K, M+1) and their 0..M
    labels, everything else frozen; the final state is kept. Given outputs for answers the encoder never trained on
    (the dev split's), σ² and Ω describe the errors it makes on new answers (StageIIConfig.lcec_fit = "dev").
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


def _fit_lcec(model: RecCBM, p_hat: Tensor, concepts: Tensor, cfg: StageIIConfig, callback: Callback | None) -> StageResult:
    assert model.lcec is not None
    torch.manual_seed(cfg.seed)
    params = list(model.lcec.parameters())
    _train_only(model, params)
    opt, sched, gen, steps_per_epoch = _k_dim_optimiser(params, len(p_hat), cfg)
    history, steps, t0 = [], 0, time.perf_counter()
    model.train()
    for epoch in range(1, cfg.epochs + 1):
        perm = torch.randperm(len(p_hat), generator=gen)
        total = 0.0
        for start in range(0, len(perm), cfg.batch_size):
            idx = perm[start : start + cfg.batch_size]
            den, spa = model.lcec_losses(model.grade_from_concepts(p_hat[idx]), concepts[idx])  # Eq. 24, 25
            loss = den + cfg.lcec_lambda_s * spa  # λ_d weighs L_den against the grade loss; alone it has weight 1
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            sched.step()
            steps += 1
            total += float(loss.detach())
        history.append({"epoch": epoch, "train_loss": total / steps_per_epoch})
        if callback:
            callback(Event("lcec", "epoch", epoch, steps_per_epoch, steps_per_epoch, cfg.epochs,
                           metrics={"loss": history[-1]["train_loss"]}))
    model.eval()
    seconds = time.perf_counter() - t0
    return StageResult(cfg.epochs, {"loss": history[-1]["train_loss"]}, history, seconds, steps,
                       seconds / max(1, steps))
