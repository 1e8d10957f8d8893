"""Question-independent reading: the answer compared with its reference answer inside the concept heads.

Not in the paper. RACE reads every concept from the token states of one sequence x = (q, r, a) (reccbm/data.py:
``[CLS] question [SEP] reference [SEP] answer [SEP]``); nothing in it asks how much of the reference the answer says,
so what a fine-tuned encoder learns about a concept is tied to the training questions' words. This module computes,
from the same token states H, features that mean the same on every question and feeds them to each concept's
classifier beside its RACE vector (``ModelConfig.align``):

* soft token alignment (Sultan et al. 2016, monolingual alignment for short-answer grading, here on contextual states):
  with Ĥ = H / ‖H‖ and S_{t,r} = Ĥ_t · Ĥ_r for answer tokens t and reference tokens r,
  a2r_t = max_r S_{t,r} (how well each answer token is matched), r2a_r = max_t S_{t,r} (how well each reference token
  is said); pooled: mean a2r (precision), mean r2a (recall), the share of reference tokens with r2a above 0.5 / 0.7 /
  0.85 (coverage, soft: a sigmoid of width 0.05), and the cosine of the two mean-pooled states;
* the reference-overlap probe (lab/transfer.py) on token ids: share of the reference's distinct tokens in the
  answer and of the answer's in the reference, log lengths of both, log of their ratio;
* per concept k, the alignment of the tokens RACE reads it from: Σ_t α_{k,t} a2r_t (a2r = 0 outside the answer).

    f = [features; GELU(A f + a)]                (B, F + F_h), shared by the concepts
    logits_k += G_k [f; Σ_t α_{k,t} a2r_t]       (B, M+1) beside V_k h_k (Eq. 11); G = 0 at init (= RACE alone)

The features are functions of H, so the encoder is trained through them too.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reccbm.errors import ReccbmError

__all__ = ["N_FEATURES", "AlignFeatures", "segment_masks", "separator_id"]

COVERAGE_AT = (0.5, 0.7, 0.85)  # cosine thresholds of the soft coverage features
COVERAGE_WIDTH = 0.05  # width of the sigmoid that makes "r2a above the threshold" differentiable
N_FEATURES = 4 + len(COVERAGE_AT) + 5  # precision, recall, mean-state cosine, exact-id share; coverage; probe
HIDDEN = 16  # F_h: the shared non-linear combinations of the features


def separator_id(tokenizer: Any) -> int:
    """The id of the separator reccbm/data.py puts between question, reference and answer (sep, else eos)."""
    tok = tokenizer.sep_token or tokenizer.eos_token
    if tok is None:
        raise ReccbmError("the alignment features need a tokenizer with a sep or eos token")
    return int(tokenizer.convert_tokens_to_ids(tok))


def segment_masks(input_ids: Tensor, attention_mask: Tensor, sep_id: int) -> tuple[Tensor, Tensor]:
    """(reference mask, answer mask), each (B, T) bool, of x = (q, r, a) as reccbm/data.py builds it.

    The tokens between the first and the second separator are the reference (the first segment is ``q [SEP] r``);
    the answer is what follows the last separator of the first segment: every token after the second separator for
    a pair backbone (BERT: ``[CLS] q [SEP] r [SEP] a [SEP]``; RoBERTa's doubled separator is skipped as a separator),
    with the separators themselves never in either mask. An input with fewer than two separators before its answer
    (no reference) has an empty reference mask."""
    real = attention_mask.bool()  # (B, T)
    is_sep = (input_ids == sep_id) & real  # (B, T)
    seg = torch.cumsum(is_sep.long(), dim=1) - is_sep.long()  # (B, T): separators seen before each token
    n_sep = is_sep.sum(1, keepdim=True)  # (B, 1)
    content = real & ~is_sep  # (B, T)
    # the first segment is q [SEP] r; its end is the second separator (RoBERTa: [EOS] [EOS] between the segments adds
    # an empty segment, which holds no content token and so needs no rule)
    ref = content & (seg == 1) & (n_sep >= 3)  # (B, T)
    ans = content & (seg >= 2) & (n_sep >= 3)  # (B, T)
    # without a reference (n_sep < 3) the answer is what follows the first separator
    ans = ans | (content & (seg >= 1) & (n_sep < 3))
    return ref, ans


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over the last dim where mask: (B, T), (B, T) -> (B,)."""
    w = mask.to(x.dtype)
    return (x * w).sum(-1) / w.sum(-1).clamp_min(1.0)


@functools.lru_cache(maxsize=4096)
def _log1p_quarter(n: int) -> float:
    """log(1 + n) / 4 in float32, as a float (lengths repeat: computed once each)."""
    return float(torch.log1p(torch.tensor(float(n))) / 4)


@functools.lru_cache(maxsize=65536)
def _log_ratio_half(n_a: int, n_r: int) -> float:
    """log((1 + n_a) / (1 + n_r)) / 2 in float32, as a float."""
    return float(torch.log(torch.tensor((1.0 + n_a) / (1.0 + n_r))) / 2)


class AlignFeatures(nn.Module):
    """The features above and the per-concept weights G that add them to the concept logits."""

    sep_id: Tensor  # () long buffer: the separator's token id, -1 until set_sep

    def __init__(self, K: int, num_levels: int, sep_id: int = -1) -> None:
        super().__init__()
        self.register_buffer("sep_id", torch.tensor(sep_id, dtype=torch.long))  # set from the tokenizer (set_sep)
        self.A = nn.Linear(N_FEATURES, HIDDEN)  # the shared non-linear part
        self.G = nn.Parameter(torch.zeros(K, num_levels, N_FEATURES + HIDDEN + 1))  # (K, M+1, F + F_h + 1)
        self._sep: int | None = None  # the buffer's value as a Python int: reading a GPU buffer waits for the GPU

    def set_sep(self, sep_id: int) -> None:
        """The tokenizer's separator id (the one between question, reference and answer)."""
        self.sep_id.fill_(int(sep_id))
        self._sep = int(sep_id)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._sep = None  # a loaded state brings its own separator
        super()._load_from_state_dict(*args, **kwargs)

    def separator(self) -> int:
        """The separator id (read from the buffer once, then kept)."""
        if self._sep is None:
            self._sep = int(self.sep_id)
        return self._sep

    def features(self, H: Tensor, input_ids: Tensor, attention_mask: Tensor,
                 overlap: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(f (B, N_FEATURES), a2r (B, T)): the pooled features and each answer token's best match (0 elsewhere).
        ``overlap``: the inputs' token-id overlap (:meth:`overlap_features`) when the batch carries it, computed on the
        host from its ids (on a GPU, reading the ids back waits for it)."""
        sep = self.separator()
        if sep < 0:
            raise ReccbmError("AlignFeatures needs the tokenizer's separator id (set_sep) before use")
        ref, ans = segment_masks(input_ids, attention_mask, sep)  # (B, T) each
        Hn = F.normalize(H.float(), dim=-1)  # (B, T, d)
        S = torch.einsum("btd,bsd->bts", Hn, Hn)  # (B, T, T): S[b, t, s] = cos(H_t, H_s)
        low = torch.finfo(S.dtype).min
        pair = ans.unsqueeze(2) & ref.unsqueeze(1)  # (B, T, T): answer token t, reference token s
        S = S.masked_fill(~pair, low)
        has_ref, has_ans = ref.any(1), ans.any(1)  # (B,)
        a2r = S.max(2).values  # (B, T): answer token -> its best reference token
        r2a = S.max(1).values  # (B, T): reference token -> its best answer token
        a2r = torch.where(ans & has_ref.unsqueeze(1), a2r, torch.zeros_like(a2r))
        r2a = torch.where(ref & has_ans.unsqueeze(1), r2a, torch.zeros_like(r2a))
        precision = _masked_mean(a2r, ans)  # (B,)
        recall = _masked_mean(r2a, ref)  # (B,)
        coverage = [_masked_mean(torch.sigmoid((r2a - th) / COVERAGE_WIDTH) * ref, ref) for th in COVERAGE_AT]
        mean_a = (Hn * ans.unsqueeze(-1)).sum(1) / ans.sum(1, keepdim=True).clamp_min(1)  # (B, d)
        mean_r = (Hn * ref.unsqueeze(-1)).sum(1) / ref.sum(1, keepdim=True).clamp_min(1)  # (B, d)
        cos = F.cosine_similarity(mean_a, mean_r, dim=-1) * (has_ref & has_ans)  # (B,)
        probe = self._overlap(input_ids, ref, ans) if overlap is None else overlap.to(H.device)  # (B, 6)
        f = torch.stack([precision, recall, cos, *coverage], dim=1)  # (B, 3 + len(COVERAGE_AT))
        return torch.cat([f, probe.to(f.dtype)], dim=1), a2r  # (B, N_FEATURES), (B, T)

    def overlap_features(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The token-id overlap features (B, 6) of a batch (:meth:`_overlap`), from its ids where they are (the CPU
        copy a training batch keeps: no wait for a GPU)."""
        ref, ans = segment_masks(input_ids, attention_mask, self.separator())
        return self._overlap(input_ids, ref, ans)

    @staticmethod
    def _overlap(input_ids: Tensor, ref: Tensor, ans: Tensor) -> Tensor:
        """Token-id overlap (no gradient: the ids are the text): (B, 6) = [share of answer tokens whose id occurs in the
        reference, share of the reference's distinct ids in the answer, share of the answer's distinct ids in the
        reference, log(1 + answer length) / 4, log(1 + reference length) / 4, log((1 + answer) / (1 + reference)) /
        2]."""
        rows = []
        # one copy of the ids and masks as Python lists (from a GPU: one wait, not two per answer)
        for ids, r_mask, a_mask in zip(input_ids.tolist(), ref.tolist(), ans.tolist()):
            a_ids = [i for i, m in zip(ids, a_mask) if m]
            r_ids = [i for i, m in zip(ids, r_mask) if m]
            sa, sr = set(a_ids), set(r_ids)
            shared = len(sa & sr)
            n_a, n_r = len(a_ids), len(r_ids)
            rows.append([sum(i in sr for i in a_ids) / max(1, n_a), shared / max(1, len(sr)), shared / max(1, len(sa)),
                         _log1p_quarter(n_a), _log1p_quarter(n_r), _log_ratio_half(n_a, n_r)])
        return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), 6).to(input_ids.device)

    def forward(self, H: Tensor, input_ids: Tensor, attention_mask: Tensor, alpha: Tensor | None,
                overlap: Tensor | None = None) -> Tensor:
        """The concept-logit terms (B, K, M+1) to add to V_k h_k; ``alpha`` (B, K, T) is RACE's attention (None: the
        answer mean, for every concept); ``overlap`` as in :meth:`features`."""
        f, a2r = self.features(H, input_ids, attention_mask, overlap)  # (B, F), (B, T)
        f = f.to(self.G.dtype)
        z = torch.cat([f, F.gelu(self.A(f))], dim=1)  # (B, F + F_h)
        K = self.G.shape[0]
        if alpha is None:
            _, ans = segment_masks(input_ids, attention_mask, self.separator())
            per_k = _masked_mean(a2r, ans).unsqueeze(1).expand(-1, K)  # (B, K)
        else:
            per_k = torch.einsum("bkt,bt->bk", alpha.to(a2r.dtype), a2r)  # (B, K): Σ_t α_{k,t} a2r_t
        x = torch.cat([z.unsqueeze(1).expand(-1, K, -1), per_k.unsqueeze(-1).to(z.dtype)], dim=-1)  # (B, K, F+F_h+1)
        return torch.einsum("bkf,kmf->bkm", x, self.G)  # (B, K, M+1)
