"""The encoder stages' training losses, as functions of a model and a batch: Stage I's (Eq. 27: λ_c L_con + λ_r L_rank,
with R-Drop, the examples across questions and the padded answers where the recipe asks for them) and the joint
stage's (Eq. 27 + Eq. 28 through the soft bottleneck). :mod:`reccbm.train` runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from reccbm.batches import HostCopy
from reccbm.config import JointConfig, StageIConfig, StageIIConfig
from reccbm.contrast import contrast_batch, contrast_loss
from reccbm.errors import ReccbmError
from reccbm.model import (
    RecCBM,
    RecCBMOutput,
    concept_loss,
    expected_scores,
    opcc_loss,
    random_conditioning,
    rarity_weights,
    soft_concept_loss,
)
from reccbm.padding import padding_batch, padding_loss
from reccbm.views import view_inputs

__all__ = [
    "TermWeights",
    "concept_target_loss",
    "contrast_term",
    "first_rows",
    "host_inputs",
    "joint_loss",
    "padding_term",
    "rdrop_divergence",
    "rdrop_rows",
    "read_extra",
    "stage1_loss",
    "training_term_weights",
]


@dataclass(frozen=True)
class TermWeights:
    """The weights of L_con's (answer, concept) terms (``stage1.level_balance``, ``stage1.grade_balance``): by the
    concept's level, ``levels`` (K, M+1), and by the answer's grade, ``grades`` (S+1,); None = 1 each."""

    levels: Tensor | None = None
    grades: Tensor | None = None

    def of(self, batch: dict[str, Tensor]) -> Tensor | None:
        """The batch's term weights (B, K): levels[k, c_{b,k}] · grades[y_b]."""
        c = batch["concepts"].long()  # (B, K)
        w = None
        if self.levels is not None:
            W = self.levels.to(c.device)  # (K, M+1)
            w = W.gather(1, c.T).T  # (B, K): W[k, c_{b,k}]
        if self.grades is not None:
            if "grades" not in batch:
                raise ReccbmError("stage1.grade_balance needs each training answer's grade")
            v = self.grades.to(c.device)[batch["grades"].long()].unsqueeze(1)  # (B, 1)
            w = v.expand(c.shape) if w is None else w * v
        return w


def training_term_weights(cfg: StageIConfig, concepts: Any, grades: Any, num_levels: int,
                          num_grades: int) -> TermWeights | None:
    """L_con's term weights from the training levels (N, K) and grades (N,) for ``cfg.level_balance`` or
    ``cfg.grade_balance`` > 0 (:func:`reccbm.model.rarity_weights`); None when both are 0 (every term alike, Eq. 12)."""
    levels = (rarity_weights(torch.as_tensor(concepts), num_levels, cfg.level_balance)
              if cfg.level_balance > 0 and concepts is not None else None)
    by_grade = (rarity_weights(torch.as_tensor(grades), num_grades, cfg.grade_balance)[0]
                if cfg.grade_balance > 0 and grades is not None else None)
    return None if levels is None and by_grade is None else TermWeights(levels, by_grade)


def concept_target_loss(logits: Tensor, batch: dict[str, Tensor], cfg: StageIConfig,
                        weights: TermWeights | None = None) -> Tensor:
    """L_con (Eq. 12) on the adjudicated levels, or with ``cfg.soft_targets`` > 0 on the soft targets (the
    reviewers' level shares mixed in, :func:`reccbm.model.soft_concept_loss`); ``weights``: each term's weight
    (:func:`training_term_weights`), None = 1 each."""
    w = weights.of(batch) if weights is not None else None
    if cfg.soft_targets > 0:
        if "concept_soft" not in batch:
            raise ReccbmError("stage1.soft_targets needs each answer's reviewers' levels (EncodedItems.soft)")
        return soft_concept_loss(logits, batch["concepts"], batch["concept_soft"], cfg.soft_targets, cfg.concept_loss,
                                 w)
    return concept_loss(logits, batch["concepts"], cfg.concept_loss, w)


def stage1_loss(cfg: StageIConfig, weights: TermWeights | None = None) -> Callable[[RecCBM, dict[str, Tensor]], Tensor]:
    """λ_c L_con + λ_r L_rank (Eq. 27), with the extra terms ``cfg`` asks for; ``weights``: L_con's by concept and
    level and grade (:func:`training_term_weights`)."""
    def read(model: RecCBM, batch: dict[str, Tensor]) -> tuple[RecCBMOutput, Tensor, Tensor]:
        """One reading: the output, its concept logits (B, K, M+1) and ĉ (B, K), with the question offsets added."""
        out = model(batch)
        assert out.concept_logits is not None and out.c_hat is not None
        logits, c_hat = out.concept_logits, out.c_hat
        if "question_offsets" in batch:  # + the answer's question offset (cfg.question_effects)
            logits = logits + batch["question_offsets"].to(logits.dtype)
            c_hat = expected_scores(logits.float().softmax(-1))
        return out, logits, c_hat

    def terms(logits: Tensor, c_hat: Tensor, batch: dict[str, Tensor]) -> Tensor:
        total = cfg.lambda_c * concept_target_loss(logits, batch, cfg, weights)  # Eq. 12
        if cfg.lambda_r > 0:
            total = total + cfg.lambda_r * opcc_loss(c_hat, batch["concepts"])  # Eq. 16
        return total

    def loss(model: RecCBM, batch: dict[str, Tensor]) -> Tensor:
        out, logits, c_hat = read(model, batch)
        total = terms(logits, c_hat, batch)
        if cfg.rdrop > 0:  # a second reading under another dropout mask (R-Drop): the mean of both, + their divergence
            B = logits.shape[0]
            n = rdrop_rows(cfg.rdrop_share, B)  # the first n answers are read again
            second = view_inputs(batch) or batch  # the answers' edited copies where the run made them (rdrop_views)
            _, logits2, c_hat2 = read(model, second if n == B else first_rows(second, n, B))
            if n < B:  # the others keep their one reading in both terms
                logits2, c_hat2 = torch.cat([logits2, logits[n:]]), torch.cat([c_hat2, c_hat[n:]])
            total = (0.5 * (total + terms(logits2, c_hat2, batch))
                     + cfg.rdrop * rdrop_divergence(logits[:n], logits2[:n]))
        if cfg.contrast > 0:  # supervision across questions (reccbm/contrast.py)
            total = total + cfg.contrast * contrast_term(model, batch, cfg, total)
        if cfg.padding > 0:  # text beside the point reads no higher (reccbm/padding.py); out.c_hat: the answers' own
            assert out.c_hat is not None
            total = total + cfg.padding * padding_term(model, batch, cfg, out.c_hat, total)
        return total  # Eq. 27

    return loss


def rdrop_rows(share: float, B: int) -> int:
    """How many of a batch's B answers R-Drop reads a second time: ceil(share × B) (StageIConfig.rdrop_share), the
    product rounded first so that a share such as 0.14 of 50 gives 7, not the 8 its binary fraction would."""
    return math.ceil(round(share * B, 9))


def first_rows(batch: dict[str, Any], n: int, B: int) -> dict[str, Any]:
    """The batch's first ``n`` answers: every tensor with the batch's B rows cut to its first n, the rest left out
    (the loader's host copy, :class:`HostCopy`, is the whole batch's)."""
    return {k: v[:n] for k, v in batch.items() if isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == B}


def rdrop_divergence(a: Tensor, b: Tensor) -> Tensor:
    """½ (KL(p‖q) + KL(q‖p)) between two readings' level distributions p = softmax(a), q = softmax(b), (B, K, M+1)
    logits: summed over the K concepts, as L_con (Eq. 12), and averaged over the batch (StageIConfig.rdrop)."""
    la, lb = F.log_softmax(a.float(), -1), F.log_softmax(b.float(), -1)  # (B, K, M+1)
    kl = (la.exp() * (la - lb) + lb.exp() * (lb - la)).sum(-1)  # (B, K): KL(p‖q) + KL(q‖p)
    return 0.5 * kl.sum(1).mean()


def host_inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The batch's inputs as the loader made them on the CPU (:class:`HostCopy`), for the extra inputs a step builds
    from them without waiting for a GPU; the batch itself where it carries none."""
    host = batch.get("host")
    return host.batch if isinstance(host, HostCopy) else batch


def read_extra(model: RecCBM, extra: dict[str, Tensor], like: dict[str, Tensor]) -> Tensor:
    """Concept logits (N, K, M+1) of extra inputs built from a batch (``input_ids``, ``attention_mask``, and
    ``token_type_ids`` where the backbone has them), with their alignment features, on ``like``'s device."""
    inputs: dict[str, Tensor] = {k: extra[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in extra}
    if model.align is not None:
        inputs["overlap"] = model.align.overlap_features(inputs["input_ids"], inputs["attention_mask"])
    device = like["input_ids"].device
    logits, _ = model.concepts({k: v.to(device) for k, v in inputs.items()})
    return logits


def contrast_term(model: RecCBM, batch: dict[str, Tensor], cfg: StageIConfig, like: Tensor) -> Tensor:
    """The cross-question loss on the inputs :func:`reccbm.contrast.contrast_batch` builds from ``batch``; 0 when
    none."""
    unwrapped: RecCBM = getattr(model, "module", model)  # under Accelerate's wrapper (multi-process)
    K, M = unwrapped.config.num_concepts, unwrapped.config.M
    # padding is masked, so its id does not matter: 0
    extra = contrast_batch(host_inputs(batch), M, K, cfg.contrast_top, cfg.contrast_bottom, cfg.contrast_per_batch, 0,
                           cfg.contrast_question)
    if extra is None:
        return like * 0.0
    logits = read_extra(unwrapped, extra, batch)  # (N, K, M+1)
    return contrast_loss(logits, extra["contrast"].to(logits.device))


def padding_term(model: RecCBM, batch: dict[str, Tensor], cfg: StageIConfig, c_hat: Tensor, like: Tensor) -> Tensor:
    """L_pad on the padded inputs :func:`reccbm.padding.padding_batch` builds from ``batch`` against ``c_hat`` (B, K),
    the batch's own expected levels; 0 when none can be built."""
    unwrapped: RecCBM = getattr(model, "module", model)
    built = padding_batch(host_inputs(batch), cfg.padding_per_batch, cfg.padding_tokens, unwrapped.config.max_len, 0)
    if built is None:
        return like * 0.0
    extra, source = built
    logits = read_extra(unwrapped, extra, batch)  # (N, K, M+1)
    return padding_loss(expected_scores(logits.float().softmax(-1)), c_hat[source.to(logits.device)])


def joint_loss(cfg: StageIConfig, joint: JointConfig, s2: StageIIConfig,
               weights: TermWeights | None = None) -> Callable[[RecCBM, dict[str, Tensor]], Tensor]:
    """λ_c L_con + λ_r L_rank (Eq. 27) + λ_t L_task (+ λ_d L_den + λ_s L_spa) (Eq. 28), one backward pass; ``weights``
    as in :func:`stage1_loss`."""
    def loss(model: RecCBM, batch: dict[str, Tensor]) -> Tensor:
        c = batch["concepts"]  # (B, K)
        logits, _ = model.concepts(batch)  # (B, K, M+1)
        p_hat = logits.float().softmax(-1)  # (B, K, M+1), Eq. 11
        read, p_read = logits, p_hat
        # the concept losses read + the question offset; the grade what a new answer gets
        if "question_offsets" in batch:
            read = logits + batch["question_offsets"].to(logits.dtype)
            p_read = read.float().softmax(-1)
        total = cfg.lambda_c * concept_target_loss(read, batch, cfg, weights)  # Eq. 12
        if cfg.lambda_r > 0:
            total = total + cfg.lambda_r * opcc_loss(expected_scores(p_read), c)  # Eq. 16
        out = model.grade_from_concepts(*random_conditioning(p_hat, c, joint.intervention_p))
        total = total + joint.lambda_t * F.cross_entropy(out.grade_logits.float(), batch["grades"])  # Eq. 23
        if model.lcec is not None:
            den, spa = model.lcec_losses(out, c)  # Eq. 24, 25
            total = total + s2.lambda_d * den + s2.lambda_s * spa
        return total

    return loss
