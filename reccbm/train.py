"""REC-CBM's encoder stages as building blocks: Stage I, the joint stage and the PLM baseline.

The order in which they run is :func:`reccbm.fit` (reccbm/fit.py).

* :func:`train_concepts` — Stage I (Eq. 27): (E, Q, {V_k}) on λ_c L_con + λ_r L_rank; model
  selection on dev concept macro-F1 (C-F1), early stopping with patience.
* :func:`train_joint` — the joint stage (not in the paper): every parameter on the joint loss.
* :func:`train_plm` — black-box fine-tuning of the same backbone on the grade (selection on T-F1).
* :func:`init_rubric_queries` — Q from the pretrained encoder's embedding of each concept's text (Eq. 8).

Read top to bottom, as a training script: :func:`_prepare` sets a stage up (seed, the parameters that train, the
device, optimiser, warm-up schedule and loader), :func:`_train_epoch` takes one epoch's optimiser steps,
:func:`_evaluate` reads the dev answers, and :func:`_fit_encoder` is the loop over epochs with model selection and
early stopping; the three stages at the end call it with their loss (:mod:`reccbm.losses`) and selection key. Batches
are made in :mod:`reccbm.batches`.

The other pieces live beside it, and are importable from here as before: Stage II (Eq. 28) and the LCEC fit over
cached outputs in :mod:`reccbm.stage2`; batched prediction, :func:`cache_concepts` (p̂ for Stage II) and a frozen
encoder's token states (:func:`encoder_states`) in :mod:`reccbm.inference`; the progress events, the stage record and
the seed in :mod:`reccbm.stages`.

Stage I, the joint stage and the PLM run through Hugging Face Accelerate: one process on the CPU or one GPU, the
same code under ``accelerate launch`` for multi-GPU / multi-node; the model is placed on the accelerator's device at
the start of every stage. Stage II, the LCEC fit, prediction and a frozen encoder's states run on the device they are
given (:mod:`reccbm.device`; None: where the model is). Between calls a model lives on the CPU. Progress goes to an
optional callback (``reccbm`` never prints).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import Tensor, nn

from reccbm.batches import epoch_steps, question_groups, take_batches, training_loader
from reccbm.config import JointConfig, StageIConfig, StageIIConfig
from reccbm.data import EncodedItems
from reccbm.encoder import TextEncoder, parameter_depths, states_layer
from reccbm.errors import ReccbmError
from reccbm.graphs import EncoderGraphs
from reccbm.inference import (
    Predictions,
    States,
    cache_concepts,
    encoder_states,
    predict,
    quantize_encoder,
)
from reccbm.losses import joint_loss, stage1_loss, training_term_weights
from reccbm.metrics import concept_metrics, task_metrics
from reccbm.model import (
    PLM,
    Model,
    RecCBM,
    masked_mean,
    rubric_queries,
)
from reccbm.references import ReferenceSwap
from reccbm.stage2 import fit_lcec, train_grader
from reccbm.stages import (
    Callback,
    Event,
    StageResult,
    WeightAverage,
    format_metrics,
    selection_key,
    set_seed,
    train_only,
    warmup_linear,
)

__all__ = [
    "Callback",
    "Event",
    "Predictions",
    "StageResult",
    "States",
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

_M = TypeVar("_M", RecCBM, PLM)  # the network a training loop runs: REC-CBM or the PLM baseline
READ_EVERY = 25  # on a GPU, a step's loss is read to the host (a wait for the GPU) once in this many steps


# ---------------------------------------------------------------------------- shared pieces
def _accelerator(cfg: StageIConfig) -> Any:
    from accelerate import Accelerator

    return Accelerator(mixed_precision=cfg.mixed_precision, cpu=cfg.device == "cpu")


def _optimizer(model: Model, cfg: StageIConfig, stage: str = "stage1",
               joint: JointConfig | None = None) -> torch.optim.Optimizer:
    """AdamW over (E, Q, {V_k}) — or (E, head) — with decay on matrices only, Q at lr × multiplier, the encoder's
    lower layers at lower rates with StageIConfig.layer_decay < 1; parameters that do not train (_freeze) left out.

    stage="joint": the same groups at joint.lr, plus (L, η, W, U) at joint.head_lr without decay."""
    q = model.bottleneck.Q if isinstance(model, RecCBM) else None
    lr = joint.lr if (stage == "joint" and joint is not None) else cfg.lr
    if stage != "joint" and cfg.encoder == "frozen" and cfg.frozen_lr > 0:
        lr = cfg.frozen_lr  # only heads train
    align = set(map(id, model.align.parameters())) if isinstance(model, RecCBM) and model.align is not None else set()
    mix = getattr(model.encoder, "mix", None)  # ModelConfig.layer_mix's weights train at the alignment weights' rate
    align |= set(map(id, mix.parameters())) if mix is not None else set()
    # layer_decay < 1: an encoder parameter `below` depths under the top (reccbm.encoder.parameter_depths) trains at
    # its group's rate × layer_decay^below; everything else at its group's rate (below = 0)
    depths, L = parameter_depths(model.encoder) if cfg.layer_decay < 1.0 else ({}, 0)
    groups: dict[tuple[str, int], list[nn.Parameter]] = {}
    for p in model.stage1_parameters():
        if not p.requires_grad:  # a frozen encoder or its embeddings (_freeze): not even weight decay touches them
            continue
        kind = "query" if p is q else "align" if id(p) in align else ("decay" if p.ndim >= 2 else "no_decay")
        below = L + 1 - depths[id(p)] if id(p) in depths else 0
        groups.setdefault((kind, below), []).append(p)
    rates = {"decay": lr, "no_decay": lr, "query": lr * cfg.query_lr_multiplier, "align": lr * cfg.align_lr_multiplier}
    decays = {"decay": cfg.weight_decay, "no_decay": 0.0, "query": 0.0, "align": 0.0}
    # align: ModelConfig.align's weights, which start at 0 over a dozen features
    param_groups: list[dict[str, Any]] = [{"params": groups.get((kind, 0), []), "weight_decay": decays[kind],
                                           "lr": rates[kind]} for kind in ("decay", "no_decay", "query", "align")
                                          if kind != "align" or groups.get((kind, 0))]
    param_groups += [{"params": params, "weight_decay": decays[kind], "lr": rates[kind] * cfg.layer_decay ** below}
                     for (kind, below), params in sorted(groups.items()) if below > 0]
    if stage == "joint" and joint is not None:
        param_groups.append({"params": model.stage2_parameters(), "weight_decay": 0.0, "lr": joint.head_lr})
    return torch.optim.AdamW(param_groups, lr=lr, fused=_fused(param_groups, cfg.fused_optimizer))


def _fused(param_groups: list[dict[str, Any]], fused: bool) -> bool | None:
    """AdamW's ``fused`` argument: True (the one-kernel update) where asked and every parameter is a floating-point
    tensor on the CPU or a CUDA GPU (the devices whose fused kernel this torch has); else None (torch's default, the
    per-tensor loop)."""
    params = [p for g in param_groups for p in g["params"]]
    ok = fused and bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return True if ok else None


def _freeze(model: Model, stage: str, frozen_encoder: bool = False, frozen_embeddings: bool = False,
            below: int = 0) -> None:
    """requires_grad only on the parameters the stage trains (Algorithm 1: freeze after Stage I); with
    ``frozen_encoder`` never on the encoder's (StageIConfig.encoder = "frozen"), with ``frozen_embeddings`` never on its
    input embeddings' (StageIConfig.freeze_embeddings), with ``below`` = l > 0 never on the embeddings' and layers
    1..l's (StageIConfig.train_top_layers)."""
    params = {"stage1": model.stage1_parameters, "stage2": model.stage2_parameters, "joint": model.joint_parameters}
    if frozen_encoder:
        keep = set(map(id, model.encoder.parameters()))
    elif below > 0:
        keep = {i for i, depth in parameter_depths(model.encoder)[0].items() if depth <= below}
    elif frozen_embeddings:
        keep = {i for i, depth in parameter_depths(model.encoder)[0].items() if depth == 0}
        if not keep:
            raise ReccbmError("stage1.freeze_embeddings: the backbone has no part named like its input embeddings; "
                              "use stage1.freeze_embeddings=false")
    else:
        keep = set()
    train_only(model, [p for p in params[stage]() if id(p) not in keep])


@dataclass
class _Run:
    """One encoder stage as Accelerate prepared it, and its running counts of optimiser steps and their time."""

    cfg: StageIConfig  # the stage's config, encoder "auto" decided
    acc: Any  # accelerate.Accelerator
    pmodel: Any  # the prepared (possibly wrapped) model
    opt: Any
    loader: Any
    sched: Any
    epochs: int
    steps_per_epoch: int
    frozen: bool  # the encoder is frozen: it stays in eval mode
    dev_states: States | None  # the dev inputs' token states of a frozen encoder, when cached
    average: WeightAverage | None = None  # the trained parameters' moving average (cfg.ema), evaluated and kept
    offsets: nn.Parameter | None = None  # (Q, K, M+1) the training questions' level offsets (cfg.question_effects)
    steps: int = 0
    step_time: float = 0.0


@dataclass
class _Best:
    """Model selection across epochs: the best key so far, its epoch, dev metrics and state (a CPU copy), and how many
    epochs in a row did not beat it."""

    key: tuple[float, ...] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    epoch: int = 0
    state: dict[str, Tensor] = field(default_factory=dict)
    bad: int = 0

    def offer(self, epoch: int, metrics: dict[str, float], key: tuple[float, ...], model: nn.Module,
              keep: bool = False) -> None:
        """Take ``model``'s state when ``key`` beats the best so far (or ``keep``); else count an epoch without."""
        if keep or self.key is None or key > self.key:
            self.key, self.metrics, self.epoch, self.bad = key, metrics, epoch, 0
            self.state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            self.bad += 1


def _prepare(model: Model, train: EncodedItems, dev: EncodedItems, cfg: StageIConfig, pad_id: int, stage: str,
             joint: JointConfig | None, states: tuple[States, States] | None) -> _Run:
    """Seed; train only the stage's parameters; place the model on the accelerator's device; a frozen encoder's token
    states (given, or computed here when cfg.cache_states is on); optimiser, warm-up schedule and loader, prepared."""
    set_seed(cfg.seed)
    cfg = cfg.resolved(len(train) + len(dev))
    if train.views is not None and (stage != "stage1" or cfg.rdrop <= 0):  # only Stage I's R-Drop reads the copies
        train = replace(train, views=None)
    frozen = cfg.encoder == "frozen"
    train_stage = "joint" if stage == "joint" else "stage1"
    below = states_layer(model.encoder, cfg.train_top_layers) if not frozen else None
    if isinstance(model.encoder, TextEncoder):
        model.encoder.states_layer = below  # where cached states are cut: under the trained top layers, or at H
    _freeze(model, train_stage, frozen, cfg.freeze_embeddings, below or 0)
    if cfg.encoder_dropout >= 0:  # every dropout of E, attention's included (it reads its module's p)
        for m in model.encoder.modules():
            if isinstance(m, nn.Dropout):
                m.p = cfg.encoder_dropout
    acc = _accelerator(cfg)
    # The model goes to the accelerator's device here, every stage: Accelerator.prepare returns a model it prepared
    # before (an earlier stage) as it is, without placing it, and the previous stage left it on the CPU.
    model.to(acc.device)
    if not frozen and below is None:
        states = None  # a trained encoder's states change every step
    elif states is None and cfg.cache_states and getattr(model, "rubric_prefix", None) is None:
        states = (encoder_states(model.encoder, train, pad_id, cfg.eval_batch_size, precision=cfg.mixed_precision),
                  encoder_states(model.encoder, dev, pad_id, cfg.eval_batch_size, precision=cfg.mixed_precision))
    dev_states = states[1] if states is not None else None
    epochs = joint.epochs if (stage == "joint" and joint is not None) else cfg.epochs
    min_steps = joint.min_steps if (stage == "joint" and joint is not None) else cfg.min_steps
    opt = _optimizer(model, cfg, train_stage, joint)
    offsets, questions = None, None
    if cfg.question_effects > 0 and isinstance(model, RecCBM) and not model.config.plm:
        questions, n_q = question_groups(train)
        offsets = nn.Parameter(torch.zeros(n_q, model.config.num_concepts, model.config.num_levels, device=acc.device))
        rate = (joint.lr if (stage == "joint" and joint is not None) else cfg.lr) * cfg.question_effects
        opt.add_param_group({"params": [offsets], "lr": rate, "weight_decay": 0.0})
    swap = None
    if cfg.reference_swap > 0 and states is None:  # the encoder reads the tokens: another reference can be read
        groups = questions if questions is not None else question_groups(train)[0]
        swap = ReferenceSwap.build(train, groups, cfg.reference_swap, model.config.max_len, cfg.seed)
    steps_per_epoch = epoch_steps(len(train), cfg.batch_size * acc.num_processes, cfg.max_steps_per_epoch, epochs,
                               min_steps)
    sched = warmup_linear(opt, steps_per_epoch * epochs, cfg.warmup_ratio)
    loader = training_loader(train, cfg.batch_size, pad_id, seed=cfg.seed, group=cfg.group_by_length,
                     states=states[0] if states is not None else None, model=model, questions=questions, swap=swap,
                     per_question=cfg.answers_per_question)
    pmodel, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    unwrapped = acc.unwrap_model(pmodel)
    unwrapped.to(acc.device)  # placed whether or not prepare placed it (see above)
    if _graphs_apply(cfg, acc, unwrapped, frozen or below is not None):
        unwrapped.encoder.graphs = EncoderGraphs(unwrapped.encoder.module, cfg.graph_pad_to,
                                                 getattr(unwrapped.encoder.hf_config, "max_position_embeddings", None))
    average = (WeightAverage([p for p in unwrapped.parameters() if p.requires_grad], cfg.ema) if cfg.ema > 0
               else None)
    return _Run(cfg, acc, pmodel, opt, loader, sched, epochs, steps_per_epoch, frozen, dev_states, average, offsets)


def _graphs_apply(cfg: StageIConfig, acc: Any, model: Model, cut: bool) -> bool:
    """Whether a stage records its encoder's steps as CUDA graphs (StageIConfig.cuda_graphs): one CUDA process in
    float32, one reading a step (not stage1.rdrop's two), an encoder that trains whole (not frozen, not cut under
    trained top layers) and is a TextEncoder whose H is its last layer (the graphs record the backbone's own output, not
    model.layer_mix's)."""
    return (cfg.cuda_graphs and acc.device.type == "cuda" and acc.num_processes == 1 and cfg.mixed_precision == "no"
            and cfg.rdrop == 0  # a recorded graph's one set of buffers holds one reading before the backward
            and not cut and isinstance(model.encoder, TextEncoder) and model.encoder.mix is None)


def _train_epoch(run: _Run, loss_fn: Callable[[Any, dict[str, Tensor]], Tensor], stage: str, epoch: int,
                 callback: Callback | None) -> float:
    """One epoch's optimiser steps (autocast, backward, clipping, step, schedule); returns the summed training loss."""
    run.pmodel.train()
    encoder = run.acc.unwrap_model(run.pmodel).encoder
    if run.frozen:
        encoder.eval()  # dropout off: the states a cache holds
    elif isinstance(encoder, TextEncoder):
        encoder.eval_below()  # likewise under the trained top layers (stage1.train_top_layers)
    if callback:
        callback(Event(stage, "start", epoch, 0, run.steps_per_epoch, run.epochs))
    total, on_gpu, last = 0.0, None, float("nan")  # on_gpu: the losses summed on a GPU (reading one waits for it)
    for i, batch in enumerate(take_batches(run.loader, run.steps_per_epoch)):
        ts = time.perf_counter()
        if run.offsets is not None:  # each answer's question offset (cfg.question_effects), for the losses alone
            batch["question_offsets"] = run.offsets[batch["question"]]  # (B, K, M+1)
        with run.acc.autocast():
            loss = loss_fn(run.pmodel, batch)
        run.acc.backward(loss)
        if run.cfg.grad_clip > 0:
            run.acc.clip_grad_norm_(run.pmodel.parameters(), run.cfg.grad_clip)
        run.opt.step()
        run.sched.step()
        run.opt.zero_grad(set_to_none=True)
        if run.average is not None:
            run.average.update()
        value = loss.detach()
        if value.is_cuda:  # read every READ_EVERY steps (progress shows the last read), summed on the GPU
            on_gpu = value.double() if on_gpu is None else on_gpu + value
            last = float(value) if i % READ_EVERY == 0 else last
        else:
            total += float(value)
            last = float(value)
        run.step_time += time.perf_counter() - ts
        run.steps += 1
        if (i + 1) % 50 == 0:
            log.info("%s epoch %d step %d/%d: loss %.4f, %.3f s/step", stage, epoch, i + 1, run.steps_per_epoch,
                     (total + (float(on_gpu) if on_gpu is not None else 0.0)) / (i + 1), run.step_time / run.steps)
        if callback:
            callback(Event(stage, "step", epoch, i + 1, run.steps_per_epoch, run.epochs, last))
    return total + (float(on_gpu) if on_gpu is not None else 0.0)


def _evaluate(run: _Run, dev: EncodedItems, pad_id: int,
              dev_metrics: Callable[[Predictions, EncodedItems], dict[str, float]]) -> tuple[Model, dict[str, float]]:
    """The unwrapped model and its dev metrics."""
    unwrapped: Model = run.acc.unwrap_model(run.pmodel)
    return unwrapped, dev_metrics(predict(unwrapped, dev, pad_id, run.cfg.eval_batch_size, states=run.dev_states), dev)


@dataclass(frozen=True)
class _Objective:
    """What an encoder stage trains on and selects by: the training loss of a batch, the dev metrics of predictions,
    and the selection key of dev metrics (larger is better)."""

    loss: Callable[[Any, dict[str, Tensor]], Tensor]
    metrics: Callable[[Predictions, EncodedItems], dict[str, float]]
    select: Callable[[dict[str, float]], tuple[float, ...]]


def _fit_encoder(
    model: _M,
    train: EncodedItems,
    dev: EncodedItems,
    cfg: StageIConfig,
    pad_id: int,
    stage: str,
    objective: _Objective,
    callback: Callback | None,
    joint: JointConfig | None = None,
    start_candidate: bool = False,
    keep_last: bool = False,
    states: tuple[States, States] | None = None,
) -> StageResult:
    """The epoch loop shared by Stage I, the PLM baseline and the joint stage (Accelerate, warm-up, early
    stopping). ``objective``: the loss, the dev metrics and the key that selects an epoch; start_candidate: the state
    before the first epoch is a candidate too (epoch 0), so a stage that does not help on dev changes nothing;
    keep_last: every epoch counts as the best so far, so all of them run and the final state is kept (dev metrics are
    logged, not used). With a frozen encoder (cfg.encoder, "auto" decided here for train + dev) only the heads train and
    the encoder stays in eval mode (dropout off); ``states`` (train, dev) are its token states (:func:`encoder_states`),
    computed here when not given and cfg.cache_states is on."""
    run = _prepare(model, train, dev, cfg, pad_id, stage, joint, states)
    best, history = _Best(), []
    if start_candidate:
        unwrapped, metrics = _evaluate(run, dev, pad_id, objective.metrics)
        best.offer(0, metrics, objective.select(metrics), unwrapped)
        history.append({"epoch": 0, "train_loss": float("nan")} | metrics)
    t0 = time.perf_counter()
    for epoch in range(1, run.epochs + 1):
        total = _train_epoch(run, objective.loss, stage, epoch, callback)
        with run.average.applied() if run.average is not None else nullcontext():  # θ̄ evaluated and kept (cfg.ema)
            unwrapped, metrics = _evaluate(run, dev, pad_id, objective.metrics)
            best.offer(epoch, metrics, objective.select(metrics), unwrapped, keep_last)
        history.append({"epoch": epoch, "train_loss": total / max(1, run.steps_per_epoch)} | metrics)
        log.info("%s epoch %d: train loss %.4f, dev %s", stage, epoch, history[-1]["train_loss"],
                 format_metrics(metrics))
        if callback:
            callback(Event(stage, "epoch", epoch, run.steps_per_epoch, run.steps_per_epoch, run.epochs,
                           metrics=metrics))
        if best.bad >= run.cfg.patience:
            log.info("%s: early stop after epoch %d (best epoch %d)", stage, epoch, best.epoch)
            break
    model = run.acc.unwrap_model(run.pmodel)
    graphs = getattr(model.encoder, "graphs", None)
    if graphs is not None:  # the stage's graphs end with it
        log.info("%s: %d encoder input shapes recorded as CUDA graphs%s", stage, graphs.captures,
                 f", {len(graphs.failed)} run step by step ({next(iter(graphs.failed.values()))})"
                 if graphs.failed else "")
        model.encoder.graphs = None
    model.load_state_dict(best.state)
    model.to("cpu")
    run.acc.free_memory()
    seconds = time.perf_counter() - t0
    return StageResult(best.epoch, best.metrics, history, seconds, run.steps, run.step_time / max(1, run.steps))


# ---------------------------------------------------------------------------- Stage I
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

    weights = training_term_weights(cfg, train.concepts, train.grades, model.config.num_levels,
                                    model.config.num_grades)
    objective = _Objective(stage1_loss(cfg, weights), metrics, lambda m: selection_key(m, "c_f1", "c_acc"))
    return _fit_encoder(model, train, dev, cfg, pad_id, "stage1", objective, callback, states=states)


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
    weights = training_term_weights(cfg, train.concepts, train.grades, model.config.num_levels,
                                    model.config.num_grades)

    def select(m: dict[str, float]) -> tuple[float, ...]:
        return (float(m["c_acc"] >= floor - 1e-12),) + selection_key(m, "t_f1", "t_acc")

    return _fit_encoder(model, train, dev, cfg, pad_id, "joint",
                        _Objective(joint_loss(cfg, joint, stage2, weights), metrics, select),
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

    return _fit_encoder(model, train, dev, cfg, pad_id, "plm",
                        _Objective(loss, metrics, lambda m: selection_key(m, "t_f1", "t_acc")), callback, states=states)


def _nll(probs: NDArray[Any], labels: NDArray[Any]) -> float:
    """Mean negative log-likelihood of integer labels under probabilities (..., C)."""
    p = np.take_along_axis(probs, labels[..., None], axis=-1)[..., 0]
    return float(-np.log(np.clip(p, 1e-12, 1.0)).mean())

