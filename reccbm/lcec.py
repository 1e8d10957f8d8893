"""LCEC, latent concept error correction (Eq. 17-25 of rec-cbm-paper.tex), and conditioning on an expert's levels.

The paper's Gaussian model: a latent true concept vector z ~ N(μ₀, Ω⁻¹) (Eq. 17, μ₀ = 0 in the paper) is measured
by the concept head as s̃ | z ~ N(z, D), D = diag(σ²) (Eq. 18). The posterior mean is μ_post = μ₀ + A (s̃ − μ₀)
with A = Σ_post D⁻¹ = (I + DΩ)⁻¹ (Eq. 19-20).

An expert's level is not one more noisy score: it is an observation of z_k itself. Conditioning on it sets that
concept's noise to zero: with D_i = diag(σ²) except d_k = 0 for the concepts observed on item i,

    μ_post,i = μ₀ + (I + D_i Ω)⁻¹ (x_i − μ₀) = μ₀ + C (C + D_i)⁻¹ (x_i − μ₀),   C = Ω⁻¹,

where x_i is s̃_i with the observed entries replaced by the expert's c_k / M. Row k of (I + D_i Ω) is e_kᵀ for an
observed k, so μ_post,k = c_k / M exactly, and every other concept moves by the Gaussian conditional through Ω
(its partial correlations). Without observations this is Eq. 20.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from reccbm.errors import ReccbmError

__all__ = ["LatentCorrection"]


class LatentCorrection(nn.Module):
    """Latent concept error correction: posterior mean of z | s̃ under z ~ N(0, Ω⁻¹) (Eq. 17) and
    s̃ | z ~ N(z, D), D = diag(σ²) (Eq. 18):

        Σ_post = (Ω + D⁻¹)⁻¹ (Eq. 19),  μ_post = Σ_post D⁻¹ s̃ = A s̃ (Eq. 20),
        Ω = LLᵀ + εI (Eq. 21),  σ_k² = exp(η_k).

    Numerics: with D^{½} = diag(σ), Ω + D⁻¹ = D^{-½} (I + D^{½} Ω D^{½}) D^{-½}, so
    A = D^{½} B⁻¹ D^{-½} with B = I + D^{½} Ω D^{½}. B's eigenvalues are >= 1 for any σ², so its
    Cholesky factorisation never fails, whether σ² is tiny (A -> I) or huge (A -> 0). The K×K
    algebra runs in float64 and η is clamped to ±ETA_MAX; no explicit inverse is formed.

    Prior mean: the paper's prior has mean 0 while s̃ ∈ [0, 1] sits near the label mean, so A can
    only shrink towards 0. With ``mu0`` (a fixed buffer, the training mean of c/M when
    ModelConfig.center is on) the prior is z ~ N(μ₀, Ω⁻¹) and μ_post = μ₀ + A (s̃ − μ₀): the
    same A, now shrinking towards the typical answer, as in the Remark's reliability reading.
    mu0 = 0 is exactly Eq. 20.
    """

    ETA_MAX = 20.0  # |η_k| bound: σ² ∈ [e^-20, e^20]
    mu0: Tensor  # (K,) buffer: prior mean μ₀

    def __init__(self, K: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.L = nn.Parameter(torch.eye(K))  # (K, K), only its lower triangle is used: Ω = I + εI at init
        self.eta = nn.Parameter(torch.zeros(K))  # (K,), σ² = exp(η) = 1 at init
        self.register_buffer("mu0", torch.zeros(K))  # (K,) prior mean μ₀; 0 = the paper's prior

    def cholesky_factor(self) -> Tensor:
        return torch.tril(self.L)  # (K, K) lower-triangular

    def precision(self) -> Tensor:
        """Ω = LLᵀ + εI (Eq. 21), float64 (K, K)."""
        L = self.cholesky_factor().double()
        return L @ L.T + self.eps * torch.eye(L.shape[0], dtype=L.dtype, device=L.device)

    def noise_variance(self) -> Tensor:
        """σ² = exp(η), float64 (K,)."""
        return self.eta.double().clamp(-self.ETA_MAX, self.ETA_MAX).exp()

    def _B_cholesky(self) -> tuple[Tensor, Tensor]:
        sd = self.noise_variance().sqrt()  # (K,) = diag(D^{½})
        B = torch.eye(sd.shape[0], dtype=sd.dtype, device=sd.device) + sd[:, None] * self.precision() * sd[None, :]
        # B = I + D^½ Ω D^½ is positive definite by construction: no error check (on a GPU it waits for the GPU)
        return sd, torch.linalg.cholesky_ex(B).L  # (K,), (K, K)

    def denoising_matrix(self) -> Tensor:
        """A = Σ_post D⁻¹ = D^{½} B⁻¹ D^{-½} (Eq. 20), float64 (K, K), via a Cholesky solve."""
        sd, LB = self._B_cholesky()
        return sd[:, None] * torch.cholesky_solve(torch.diag(1.0 / sd), LB)  # (K, K)

    def posterior_covariance(self) -> Tensor:
        """Σ_post = (Ω + D⁻¹)⁻¹ = D^{½} B⁻¹ D^{½} (Eq. 19), float64 (K, K)."""
        sd, LB = self._B_cholesky()
        return sd[:, None] * torch.cholesky_solve(torch.diag(sd), LB)  # (K, K)

    def forward(self, s_tilde: Tensor, observed: Tensor | None = None) -> Tensor:
        """μ_post = μ₀ + A (s̃ − μ₀) for a batch (= A s̃ with μ₀ = 0, Eq. 20): (B, K) -> (B, K).

        observed (B, K) bool: those entries of s̃ are an expert's levels c_k / M, known exactly; the posterior
        conditions on them (module docstring): they come back unchanged, the others move through Ω."""
        mu0 = self.mu0.double()  # (K,)
        r = s_tilde.double() - mu0  # (B, K)
        # none observed: Eq. 20 itself. On a GPU, asking whether any is observed would wait for it (and a CUDA graph
        # cannot hold the question): there the conditioned form below runs for every batch, equal to Eq. 20 where
        # nothing is observed, up to float rounding
        if observed is None or (not observed.is_cuda and not bool(observed.any())):
            return (mu0 + r @ self.denoising_matrix().T).to(s_tilde.dtype)  # (B, K)
        K = r.shape[1]
        eye = torch.eye(K, dtype=r.dtype, device=r.device)
        # (K, K) prior covariance Ω⁻¹ (Ω ≻ 0)
        C = torch.cholesky_solve(eye, torch.linalg.cholesky_ex(self.precision()).L)
        d = self.noise_variance().unsqueeze(0).masked_fill(observed.bool(), 0.0)  # (B, K) diag of D_i
        # (B, K, 1): (C + D_i)⁻¹ r
        w = torch.linalg.solve_ex(C.unsqueeze(0) + torch.diag_embed(d), r.unsqueeze(-1)).result
        mu = mu0 + (C.unsqueeze(0) @ w).squeeze(-1)  # (B, K)
        return torch.where(observed.bool(), s_tilde.double(), mu).to(s_tilde.dtype)  # observed: exactly c_k / M

    @torch.no_grad()
    def set_from_moments(self, z_train: Tensor, s_dev: Tensor, z_dev: Tensor, ridge: float = 0.0) -> None:
        """Set (μ₀, Ω, σ²) by their moments instead of by gradient (empirical Bayes; ``stage2.lcec_fit = "moments"``):

            μ₀ = mean of z_train,   Ω⁻¹ = Cov(z_train) + ridge · diag(Cov(z_train)),
            σ_k² = mean_i (s̃_ik − z_ik)² on dev,

        (a concept's variance at least 1/(4n), n training answers; jitter on the diagonal where two concepts move
        together on every answer),

        z = c/M the adjudicated levels (training answers for the prior; the dev answers, which the encoder never
        trained on, for the noise of the head's scores s̃ there). Ω then carries the labels' partial correlations,
        so conditioning on an expert's level of one concept moves the others as the labels say they move together.
        Stored as L = chol(Ω − εI) (Eq. 21) and η = log σ²."""
        z = z_train.double()
        cov = torch.cov(z.T) if len(z) > 1 else torch.zeros(z.shape[1], z.shape[1], dtype=z.dtype)  # (K, K)
        eye = torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
        var = torch.diagonal(cov)
        # a concept whose training levels never vary (a small course) gets the variance of one answer in n half the
        # scale away, instead of none (an Ω⁻¹ that cannot be inverted)
        cov = cov + torch.diag(var.clamp_min(1.0 / (4 * len(z))) - var)
        cov = cov + ridge * torch.diag(torch.diagonal(cov))
        jitter = 0.0
        # two concepts with the same levels on every training answer: a little jitter until Ω⁻¹ inverts
        for _ in range(12):
            omega, info = torch.linalg.inv_ex(cov + jitter * eye)
            omega = (omega + omega.T) / 2 - self.eps * eye
            L, info_chol = torch.linalg.cholesky_ex(omega)
            if int(info) == 0 and int(info_chol) == 0 and bool(torch.isfinite(L).all()):
                break
            jitter = max(jitter * 10, 1e-6 * float(torch.diagonal(cov).mean()))
        else:
            raise ReccbmError("LCEC by moments: the training labels' covariance is not a valid prior (are the levels "
                              "finite numbers?)")
        self.L.copy_(L.to(self.L.dtype))
        noise = ((s_dev.double() - z_dev.double()) ** 2).mean(0).clamp_min(math.exp(-self.ETA_MAX))
        self.eta.copy_(noise.log().to(self.eta.dtype))
        self.mu0.copy_(z.mean(0).to(self.mu0.dtype))

    def sparsity(self) -> Tensor:
        """L_spa = Σ_{i>j} |L_ij| (Eq. 25)."""
        return torch.tril(self.L, diagonal=-1).abs().sum()
