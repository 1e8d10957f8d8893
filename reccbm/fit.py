"""The training recipe: :func:`fit` runs REC-CBM's stages in order and returns the fitted model.

    Stage I (Eq. 27)      encoder E, queries Q, concept classifiers {V_k} on λ_c L_con + λ_r L_rank
    Stage II (Eq. 28)     LCEC (L, η) and the grade head (W, U) on the frozen Stage I outputs p̂
    joint stage           (``joint.epochs > 0``; not in the paper) every parameter on the joint loss through the
                          soft bottleneck, starting from the Stage II head
    cross-fitted Stage II (``stage2.crossfit = k ≥ 2``; not in the paper) LCEC and the head refitted on outputs for
                          the training answers from k models that each never trained on them
    LCEC on new answers   (``stage2.lcec_fit = "dev"``; not in the paper) LCEC's (L, η) fitted on the dev answers'
                          outputs, the errors the encoder makes on answers it never trained on; then the head is
                          refitted on the training outputs through that fixed LCEC
    level calibration     (``stage2.calibrate``; not in the paper) before that, each concept's level biases fitted
                          on the dev outputs and added to V_k's bias, so that p̂ gives each level as often as the
                          answers have it (:func:`reccbm.model.fit_level_bias`)

The paper's recipe (Algorithm 1) is Stage I then Stage II; the PLM baseline is one fine-tuning stage. With
``stage1.encoder = "frozen"`` (or "auto" below ``stage1.frozen_below`` labelled answers) no stage updates the
pretrained encoder: its token states for the training and dev answers are computed once here and every stage and
every cross-fitting model reuses them (one pretrained encoder gives them all). The
stages themselves are in :mod:`reccbm.train` (Stage I, the joint stage, the PLM) and :mod:`reccbm.stage2` (Stage II,
the LCEC fit), prediction in :mod:`reccbm.inference`; this module owns their order, the seed and what is reported.
Every stage and prediction computes on one device, ``stage1.device`` (:mod:`reccbm.device`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from reccbm.align import separator_id
from reccbm.config import JointConfig, ModelConfig, StageIConfig, StageIIConfig
from reccbm.data import EncodedItems, check_labels
from reccbm.decision import Decision, cost_matrix, fit_calibrated_bayes, fit_cutpoints, pass_index
from reccbm.device import resolve_device
from reccbm.encoder import MIX_AND_CUT, states_layer
from reccbm.errors import ReccbmError
from reccbm.inference import States, cache_concepts, encoder_states, predict
from reccbm.metrics import concept_metrics, task_metrics
from reccbm.model import (
    PLM,
    Model,
    RecCBM,
    TextEncoder,
    calibrated,
    default_backbone,
    expected_scores,
    fit_level_bias,
)
from reccbm.stage2 import fit_lcec, train_grader
from reccbm.stages import Callback, StageResult, set_seed
from reccbm.train import init_rubric_queries, train_concepts, train_joint, train_plm

__all__ = ["Fitted", "Recipe", "deal_parts", "fit"]

log = logging.getLogger("reccbm")


@dataclass(frozen=True)
class Recipe:
    """Every stage's configuration: what :func:`fit` runs (``model.plm``: the black-box baseline)."""

    model: ModelConfig
    stage1: StageIConfig = field(default_factory=StageIConfig)  # Stage I (and the PLM's fine-tuning)
    joint: JointConfig = field(default_factory=JointConfig)  # the joint stage; epochs 0 = off (the paper)
    stage2: StageIIConfig = field(default_factory=StageIIConfig)  # Stage II, and cross-fitting

    def __post_init__(self) -> None:
        if self.model.layer_mix and self.stage1.train_top_layers > 0:
            raise ValueError(MIX_AND_CUT)

    def calibration_skipped(self, n_dev: int) -> str | None:
        """Why ``stage2.calibrate`` is not applied to a fit with ``n_dev`` dev answers (None: it is, or it is off)."""
        s2 = self.stage2
        if not s2.calibrate or self.model.plm:
            return None
        if s2.lcec_fit not in ("dev", "moments") or not self.model.lcec:
            return ("the head is refitted after the encoder's stages only with LCEC fitted on the dev outputs "
                    "(stage2.lcec_fit dev or moments)")
        if s2.crossfit:
            return "with cross-fitting the head reads other models' outputs"
        if n_dev < s2.calibrate_min_dev:
            return f"{n_dev} dev answers, fewer than stage2.calibrate_min_dev = {s2.calibrate_min_dev}"
        return None

    def scaled(self, s: int) -> Recipe:
        """The recipe on batches ``s`` times as large, by the linear scaling rule (Goyal et al. 2017): each step sees s
        times the answers, so every learning rate is s times as large (Stage I's and its frozen encoder's, the joint
        stage's encoder and head rates, Stage II's), the moving average's decay is ema^s (an average over as many
        answers), each batch takes s times as many examples across questions and, with stage1.padding on, padded
        answers (as many per answer), and the fewest steps are s times fewer; epochs, warm-up shares and every weight of
        the losses stay. s = 1 returns the recipe.
        ``stage1.gpu_batch_scale`` asks for this on a GPU (:meth:`for_device`)."""
        if s == 1:
            return self
        s1, j, s2 = self.stage1, self.joint, self.stage2
        stage1 = replace(s1, batch_size=s1.batch_size * s, lr=s1.lr * s, frozen_lr=s1.frozen_lr * s,
                         ema=s1.ema ** s, contrast_per_batch=s1.contrast_per_batch * s,
                         contrast_question=s1.contrast_question * s,
                         padding_per_batch=s1.padding_per_batch * (s if s1.padding > 0 else 1),
                         min_steps=-(-s1.min_steps // s))
        joint = replace(j, lr=j.lr * s, head_lr=j.head_lr * s, min_steps=-(-j.min_steps // s))
        stage2 = replace(s2, batch_size=s2.batch_size * s, lr=s2.lr * s)
        return replace(self, stage1=stage1, joint=joint, stage2=stage2)

    def for_device(self, device: torch.device | str | None = None) -> Recipe:
        """The recipe that runs on ``device`` (None: ``stage1.device`` resolved): on a CUDA device, :meth:`scaled` by
        ``stage1.gpu_batch_scale`` with the scale then marked as applied (1); elsewhere the recipe as it is."""
        dev = resolve_device(self.stage1.device if device is None else device)
        s = self.stage1.gpu_batch_scale
        if dev.type != "cuda" or s == 1:
            return self
        out = self.scaled(s)
        return replace(out, stage1=replace(out.stage1, gpu_batch_scale=1))

    def seeded(self, seed: int) -> Recipe:
        """The same recipe with every stage seeded by ``seed``."""
        return replace(self, stage1=replace(self.stage1, seed=seed), stage2=replace(self.stage2, seed=seed))


@dataclass
class Fitted:
    """What :func:`fit` returns: the model and what each stage did."""

    model: Model  # RecCBM, or PLM for the baseline
    stage1: StageResult  # Stage I, or the PLM's fine-tuning
    joint: StageResult | None  # None: no joint stage
    # the last Stage II: the head returned, or, when a joint stage ran after it and nothing refitted the head, the
    # head the joint stage started from (None for the PLM)
    stage2: StageResult | None
    # dev metrics of the returned model (T-Acc, T-F1, … and C-Acc, C-F1): seeds are chosen on these
    dev: dict[str, float]
    steps: int  # optimiser steps of every stage that shaped the returned model
    seconds: float  # wall time of the whole recipe, cross-fitting included
    crossfit_parts: list[list[int]] | None = None  # positions in train: part j's Stage II inputs came from model j
    crossfit_steps: int = 0  # optimiser steps of the cross-fitting models (not part of the returned model)
    # LCEC fitted on the dev outputs (stage2.lcec_fit = "dev"); then stage2 is the head refit
    lcec: StageResult | None = None
    head_init: StageResult | None = None  # the Stage II head the joint stage started from, when stage2 is a later refit
    encoder: str = "train"  # what the encoder did: "train" (fine-tuned) or "frozen" (stage1.encoder, "auto" decided)
    states_seconds: float = 0.0  # wall time of computing a frozen encoder's token states once (0 without)

    def as_dict(self) -> dict[str, Any]:
        """The history without the model (JSON-ready)."""
        return {"stage1": self.stage1.as_dict(), "joint": self.joint.as_dict() if self.joint else None,
                "stage2": self.stage2.as_dict() if self.stage2 else None, "dev": self.dev, "steps": self.steps,
                "seconds": self.seconds, "crossfit_parts": self.crossfit_parts, "crossfit_steps": self.crossfit_steps,
                "lcec": self.lcec.as_dict() if self.lcec else None,
                "head_init": self.head_init.as_dict() if self.head_init else None, "encoder": self.encoder,
                "states_seconds": self.states_seconds}


def deal_parts(grades: Any, k: int, seed: int, salt: int) -> list[list[int]]:
    """Positions of items in k grade-stratified, seeded parts: each grade's positions shuffled and dealt in turn,
    the next grade starting where the last one stopped (the dealing of k-fold evaluation)."""
    rng = np.random.default_rng([seed, salt])
    grades = np.asarray(grades)
    parts: list[list[int]] = [[] for _ in range(k)]
    nxt = 0
    for g in np.unique(grades):
        members = np.flatnonzero(grades == g)
        for i in rng.permutation(len(members)):
            parts[nxt % k].append(int(members[i]))
            nxt += 1
    return [sorted(p) for p in parts]


def _new_encoder(cfg: ModelConfig, seed: int) -> TextEncoder:
    """The pretrained encoder of a new model, everything seeded first (the heads are initialised after it)."""
    set_seed(seed)
    return TextEncoder.from_pretrained(cfg.backbone or default_backbone())


@dataclass(frozen=True)
class _States:
    """A frozen encoder's token states (:func:`reccbm.inference.encoder_states`) for the training and dev answers."""

    train: States
    dev: States

    def subset(self, idx: list[int]) -> _States:
        """The states of ``train.subset(idx)`` (a cross-fitting model's training part) and the same dev."""
        return _States([self.train[i] for i in idx], self.dev)

    @property
    def pair(self) -> tuple[States, States]:
        return self.train, self.dev


def _stage2(model: RecCBM, train: EncodedItems, dev: EncodedItems, r: Recipe, pad: int, callback: Callback | None,
            p_fit: torch.Tensor | None = None, states: _States | None = None) -> StageResult:
    """Stage II on the frozen model's outputs for ``train`` (cached once), or on ``p_fit`` given for them (the
    cross-fitted outputs); selected on the model's dev outputs."""
    assert train.concepts is not None and train.grades is not None and dev.grades is not None
    dev_ = _device(r)
    if p_fit is None:
        p_fit = cache_concepts(model, train, pad, r.stage1.eval_batch_size, states.train if states else None, dev_,
                               r.stage1.mixed_precision)
    p_dev = cache_concepts(model, dev, pad, r.stage1.eval_batch_size, states.dev if states else None, dev_,
                           r.stage1.mixed_precision)
    return train_grader(model, p_fit, torch.tensor(train.concepts), torch.tensor(train.grades), p_dev,
                        torch.tensor(dev.grades), r.stage2, callback, device=_k_dim_device(r))


def _device(r: Recipe) -> torch.device:
    """The device the encoder's stages and prediction compute on (``stage1.device``: auto, cpu or cuda)."""
    return resolve_device(r.stage1.device)


def _k_dim_device(r: Recipe) -> torch.device:
    """The device of the K-dimensional stages over cached p̂, Stage II and the LCEC fit (``stage2.device``: "graph" is
    the encoder's device where that is a CUDA GPU, where the steps run as CUDA graphs, else the CPU)."""
    if r.stage2.device == "cpu":
        return torch.device("cpu")
    dev = _device(r)
    return dev if r.stage2.device == "same" or dev.type == "cuda" else torch.device("cpu")


def _concept_model(train: EncodedItems, dev: EncodedItems, r: Recipe, tokenizer: Any, texts: list[str] | None,
                   callback: Callback | None, head: bool, states: _States | None = None,
                   ) -> tuple[RecCBM, StageResult, StageResult | None, StageResult | None]:
    """A fresh model through Stage I, a Stage II head (when ``head`` or the joint stage starts from one) and the joint
    stage: (model, Stage I, Stage II, joint). ``states``: a frozen encoder's token states for train and dev."""
    pad = tokenizer.pad_token_id
    cfg = r.model
    if cfg.rubric_input > 0 and not cfg.rubric_ids:  # the rubric in the encoder's input: its tokens, once per run
        if texts is None:
            raise ReccbmError("model.rubric_input needs the rubric's concept texts")
        ids, spans = rubric_tokens(tokenizer, texts, cfg.rubric_input)
        cfg = replace(cfg, rubric_ids=ids, rubric_spans=spans)
    encoder = _new_encoder(cfg, r.stage1.seed)
    positions = int(getattr(encoder.hf_config, "max_position_embeddings", 0) or 0)
    if cfg.rubric_ids and positions and len(cfg.rubric_ids) + cfg.max_len > positions:
        raise ReccbmError(f"model.rubric_input: {len(cfg.rubric_ids)} rubric tokens + max_len {cfg.max_len} exceed the "
                          f"backbone's {positions} positions; lower model.rubric_input or --max-len")
    model = RecCBM(cfg, encoder)
    if model.align is not None:  # the alignment features find the reference and the answer by the separator
        model.align.set_sep(separator_id(tokenizer))
    if r.model.race and r.model.query_init == "rubric":
        if texts is None:
            raise ReccbmError("query_init 'rubric' needs the rubric's concept texts")
        init_rubric_queries(model, tokenizer, texts)
    pair = states.pair if states else None
    r1 = train_concepts(model, train, dev, r.stage1, pad, callback, states=pair)
    r2 = rj = None
    if head or r.joint.epochs > 0:
        r2 = _stage2(model, train, dev, r, pad, callback, states=states)
    if r.joint.epochs > 0:
        rj = train_joint(model, train, dev, r.stage1, r.joint, r.stage2, pad, r1.best["c_acc"], callback, states=pair)
    return model, r1, r2, rj


def _cross_fitted_outputs(train: EncodedItems, dev: EncodedItems, r: Recipe, tokenizer: Any, texts: list[str] | None,
                          callback: Callback | None, states: _States | None = None,
                          ) -> tuple[torch.Tensor, list[list[int]], int]:
    """p̂ (N, K, M+1) for every training item from a model (Stage I + joint stage) trained without its part."""
    k = r.stage2.crossfit
    assert train.grades is not None
    parts = deal_parts(train.grades, k, r.stage1.seed, 11)
    p_oof: torch.Tensor | None = None
    steps = 0
    for j, part in enumerate(parts):
        rest = sorted(set(range(len(train))) - set(part))
        cb = None if callback is None else (lambda ev, j=j: callback(replace(ev, part=f"cross-fit {j + 1}/{k}")))
        inner, r1, _, rj = _concept_model(train.subset(rest), dev, r, tokenizer, texts, cb, head=False,
                                          states=states.subset(rest) if states else None)
        steps += r1.steps + (rj.steps if rj else 0)
        p = cache_concepts(inner, train.subset(part), tokenizer.pad_token_id, r.stage1.eval_batch_size,
                           states.subset(part).train if states else None, _device(r), r.stage1.mixed_precision)
        if p_oof is None:
            p_oof = torch.empty((len(train), *p.shape[1:]), dtype=p.dtype)
        p_oof[part] = p
    assert p_oof is not None
    return p_oof, parts, steps


def dev_metrics(model: Model, dev: EncodedItems, pad: int, batch_size: int = 64,
                device: torch.device | None = None) -> dict[str, float]:
    """Grade metrics (and concept metrics, with a bottleneck) of ``model`` on ``dev`` (computed on ``device``)."""
    p = predict(model, dev, pad, batch_size, device=device)
    assert dev.grades is not None
    out = task_metrics(dev.grades, p.grades)
    if p.p_hat is not None and dev.concepts is not None:
        out |= concept_metrics(dev.concepts, p.levels)
    return out


def fit(
    train: EncodedItems,
    dev: EncodedItems,
    recipe: Recipe,
    tokenizer: Any,
    *,
    concept_texts: list[str] | None = None,
    callback: Callable[[Any], None] | None = None,
) -> Fitted:
    """Train a model by ``recipe`` on ``train`` (token ids, 0-based concept levels and grades), selecting on ``dev``.

    PLM: one fine-tuning stage. REC-CBM and its ablations: Stage I; then, with a joint stage, a Stage II head to
    start from and the joint stage; with cross-fitting, Stage II refitted on out-of-fold outputs; otherwise Stage II
    on the training outputs. ``concept_texts`` (one per concept) initialise the queries when
    ``model.query_init == "rubric"``. Progress goes to ``callback`` as :class:`reccbm.Event`; seed everything with
    :meth:`Recipe.seeded`. ``recipe.stage1.encoder`` "auto" is decided here for len(train) + len(dev) answers; soft
    targets (``stage1.soft_targets``) need ``train.soft``, and without it the adjudicated levels alone are the targets
    (what soft targets of one reviewer would be)."""
    t0 = time.perf_counter()
    _check_labels(train, dev, recipe.model)
    pad = tokenizer.pad_token_id
    recipe = replace(recipe, stage1=recipe.stage1.resolved(len(train) + len(dev))).for_device()
    if recipe.stage1.soft_targets and train.soft is None:  # no reviewers' levels kept: the adjudicated level alone
        log.info("stage1.soft_targets %g: the training answers keep no reviewers' levels; trained on the adjudicated "
                 "levels alone", recipe.stage1.soft_targets)
        recipe = replace(recipe, stage1=replace(recipe.stage1, soft_targets=0.0))
    encoder = recipe.stage1.encoder
    device = _device(recipe)
    # (the rubric in the input is read with every input: no states to cache)
    cut = encoder == "frozen" or (encoder == "train" and recipe.stage1.train_top_layers > 0)
    states = (_frozen_states(train, dev, recipe, pad)
              if cut and recipe.stage1.cache_states and not recipe.model.rubric_input else None)
    states_seconds = time.perf_counter() - t0 if states else 0.0
    if recipe.model.plm:  # the baseline: one fine-tuning stage
        plm = PLM(recipe.model, _new_encoder(recipe.model, recipe.stage1.seed))
        r1 = train_plm(plm, train, dev, recipe.stage1, pad, callback, states=states.pair if states else None)
        plm.decision = fit_decision(plm, dev, recipe, pad)
        return Fitted(plm, r1, None, None, dev_metrics(plm, dev, pad, recipe.stage1.eval_batch_size, device), r1.steps,
                      time.perf_counter() - t0, encoder=encoder, states_seconds=states_seconds)
    p_oof, parts, cf_steps = None, None, 0
    if recipe.stage2.crossfit >= 2:  # first the k models that give every training answer an unseen-answer output
        p_oof, parts, cf_steps = _cross_fitted_outputs(train, dev, recipe, tokenizer, concept_texts, callback, states)
    model, r1, r2, rj = _concept_model(train, dev, recipe, tokenizer, concept_texts, callback, head=p_oof is None,
                                       states=states)
    steps = r1.steps + (rj.steps if rj else 0) + (r2.steps if r2 else 0)
    head_init = None
    if p_oof is not None:
        head_init, r2 = r2, _stage2(model, train, dev, recipe, pad, callback, p_fit=p_oof, states=states)
        steps += r2.steps
    assert r2 is not None
    rl = None
    calibrate = recipe.stage2.calibrate and (why := recipe.calibration_skipped(len(dev))) is None
    if recipe.stage2.calibrate and not calibrate:
        log.info("stage2.calibrate: not applied (%s)", why)
    # LCEC learns the errors of new answers...
    if recipe.stage2.lcec_fit in ("dev", "moments") and model.lcec is not None:
        assert dev.concepts is not None and train.concepts is not None and train.grades is not None
        assert dev.grades is not None
        p_dev = cache_concepts(model, dev, pad, recipe.stage1.eval_batch_size, states.dev if states else None, device,
                               recipe.stage1.mixed_precision)
        if calibrate:
            p_dev = _calibrate_levels(model, p_dev, dev)  # the level shares of answers the encoder never trained on
        if recipe.stage2.lcec_fit == "dev":
            rl = fit_lcec(model, p_dev, torch.tensor(dev.concepts), recipe.stage2, callback,
                          device=_k_dim_device(recipe))
        else:
            rl = _lcec_moments(model, train, dev, p_dev, recipe.stage2.lcec_ridge)
        p_train = p_oof if p_oof is not None else cache_concepts(model, train, pad, recipe.stage1.eval_batch_size,
                                                                 states.train if states else None, device,
                                                                 recipe.stage1.mixed_precision)
        head_init = head_init or r2
        # ... and the head reads through it
        r2 = train_grader(model, p_train, torch.tensor(train.concepts), torch.tensor(train.grades), p_dev,
                          torch.tensor(dev.grades), recipe.stage2, callback, head_only=True,
                          device=_k_dim_device(recipe))
        steps += rl.steps + r2.steps
    model.decision = fit_decision(model, dev, recipe, pad)
    return Fitted(model, r1, rj, r2, dev_metrics(model, dev, pad, recipe.stage1.eval_batch_size, device), steps,
                  time.perf_counter() - t0, parts, cf_steps, rl, head_init, encoder, states_seconds)


def fit_decision(model: Model, dev: EncodedItems, recipe: Recipe, pad: int) -> Decision | None:
    """The decision rule of ``recipe.stage2.decision`` fitted on the dev answers' grade distributions (None: argmax,
    or no dev answers with grades to fit on)."""
    s2 = recipe.stage2
    if s2.decision == "argmax" or dev.grades is None or len(dev) == 0:
        return None
    t0 = time.perf_counter()
    model.decision = None
    probs = predict(model, dev, pad, recipe.stage1.eval_batch_size, device=_device(recipe)).grade_probs
    n = probs.shape[1]
    cost = cost_matrix(n, pass_index(n, s2.decision_pass), s2.decision_fail_passed, s2.decision_pass_failed)
    rule: Decision
    if s2.decision == "bayes":
        rule = fit_calibrated_bayes(probs, np.asarray(dev.grades), cost)
        what = f"temperature {rule.temperature:.2f}, mark biases {', '.join(f'{b:+.2f}' for b in rule.bias)}"
    else:
        rule = fit_cutpoints(probs, np.asarray(dev.grades), cost)
        what = f"cutpoints {', '.join(f'{t:.2f}' for t in rule.t)} on the expected mark"
    log.info("decision (%s): %s, fitted on %d dev answers in %.2f s", s2.decision, what, len(dev),
             time.perf_counter() - t0)
    return rule


def _calibrate_levels(model: RecCBM, p_dev: torch.Tensor, dev: EncodedItems) -> torch.Tensor:
    """Level-share calibration (``stage2.calibrate``): b_k fitted on the dev outputs and added to V_k's bias
    (:func:`reccbm.model.fit_level_bias`); returns the dev outputs as the calibrated model gives them."""
    assert dev.concepts is not None
    t0, M = time.perf_counter(), model.config.M
    c = torch.tensor(dev.concepts)
    b = fit_level_bias(p_dev, c)  # (K, M+1)
    with torch.no_grad():
        model.bottleneck.V_bias.add_(b.to(model.bottleneck.V_bias))
    p_cal = calibrated(p_dev, b)
    log.info("levels calibrated on %d dev answers in %.2f s: top level given %.3f -> %.3f of the time (the labels: "
             "%.3f)", len(c), time.perf_counter() - t0, float(p_dev[..., M].mean()), float(p_cal[..., M].mean()),
             float((c == M).double().mean()))
    return p_cal


def _lcec_moments(model: RecCBM, train: EncodedItems, dev: EncodedItems, p_dev: torch.Tensor,
                  ridge: float) -> StageResult:
    """LCEC's (μ₀, Ω, σ²) by their moments (:meth:`reccbm.lcec.LatentCorrection.set_from_moments`): the prior from
    the training answers' levels, the noise from the dev outputs' errors. No optimiser steps."""
    assert model.lcec is not None and train.concepts is not None and dev.concepts is not None
    t0, M = time.perf_counter(), model.config.M
    s_dev = expected_scores(p_dev) / M
    model.lcec.set_from_moments(torch.tensor(train.concepts) / M, s_dev, torch.tensor(dev.concepts) / M, ridge)
    seconds = time.perf_counter() - t0
    log.info("lcec: set from moments (ridge %g) in %.2f s", ridge, seconds)
    return StageResult(0, {}, [], seconds, 0, 0.0)


def _check_labels(train: EncodedItems, dev: EncodedItems, cfg: ModelConfig) -> None:
    """Refuse a grade outside 0..S or (with a bottleneck) a concept level outside 0..M before any stage runs, naming
    the split, row and field, instead of failing inside a loss."""
    for name, items in (("train", train), ("dev", dev)):
        if items.grades is not None:
            check_labels(items.grades, 0, cfg.num_grades - 1, ["grade"], where=name)
        if items.concepts is not None and not cfg.plm:
            if items.concepts.shape[1] != cfg.num_concepts:
                raise ReccbmError(f"{name}: {items.concepts.shape[1]} concept columns for a model of "
                                  f"{cfg.num_concepts} concepts")
            check_labels(items.concepts, 0, cfg.M, [f"concept {k}" for k in range(items.concepts.shape[1])],
                         where=name)


def rubric_tokens(tokenizer: Any, texts: list[str], n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The rubric's tokens for ModelConfig.rubric_input: each concept's text (at most ``n`` of its tokens) followed by
    the separator, in rubric order, and the K + 1 boundaries of the concepts' spans (each span ends with its
    separator)."""
    sep = separator_id(tokenizer)
    ids: list[int] = []
    bounds = [0]
    for text in texts:
        ids += list(tokenizer(text, add_special_tokens=False)["input_ids"][:n]) + [sep]
        bounds.append(len(ids))
    return tuple(ids), tuple(bounds)


def _frozen_states(train: EncodedItems, dev: EncodedItems, r: Recipe, pad: int) -> _States:
    """The pretrained encoder's token states for train and dev, once: a frozen encoder is the same in every stage and
    every model of the recipe (cross-fitting included), so they all reuse these. With ``stage1.train_top_layers`` = n
    they are the output of the L − n layers that stay pretrained, on which the trained layers above run."""
    encoder = TextEncoder.from_pretrained(r.model.backbone or default_backbone())
    if r.model.layer_mix:  # the frozen mix (even at start) the model's own encoder gives: H as the model reads it
        encoder.use_layer_mix()
    if r.stage1.encoder == "train":  # cut under the trained top layers, if any (a frozen encoder's states are H)
        encoder.states_layer = states_layer(encoder, r.stage1.train_top_layers)
    dev_, precision = _device(r), r.stage1.mixed_precision
    return _States(encoder_states(encoder, train, pad, r.stage1.eval_batch_size, dev_, precision),
                   encoder_states(encoder, dev, pad, r.stage1.eval_batch_size, dev_, precision))
