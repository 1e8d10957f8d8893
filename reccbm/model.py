"""REC-CBM, in the paper's order: encoder E -> RACE -> OPCC -> LCEC -> grade head; last, the PLM baseline.

Equation numbers are those of rec-cbm-paper.tex as compiled (Eq. 1-6 are the preliminaries):
7 H = E(x); 8 query bank Q; 9 α_{k,t}; 10 h_k; 11 p̂_k; 12 L_con; 13 ĉ_k; 14 P_k; 15 L_rank^(k);
16 L_rank; 17 prior z ~ N(0, Ω⁻¹); 18 s̃_k | z_k ~ N(z_k, σ_k²); 19 Σ_post; 20 μ_post = A s̃;
21 Ω = LLᵀ + εI; 22 ŷ = W μ_post; 23 L_task; 24 L_den; 25 L_spa; 26 total loss; 27 Stage I; 28 Stage II.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reccbm.align import AlignFeatures
from reccbm.config import ModelConfig
from reccbm.decision import Decision
from reccbm.encoder import TextEncoder, default_backbone, masked_mean
from reccbm.errors import ReccbmError
from reccbm.lcec import LatentCorrection

if TYPE_CHECKING:
    from reccbm.onnx_encoder import OnnxEncoder

__all__ = [
    "PLM",
    "ConceptBottleneck",
    "LatentCorrection",
    "Model",
    "RecCBM",
    "RecCBMOutput",
    "TextEncoder",
    "build_model",
    "calibrated",
    "default_backbone",
    "expected_scores",
    "fit_level_bias",
    "fit_level_tilt",
    "masked_mean",
    "opcc_loss",
    "opcc_pairs",
    "orthogonal_queries",
    "random_conditioning",
    "random_interventions",
    "rarity_weights",
    "rubric_queries",
    "soft_concept_loss",
    "tilted",
    "token_states",
]


# ---------------------------------------------------------------------------- encoder E (Eq. 7): reccbm/encoder.py


# ---------------------------------------------------------------------------- RACE (Eq. 8-12)
def orthogonal_queries(K: int, d: int, generator: torch.Generator | None = None) -> Tensor:
    """Query bank Q = {q_k} ∈ R^{K×d} (Eq. 8), orthonormal rows: QR of a Gaussian matrix (sign-fixed).

    With K > d rows cannot all be orthogonal; blocks of d orthonormal rows are stacked instead.
    """
    blocks = []
    for start in range(0, K, d):
        k = min(d, K - start)
        G = torch.randn(d, k, generator=generator)  # (d, k)
        q, r = torch.linalg.qr(G)  # q: (d, k) orthonormal columns
        q = q * torch.sign(torch.diagonal(r)).clamp_min(0).mul(2).sub(1)  # unique QR: diag(r) > 0
        blocks.append(q.T)  # (k, d)
    return torch.cat(blocks, 0)  # (K, d)


class ConceptBottleneck(nn.Module):
    """RACE concept encoder + per-concept ordinal classifiers V_k.

    race=True:  α_{k,t} = softmax_t(q_kᵀ H_t / τ) over non-padding tokens (Eq. 9), h_k = Σ_t α_{k,t} H_t (Eq. 10).
    race=False: h_k = masked mean of H for every k (the vanilla CBM's single shared representation).
    Then p̂_k = softmax(V_k h_k + b_k) over the M + 1 levels (Eq. 11).

    ordinal=True (not in the paper; ModelConfig.concept_head "ordinal"): V_k is one direction v_k (K, 1, d) and level
    m's logit is m · v_kᵀh_k + b_{k,m}, the adjacent-categories logit model: log p̂_{k,m+1} / p̂_{k,m} =
    v_kᵀh_k + b_{k,m+1} − b_{k,m}, so the concept's reading is one score s_k = v_kᵀh_k that moves every answer up or
    down the levels together (its expected level rises with s_k), instead of M free directions.
    """

    levels: Tensor  # (M+1,) 0..M, the ordinal head's level numbers

    def __init__(self, K: int, num_levels: int, d: int, tau: float, race: bool, ordinal: bool = False) -> None:
        super().__init__()
        self.tau, self.race, self.ordinal = tau, race, ordinal
        self.Q = nn.Parameter(orthogonal_queries(K, d)) if race else None  # (K, d)
        self.V = nn.Parameter(torch.randn(K, 1 if ordinal else num_levels, d) * 0.02)  # (K, M+1, d); ordinal (K, 1, d)
        self.V_bias = nn.Parameter(torch.zeros(K, num_levels))  # (K, M+1)
        self.register_buffer("levels", torch.arange(num_levels, dtype=torch.float32), persistent=False)

    def forward(self, H: Tensor, mask: Tensor) -> tuple[Tensor, Tensor | None]:
        """Concept logits (B, K, M+1) and the RACE attention α (B, K, T), or None without RACE."""
        B, _, d = H.shape  # (B, T, d)
        K = self.V.shape[0]
        if self.Q is not None:
            scores = torch.einsum("btd,kd->bkt", H, self.Q.to(H.dtype)) / self.tau  # (B, K, T), Eq. 9
            scores = scores.masked_fill(~mask.bool().unsqueeze(1), torch.finfo(scores.dtype).min)
            alpha: Tensor | None = scores.softmax(dim=-1)  # (B, K, T)
            h = torch.einsum("bkt,btd->bkd", alpha, H)  # (B, K, d), Eq. 10
        else:
            alpha = None
            h = masked_mean(H, mask).unsqueeze(1).expand(B, K, d)  # (B, K, d), shared
        if self.ordinal:
            score = torch.einsum("bkd,kd->bk", h, self.V[:, 0].to(H.dtype))  # (B, K): s_k = v_kᵀ h_k
            logits = score.unsqueeze(-1) * self.levels.to(H.dtype) + self.V_bias  # (B, K, M+1): m s_k + b_{k,m}
        else:
            logits = torch.einsum("bkd,kmd->bkm", h, self.V.to(H.dtype)) + self.V_bias  # (B, K, M+1), Eq. 11
        return logits, alpha


def concept_loss(logits: Tensor, c: Tensor, reduction: str = "sum", weights: Tensor | None = None) -> Tensor:
    """L_con = Σ_k CE(p̂_k, c_k) (Eq. 12), averaged over the batch; reduction="mean" divides by K. ``weights`` (B, K):
    each (answer, concept) term's weight (reccbm.losses.TermWeights); None = 1 each (Eq. 12)."""
    B, K, L = logits.shape
    ce = F.cross_entropy(logits.reshape(B * K, L).float(), c.reshape(B * K), reduction="none").view(B, K)  # (B, K)
    if weights is not None:
        ce = ce * weights.to(ce.device, ce.dtype)
    per_item = ce.sum(1) if reduction == "sum" else ce.mean(1)  # (B,)
    return per_item.mean()


def soft_concept_loss(logits: Tensor, c: Tensor, soft: Tensor, w: float, reduction: str = "sum",
                      weights: Tensor | None = None) -> Tensor:
    """L_con against soft targets (not in the paper): q_k = (1 − w) · one-hot(c_k) + w · π_k, where π_k (M+1,) is the
    share of the reviewers who gave each level; −Σ_m q_{k,m} log p̂_{k,m} summed (or averaged) over concepts, batch
    mean. w = 0 is Eq. 12. logits (B, K, M+1), c (B, K), soft (B, K, M+1); ``weights`` as in :func:`concept_loss`."""
    logp = logits.float().log_softmax(-1)  # (B, K, M+1)
    target = (1 - w) * F.one_hot(c.long(), logits.shape[-1]).to(logp.dtype) + w * soft.to(logp.dtype)  # (B, K, M+1)
    ce = -(target * logp).sum(-1)  # (B, K)
    if weights is not None:
        ce = ce * weights.to(ce.device, ce.dtype)
    per_item = ce.sum(1) if reduction == "sum" else ce.mean(1)  # (B,)
    return per_item.mean()


def rarity_weights(labels: Tensor, num_classes: int, balance: float) -> Tensor:
    """Weights that weigh rare classes up (stage1.level_balance and stage1.grade_balance, not in the paper): for labels
    (N, ...) in 0..num_classes−1, one column each, w_{j,m} = n_{j,m}^(−balance), n_{j,m} the labels of column j at class
    m, scaled per column so that Σ_m n_{j,m} w_{j,m} = N (the labels' mean weight 1). A class no label has weighs 1.
    Returns (columns, num_classes); balance 0 gives all ones."""
    cols = labels.long().reshape(labels.shape[0], -1)  # (N, J)
    counts = F.one_hot(cols, num_classes).sum(0).double()  # (J, C): n_{j,m}
    raw = torch.where(counts > 0, counts.clamp_min(1).pow(-balance), torch.ones_like(counts))  # (J, C)
    scale = cols.shape[0] / (counts * raw).sum(1, keepdim=True).clamp_min(1e-12)  # (J, 1)
    return torch.where(counts > 0, raw * scale, torch.ones_like(counts)).float()


def random_conditioning(
    p_hat: Tensor, c: Tensor, p: float, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor | None]:
    """Random interventions while the grade head trains: each (item, concept) is chosen with probability p; its p̂_k
    becomes the one-hot of its label c ∈ 0..M. Returns (p̂ (B, K, M+1), the chosen mask (B, K), or None when p = 0),
    the mask for LCEC to condition on (:meth:`RecCBM.grade_from_concepts`). Trains the head to take an expert's
    correction as it is."""
    if p <= 0:
        return p_hat, None
    mask = torch.rand(c.shape, generator=generator, device=c.device) < p  # (B, K)
    onehot = F.one_hot(c.long(), p_hat.shape[-1]).to(p_hat.dtype)  # (B, K, M+1)
    return torch.where(mask.unsqueeze(-1), onehot, p_hat), mask


def random_interventions(p_hat: Tensor, c: Tensor, p: float, generator: torch.Generator | None = None) -> Tensor:
    """p̂ after :func:`random_conditioning`, without the mask: (B, K, M+1), (B, K) -> (B, K, M+1)."""
    return random_conditioning(p_hat, c, p, generator)[0]


def rubric_queries(E: Tensor, norm: float = 1.0) -> Tensor:
    """Rubric-aware query bank from the encoder's pooled embeddings e_k (K, d) of each concept's definition
    and level anchors: q_k = norm · (e_k − ē) / ‖e_k − ē‖. Removing the mean ē drops the direction every
    text shares (it would score all tokens alike); what is left points at what sets concept k apart."""
    Q = E - E.mean(0, keepdim=True)  # (K, d)
    out: Tensor = norm * Q / Q.norm(dim=1, keepdim=True).clamp_min(1e-8)  # (K, d)
    return out


def fit_level_bias(p_hat: Tensor, c: Tensor) -> Tensor:
    """Level-share calibration of Eq. 11 (not in the paper): the biases b (K, M+1), b_{k,0} = 0, that minimise the mean
    negative log-likelihood of the levels c (N, K) in 0..M under p̃_k = softmax(log p̂_k + b_k), for p̂ (N, K, M+1)
    computed on answers the encoder never trained on. Adding b_k to V_k's bias gives p̃_k for every later input (the
    softmax of Eq. 11 absorbs it). Fitted in float64 by L-BFGS; a level no answer has keeps a finite bias."""
    K, L = p_hat.shape[1], p_hat.shape[2]
    logp = p_hat.double().clamp_min(1e-8).log()  # (N, K, M+1)
    free = torch.zeros(K, L - 1, dtype=torch.float64, requires_grad=True)  # b_{k,1..M}
    opt = torch.optim.LBFGS([free], max_iter=100, line_search_fn="strong_wolfe")
    ridge = 1e-4  # keeps b finite where a level is absent from c

    def bias() -> Tensor:
        return torch.cat([torch.zeros(K, 1, dtype=free.dtype), free], 1)  # (K, M+1)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy((logp + bias()).reshape(-1, L), c.reshape(-1).long()) + ridge * free.pow(2).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    with torch.enable_grad():
        opt.step(closure)  # type: ignore[no-untyped-call]
    return bias().detach().to(p_hat.dtype)


def calibrated(p_hat: Tensor, b: Tensor) -> Tensor:
    """p̃_k = softmax(log p̂_k + b_k): what the bottleneck gives once b is added to its bias. (N, K, M+1) -> same."""
    return (p_hat.double().clamp_min(1e-8).log() + b.double()).softmax(-1).to(p_hat.dtype)


def fit_level_tilt(p_hat: Tensor, c: Tensor, strength: float = 2.0) -> Tensor:
    """A question's level shift (not in the paper), from a few of its answers whose levels an expert (or the LLM
    panel) gave: per concept, the δ_k that tilts every answer's p̂_k toward higher (δ > 0) or lower levels,
    p̃_{k,m} ∝ p̂_{k,m} e^{m δ_k} (:func:`tilted`), fitted by the tilted levels' likelihood of the given levels c with a
    Gaussian prior δ_k ~ N(0, 1 / strength):

        δ_k = argmin_δ  Σ_i [log Σ_m p̂_{ik,m} e^{m δ} − c_ik δ] + strength δ² / 2,

    convex in δ (its second derivative is Σ_i Var_i(m) + strength, the tilted levels' variances), solved by Newton's
    method. Few answers move δ little, many move it to where the tilted expected levels average the given ones: a
    new question read as a whole too high or too low is shifted by what its reviewed answers show.

    p_hat (N, K, M+1): the reader's level shares of the reviewed answers; c (N, K) their levels 0..M, negative where a
    concept was not given. Returns δ (K,), 0 for a concept no answer gives."""
    p = p_hat.double().clamp_min(1e-12)
    given = c >= 0  # (N, K)
    target = c.double().clamp_min(0) * given  # (N, K)
    m = torch.arange(p.shape[-1], dtype=torch.float64)  # (M+1,)
    delta = torch.zeros(p.shape[1], dtype=torch.float64)  # (K,)
    for _ in range(50):
        q = tilted(p, delta)  # (N, K, M+1)
        mean = (q * m).sum(-1)  # (N, K): E_δ[m]
        var = (q * m.pow(2)).sum(-1) - mean.pow(2)  # (N, K): Var_δ[m]
        grad = ((mean - target) * given).sum(0) + strength * delta  # (K,)
        hess = (var * given).sum(0) + strength  # (K,) > 0
        step = (grad / hess.clamp_min(1e-9)).clamp(-2.0, 2.0)
        delta = delta - step
        if float(step.abs().max()) < 1e-10:
            break
    return delta.to(p_hat.dtype)


def tilted(p_hat: Tensor, delta: Tensor) -> Tensor:
    """p̃_{k,m} = p̂_{k,m} e^{m δ_k} / Σ_j p̂_{k,j} e^{j δ_k}: the level shares shifted by δ (K,) or (N, K) per item."""
    m = torch.arange(p_hat.shape[-1], dtype=torch.float64)  # (M+1,)
    logits = p_hat.double().clamp_min(1e-12).log() + delta.double().unsqueeze(-1) * m  # (N, K, M+1)
    return logits.softmax(-1).to(p_hat.dtype)


# ---------------------------------------------------------------------------- OPCC (Eq. 13-16)
def expected_scores(p_hat: Tensor) -> Tensor:
    """ĉ_k = Σ_m m · p̂_{k,m} ∈ [0, M] (Eq. 13): (B, K, M+1) -> (B, K)."""
    m = torch.arange(p_hat.shape[-1], dtype=p_hat.dtype, device=p_hat.device)  # (M+1,)
    return (p_hat * m).sum(-1)


def opcc_pairs(c: Tensor) -> Tensor:
    """P_k = {(i, j) : c_k^(i) > c_k^(j)} (Eq. 14) as a mask (B, B, K): [i, j, k] is True for a pair."""
    return c.unsqueeze(1) > c.unsqueeze(0)  # (B, 1, K) > (1, B, K) -> (B, B, K)


def opcc_loss(c_hat: Tensor, c: Tensor) -> Tensor:
    """L_rank (Eq. 16): mean over the K' concepts with |P_k| > 0 of
    L_rank^(k) = -1/|P_k| Σ_{(i,j) ∈ P_k} log σ(ĉ_k^(i) - ĉ_k^(j)) (Eq. 15). Zero when K' = 0."""
    pairs = opcc_pairs(c).to(c_hat.dtype)  # (B, B, K)
    diff = c_hat.unsqueeze(1) - c_hat.unsqueeze(0)  # (B, B, K): ĉ^(i) - ĉ^(j)
    n_pairs = pairs.sum((0, 1))  # (K,) = |P_k|
    loss_k = -(F.logsigmoid(diff) * pairs).sum((0, 1)) / n_pairs.clamp_min(1)  # (K,), Eq. 15
    has_pairs = n_pairs > 0  # K' = has_pairs.sum()
    if c_hat.is_cuda:  # the same mean without asking the GPU which concepts have pairs (a wait, and no CUDA graph)
        return (loss_k * has_pairs).sum() / has_pairs.sum().clamp_min(1)
    if not bool(has_pairs.any()):
        return c_hat.sum() * 0.0
    return loss_k[has_pairs].mean()  # Eq. 16


# ---------------------------------------------------------------------------- LCEC (Eq. 17-25): reccbm/lcec.py


# ---------------------------------------------------------------------------- the whole model
def token_states(encoder: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """H = E(x) (B, T, d) (Eq. 7); a batch that carries ``states`` (computed once: a frozen encoder's H, or the output
    of the layers that stay pretrained under ``stage1.train_top_layers``) is not re-encoded below where they were
    cut."""
    if "states" in batch:
        upper = getattr(encoder, "upper", None)
        return upper(batch["states"], batch["attention_mask"]) if upper else batch["states"]  # (B, T, d)
    H: Tensor = encoder(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))  # (B, T, d)
    return H


@dataclass
class RecCBMOutput:
    """Everything a forward pass produces; concept fields are None for the PLM baseline."""

    grade_logits: Tensor  # (B, S+1): ŷ = W μ_post + b (Eq. 22)
    concept_logits: Tensor | None = None  # (B, K, M+1): V_k h_k (Eq. 11)
    p_hat: Tensor | None = None  # (B, K, M+1): p̂_k
    c_hat: Tensor | None = None  # (B, K): ĉ_k ∈ [0, M] (Eq. 13)
    s_tilde: Tensor | None = None  # (B, K): s̃ = ĉ / M
    mu_post: Tensor | None = None  # (B, K): A s̃ with LCEC, s̃ without
    alpha: Tensor | None = None  # (B, K, T): RACE attention (Eq. 9), None without RACE


class RecCBM(nn.Module):
    """E -> bottleneck {p̂_k} -> (LCEC) -> grade head W (and U).

    Grade head (ModelConfig.head): "scalar" is Eq. 22, ŷ = W μ_post + b. "level" adds one weight per level:
    ŷ_y = b_y + Σ_k (W_{y,k} μ_post,k + Σ_m U_{y,k,m} p̂_{k,m}); concept k's contribution is its bracket.
    """

    rubric_prefix: Tensor | None  # (R,) buffers of ModelConfig.rubric_input
    rubric_span: Tensor  # (K, R)

    def __init__(self, config: ModelConfig, encoder: TextEncoder) -> None:
        super().__init__()
        if config.plm:
            raise ReccbmError("a config with plm=True is the PLM baseline: build it with reccbm.PLM (or build_model)")
        self.config = config
        self.encoder: TextEncoder | OnnxEncoder = encoder  # OnnxEncoder: inference only
        K, d = config.num_concepts, encoder.hidden_size
        if config.num_levels < 2:
            raise ReccbmError("a concept needs at least two levels (M >= 1)")
        if config.layer_mix and isinstance(encoder, TextEncoder):  # H from every layer (ModelConfig.layer_mix)
            encoder.use_layer_mix()
        self.bottleneck = ConceptBottleneck(K, config.num_levels, d, config.tau, config.race,
                                            ordinal=config.concept_head == "ordinal")
        # question-independent comparison of answer and reference beside V_k h_k (not in the paper; reccbm/align.py)
        self.align = AlignFeatures(K, config.num_levels) if config.align else None
        self.lcec = LatentCorrection(K, config.eps) if config.lcec else None
        # rubric-conditioned reading (not in the paper; ModelConfig.rubric_input): the rubric's token ids that go in
        # the encoder's input after [CLS], the (K, R) mean over each concept's span (its separator left out), and the
        # one classifier every concept's span read goes through, zero at start
        self.rubric_head: nn.Linear | None = None
        self.register_buffer("rubric_prefix", None)
        if config.rubric_ids:
            b = config.rubric_spans
            span = torch.zeros(K, len(config.rubric_ids))
            for k in range(K):
                span[k, b[k]:max(b[k] + 1, b[k + 1] - 1)] = 1.0
            self.register_buffer("rubric_prefix", torch.tensor(config.rubric_ids, dtype=torch.long), persistent=False)
            self.register_buffer("rubric_span", span / span.sum(1, keepdim=True), persistent=False)
            self.rubric_head = nn.Linear(d, config.num_levels, bias=False)
            nn.init.zeros_(self.rubric_head.weight)
        self.W = nn.Linear(K, config.num_grades)  # (S+1, K) task classifier W with bias (Eq. 22)
        # (S+1, K, M+1) level weights U of the "level" head, zero at init (= the scalar head)
        self.U = nn.Parameter(torch.zeros(config.num_grades, K, config.num_levels)) if config.head == "level" else None
        self.decision: Decision | None = None  # the decision rule fitted after training (stage2.decision); None: argmax

    # Parameter groups of Algorithm 1.
    def stage1_parameters(self) -> list[nn.Parameter]:
        """(E, Q, {V_k}) (and the alignment weights A, G, the rubric reader's shared classifier)."""
        align = list(self.align.parameters()) if self.align is not None else []
        rubric = list(self.rubric_head.parameters()) if self.rubric_head is not None else []
        return list(self.encoder.parameters()) + list(self.bottleneck.parameters()) + align + rubric

    def stage2_parameters(self) -> list[nn.Parameter]:
        """(L, η, W); only W without LCEC."""
        head = list(self.W.parameters()) + ([self.U] if self.U is not None else [])
        return head + (list(self.lcec.parameters()) if self.lcec is not None else [])

    def joint_parameters(self) -> list[nn.Parameter]:
        """Everything: (E, Q, {V_k}) and (L, η, W, U) — the joint stage."""
        return self.stage1_parameters() + self.stage2_parameters()

    def token_states(self, batch: dict[str, Tensor]) -> Tensor:
        """H = E(x) (B, T, d) of the input's own tokens, see :func:`token_states` and :meth:`read`."""
        return self.read(batch)[0]

    def read(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """H (B, T, d) and, with the rubric in the input (ModelConfig.rubric_input), each concept's span read (B, K, d).

        The encoder reads [CLS] rubric x[1:] — the R rubric tokens after [CLS] — so every token of the answer and the
        reference attends to the concepts' texts and each concept's text to them; H keeps the input's own positions
        (the rubric's states cut out), so RACE, the alignment and explanations see what they see without it."""
        if self.rubric_prefix is None:
            return token_states(self.encoder, batch), None
        if "states" in batch:
            raise ReccbmError("model.rubric_input reads the rubric with each input: it cannot use a frozen encoder's "
                              "cached states; use stage1.cache_states=false or stage1.encoder=train")
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")
        B, R = ids.shape[0], self.rubric_prefix.numel()
        pre = self.rubric_prefix.to(ids.device).unsqueeze(0).expand(B, R)  # (B, R)

        def around(x: Tensor, fill: Tensor) -> Tensor:
            return torch.cat([x[:, :1], fill.to(x.dtype), x[:, 1:]], 1)  # (B, R + T)

        H2 = self.encoder(around(ids, pre), around(mask, torch.ones_like(pre)),
                          around(types, torch.zeros_like(pre)) if types is not None else None)  # (B, R + T, d)
        H = torch.cat([H2[:, :1], H2[:, 1 + R:]], 1)  # (B, T, d)
        r = torch.einsum("kr,brd->bkd", self.rubric_span.to(H2.dtype), H2[:, 1:1 + R])  # (B, K, d)
        return H, r

    def concepts(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
        """Stage I forward: concept logits (B, K, M+1) and RACE attention."""
        H, r = self.read(batch)  # (B, T, d), (B, K, d) or None
        logits, alpha = self.bottleneck(H, batch["attention_mask"])  # V_k h_k + b_k (Eq. 11)
        if self.align is not None:  # + G_k [f; Σ_t α_{k,t} a2r_t]: answer against reference (reccbm/align.py)
            logits = logits + self.align(H, batch["input_ids"], batch["attention_mask"], alpha,
                                         batch.get("overlap")).to(logits.dtype)
        if self.rubric_head is not None and r is not None:  # + R r_k: concept k's own text, read with the answer
            logits = logits + self.rubric_head(r).to(logits.dtype)
        return logits, alpha

    def grade_from_concepts(self, p_hat: Tensor, observed: Tensor | None = None) -> RecCBMOutput:
        """Stage II forward on (cached) p̂: s̃ = ĉ/M, μ_post = A s̃ (or s̃), ŷ = W μ_post + b.

        observed (B, K): concepts whose p̂_k is an expert's one-hot level. With ``config.condition`` LCEC conditions
        on them (they are known exactly, the others move through Ω; :meth:`LatentCorrection.forward`); without it
        (the paper) the one-hot passes through A like any output."""
        c_hat = expected_scores(p_hat)  # (B, K)
        s_tilde = c_hat / self.config.M  # (B, K) ∈ [0, 1]
        cond = observed if self.config.condition else None
        mu_post = self.lcec(s_tilde, cond) if self.lcec is not None else s_tilde  # (B, K)
        logits = self.W(mu_post)  # (B, S+1), Eq. 22
        if self.U is not None:
            logits = logits + torch.einsum("bkm,ykm->by", p_hat.to(self.U.dtype), self.U)  # (B, S+1) level terms
        return RecCBMOutput(logits, p_hat=p_hat, c_hat=c_hat, s_tilde=s_tilde, mu_post=mu_post)

    def contributions(self, p_hat: Tensor, mu_post: Tensor, grade: Tensor) -> tuple[Tensor, Tensor]:
        """Per-concept contributions (B, K) to the logit of `grade` (B,) and the bias (B,): they sum to it.

        Level weights are centred over levels (Σ_m p̂_{k,m} = 1 moves each mean into the bias), so a
        contribution says how much concept k's level moves the grade, not an arbitrary offset."""
        Wy = self.W.weight[grade]  # (B, K)
        contrib = Wy * mu_post  # (B, K)
        bias = self.W.bias[grade]  # (B,)
        if self.U is not None:
            Uy = self.U[grade]  # (B, K, M+1)
            mean = Uy.mean(-1)  # (B, K)
            contrib = contrib + ((Uy - mean.unsqueeze(-1)) * p_hat).sum(-1)  # (B, K)
            bias = bias + mean.sum(-1)  # (B,)
        return contrib, bias

    def forward(self, batch: dict[str, Tensor]) -> RecCBMOutput:
        logits, alpha = self.concepts(batch)
        out = self.grade_from_concepts(logits.float().softmax(-1))  # p̂_k (Eq. 11)
        out.concept_logits, out.alpha = logits, alpha
        return out

    def lcec_losses(self, out: RecCBMOutput, c: Tensor) -> tuple[Tensor, Tensor]:
        """L_den = ‖μ_post − c/M‖² / K (Eq. 24, batch mean) and L_spa (Eq. 25); zeros without LCEC."""
        assert out.mu_post is not None
        zero = out.grade_logits.sum() * 0.0
        if self.lcec is None:
            return zero, zero
        den = ((out.mu_post - c.to(out.mu_post.dtype) / self.config.M) ** 2).mean(1).mean()
        return den, self.lcec.sparsity()


# ---------------------------------------------------------------------------- the PLM baseline
class PLM(nn.Module):
    """The black-box baseline (ModelConfig.plm): E -> masked-mean pooled H -> linear grade head, no concepts.

    It trains in one stage (:func:`reccbm.train_plm`); its outputs carry grade logits only."""

    def __init__(self, config: ModelConfig, encoder: TextEncoder) -> None:
        super().__init__()
        if not config.plm:
            raise ReccbmError("reccbm.PLM is the baseline of a config with plm=True; REC-CBM is reccbm.RecCBM")
        self.config = config
        self.encoder: TextEncoder | OnnxEncoder = encoder  # OnnxEncoder: inference only
        if config.layer_mix and isinstance(encoder, TextEncoder):  # the same H as REC-CBM's (ModelConfig.layer_mix)
            encoder.use_layer_mix()
        self.plm_head = nn.Linear(encoder.hidden_size, config.num_grades)  # (S+1, d): pooled H -> grade logits
        self.decision: Decision | None = None  # the decision rule fitted after training (stage2.decision); None: argmax

    def stage1_parameters(self) -> list[nn.Parameter]:
        """(E, head): everything, trained in the one stage."""
        return list(self.encoder.parameters()) + list(self.plm_head.parameters())

    def stage2_parameters(self) -> list[nn.Parameter]:
        """None: the baseline has no Stage II."""
        return []

    def joint_parameters(self) -> list[nn.Parameter]:
        return self.stage1_parameters()

    def token_states(self, batch: dict[str, Tensor]) -> Tensor:
        """H = E(x) (B, T, d), see :func:`token_states`."""
        return token_states(self.encoder, batch)

    def forward(self, batch: dict[str, Tensor]) -> RecCBMOutput:
        H = self.token_states(batch)  # (B, T, d)
        return RecCBMOutput(self.plm_head(masked_mean(H, batch["attention_mask"])))  # (B, S+1)


Model = RecCBM | PLM  # either network a config describes: REC-CBM (and its ablations) or the PLM baseline


def build_model(config: ModelConfig, encoder: TextEncoder) -> Model:
    """The network ``config`` describes: :class:`PLM` when ``config.plm``, else :class:`RecCBM`."""
    return PLM(config, encoder) if config.plm else RecCBM(config, encoder)
