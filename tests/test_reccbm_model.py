"""The maths of REC-CBM: RACE attention, OPCC pairs and average, LCEC posterior (Appendix proof)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reccbm.model import (
    ConceptBottleneck,
    LatentCorrection,
    expected_scores,
    masked_mean,
    opcc_loss,
    opcc_pairs,
    orthogonal_queries,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _random_lcec(K: int, seed: int, eta_scale: float = 1.0) -> LatentCorrection:
    g = torch.Generator().manual_seed(seed)
    lc = LatentCorrection(K, eps=1e-4)
    with torch.no_grad():
        lc.L.copy_(torch.randn(K, K, generator=g))
        lc.eta.copy_(torch.randn(K, generator=g) * eta_scale)
    return lc


@settings(max_examples=25, deadline=None)
@given(K=st.integers(1, 9), seed=st.integers(0, 10_000))
def test_mu_post_is_the_gaussian_conditional_mean_from_the_joint_covariance(K: int, seed: int) -> None:
    """Appendix proof: Cov(z, s̃) = [[Ω⁻¹, Ω⁻¹], [Ω⁻¹, Ω⁻¹ + D]], E[z | s̃] = Ω⁻¹ (Ω⁻¹ + D)⁻¹ s̃."""
    lc = _random_lcec(K, seed)
    Omega = lc.precision()
    D = torch.diag(lc.noise_variance())
    P = torch.linalg.inv(Omega)  # prior covariance Ω⁻¹
    joint = torch.cat([torch.cat([P, P], 1), torch.cat([P, P + D], 1)], 0)  # (2K, 2K)
    cov_zs, cov_ss = joint[:K, K:], joint[K:, K:]
    s = torch.rand(5, K, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
    long_way = s @ (cov_zs @ torch.linalg.inv(cov_ss)).T  # (5, K) conditional means
    mu = s @ lc.denoising_matrix().T
    torch.testing.assert_close(mu, long_way, rtol=1e-6, atol=1e-8)
    # and the posterior form of Eq. 19-20: A = (Ω + D⁻¹)⁻¹ D⁻¹
    Sigma = torch.linalg.inv(Omega + torch.linalg.inv(D))
    torch.testing.assert_close(lc.posterior_covariance(), Sigma, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(lc.denoising_matrix(), Sigma @ torch.linalg.inv(D), rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(lc(s.float()), mu.float(), rtol=1e-5, atol=1e-6)
    # with a prior mean μ₀ (ModelConfig.center): E[z | s̃] = μ₀ + Cov(z, s̃) Cov(s̃)⁻¹ (s̃ − μ₀)
    mu0 = torch.rand(K, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 2))
    lc.mu0.copy_(mu0.float())
    long_way = lc.mu0.double() + (s - lc.mu0.double()) @ (cov_zs @ torch.linalg.inv(cov_ss)).T
    torch.testing.assert_close(lc(s), long_way, rtol=1e-6, atol=1e-7)


def test_diagonal_case_recovers_spearman_reliability() -> None:
    """Remark: Ω = diag(σ_z⁻²) gives A_kk = σ_z² / (σ_z² + σ_k²)."""
    lc = LatentCorrection(3, eps=0.0)
    sz2 = torch.tensor([0.5, 1.0, 2.0])
    s2 = torch.tensor([0.1, 1.0, 4.0])
    with torch.no_grad():
        lc.L.copy_(torch.diag(sz2.rsqrt()))
        lc.eta.copy_(s2.log())
    A = lc.denoising_matrix()
    torch.testing.assert_close(torch.diagonal(A), (sz2 / (sz2 + s2)).double())
    torch.testing.assert_close(A - torch.diag(torch.diagonal(A)), torch.zeros(3, 3, dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigma2_is_identified_only_together_with_the_prior_precision(seed: int) -> None:
    """μ_post depends on D and Ω only through A = (I + DΩ)⁻¹. Scaling concept k's σ_k² by t_k and row k of L by
    t_k^{-½} turns A into T^{½} A T^{-½}: the diagonal A_kk is unchanged, only the off-diagonal terms move, and
    μ_post is unchanged whenever Ω is diagonal. So the data fix A_kk (the reliability σ_z²/(σ_z² + σ_k²) of the
    Remark), not σ_k² by itself (docs/design.md)."""
    K = 5
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(K, generator=g, dtype=torch.float64) * 9 + 0.5  # (K,) per-concept factors
    s = torch.rand(7, K, generator=g)  # (B, K) s̃
    for diagonal in (False, True):
        lc = LatentCorrection(K, eps=0.0)
        with torch.no_grad():
            L = torch.randn(K, K, generator=g) * 0.6 + 2 * torch.eye(K)
            lc.L.copy_(torch.diag(torch.diagonal(L)) if diagonal else L)
            lc.eta.copy_(torch.randn(K, generator=g))
        A, mu, sigma2 = lc.denoising_matrix(), lc(s), lc.noise_variance()
        with torch.no_grad():
            lc.eta.add_(t.log().float())
            lc.L.mul_(t.rsqrt().float()[:, None])  # Ω -> T^{-½} Ω T^{-½}
        A2 = lc.denoising_matrix()
        torch.testing.assert_close(torch.diagonal(A2), torch.diagonal(A), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(A2, t.sqrt()[:, None] * A / t.sqrt()[None, :], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lc.noise_variance(), sigma2 * t, rtol=1e-5, atol=0.0)  # every σ_k² moved
        if diagonal:
            torch.testing.assert_close(lc(s), mu, rtol=1e-5, atol=1e-6)
        else:
            assert not torch.allclose(lc(s), mu, atol=1e-4)  # off-diagonal terms: only they tell σ_k² apart


@pytest.mark.parametrize("eta", [-60.0, -20.0, 0.0, 20.0, 60.0])
def test_lcec_is_numerically_safe_for_tiny_and_huge_noise(eta: float) -> None:
    lc = _random_lcec(6, 3)
    with torch.no_grad():
        lc.eta.fill_(eta)
    s = torch.rand(4, 6, requires_grad=True)
    mu = lc(s)
    mu.sum().backward()
    assert lc.L.grad is not None and s.grad is not None
    assert torch.isfinite(mu).all() and torch.isfinite(lc.L.grad).all() and torch.isfinite(s.grad).all()
    A = lc.denoising_matrix().detach()
    if eta <= -20:  # σ² -> 0: trust the measurement, A -> I
        torch.testing.assert_close(A, torch.eye(6, dtype=A.dtype), atol=1e-3, rtol=0)
    if eta >= 20:  # σ² -> ∞: shrink to the prior mean 0
        assert float(A.abs().max()) < 1e-3


def test_sparsity_is_the_l1_norm_of_the_strict_lower_triangle() -> None:
    lc = LatentCorrection(3, eps=1e-4)
    with torch.no_grad():
        lc.L.copy_(torch.tensor([[1.0, 9.0, 9.0], [-2.0, 1.0, 9.0], [3.0, -4.0, 1.0]]))
    assert float(lc.sparsity().detach()) == pytest.approx(9.0)
    Omega = lc.precision()
    L = torch.tril(lc.L).double()
    torch.testing.assert_close(Omega, L @ L.T + 1e-4 * torch.eye(3, dtype=torch.float64))


def test_opcc_pairs_and_k_prime_average_on_a_hand_made_batch() -> None:
    # 3 items, 3 concepts: concept 0 ranks 2 > 1 > 0; concept 1 ties everywhere (no pair);
    # concept 2 has exactly one pair (item 1 above item 0 and item 2 tied with item 0).
    c = torch.tensor([[0, 1, 0], [1, 1, 1], [2, 1, 0]])
    P = opcc_pairs(c)
    assert P[:, :, 0].nonzero().tolist() == [[1, 0], [2, 0], [2, 1]]
    assert P[:, :, 1].sum() == 0
    assert P[:, :, 2].nonzero().tolist() == [[1, 0], [1, 2]]
    c_hat = torch.tensor([[0.2, 1.0, 0.5], [1.0, 1.5, 0.4], [1.7, 0.1, 0.5]])

    def ls(x: float) -> float:
        return -math.log(1 / (1 + math.exp(-x)))

    l0 = (ls(1.0 - 0.2) + ls(1.7 - 0.2) + ls(1.7 - 1.0)) / 3
    l2 = (ls(0.4 - 0.5) + ls(0.4 - 0.5)) / 2
    assert float(opcc_loss(c_hat, c)) == pytest.approx((l0 + l2) / 2, rel=1e-6)  # K' = 2, not K = 3
    assert float(opcc_loss(c_hat, torch.zeros(3, 3, dtype=torch.long))) == 0.0  # K' = 0


def test_expected_scores() -> None:
    p = torch.tensor([[[0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0]]])
    torch.testing.assert_close(expected_scores(p), torch.tensor([[1.3], [0.0]]))


def test_race_attention_ignores_padding_and_queries_are_orthogonal() -> None:
    Q = orthogonal_queries(5, 16)
    torch.testing.assert_close(Q @ Q.T, torch.eye(5), atol=1e-5, rtol=0)
    assert orthogonal_queries(20, 8).shape == (20, 8)  # K > d: stacked orthonormal blocks
    torch.manual_seed(0)
    race = ConceptBottleneck(K=5, num_levels=3, d=16, tau=0.5, race=True)
    H = torch.randn(2, 7, 16)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    logits, alpha = race(H, mask)
    assert logits.shape == (2, 5, 3) and alpha is not None and alpha.shape == (2, 5, 7)
    torch.testing.assert_close(alpha.sum(-1), torch.ones(2, 5))
    assert float(alpha[1, :, 4:].abs().max().detach()) == 0.0
    h = torch.einsum("bkt,btd->bkd", alpha, H)  # Eq. 10 by hand for item 1, concept 0
    assert race.Q is not None
    manual = torch.softmax(H[1, :4] @ race.Q[0] / 0.5, 0) @ H[1, :4]
    torch.testing.assert_close(h[1, 0], manual)
    shared = ConceptBottleneck(K=5, num_levels=3, d=16, tau=0.5, race=False)
    _, none = shared(H, mask)
    assert none is None and shared.Q is None
    torch.testing.assert_close(masked_mean(H, mask)[1], H[1, :4].mean(0))


def test_ordinal_concept_head_reads_one_score_per_concept_along_its_levels() -> None:
    """concept_head "ordinal": one direction v_k per concept, level m's logit m · v_kᵀh_k + b_{k,m}; the log-odds of
    neighbouring levels, less their biases, are the same score s_k at every step, and the expected level rises with
    it."""
    torch.manual_seed(0)
    head = ConceptBottleneck(K=4, num_levels=4, d=16, tau=0.5, race=True, ordinal=True)
    assert tuple(head.V.shape) == (4, 1, 16) and tuple(head.V_bias.shape) == (4, 4)
    with torch.no_grad():
        head.V_bias.normal_()
    H, mask = torch.randn(6, 7, 16), torch.ones(6, 7, dtype=torch.long)
    logits, alpha = head(H, mask)
    assert logits.shape == (6, 4, 4) and alpha is not None
    steps = logits.log_softmax(-1).diff(dim=-1) - head.V_bias.diff(dim=-1)  # (B, K, M): s_k at each step
    torch.testing.assert_close(steps, steps[..., :1].expand_as(steps))
    h = torch.einsum("bkt,btd->bkd", alpha, H)
    torch.testing.assert_close(steps[..., 0], torch.einsum("bkd,kd->bk", h, head.V[:, 0]))
    with torch.no_grad():  # the same answer read with a larger score: every concept's expected level rises
        levels = torch.arange(4.0)
        low = (logits.softmax(-1) * levels).sum(-1)
        head.V.mul_(3.0)
        high = (head(H, mask)[0].softmax(-1) * levels).sum(-1)
    s = steps[..., 0]
    assert bool(((high - low) * s > 0).all())


def test_the_concept_head_is_chosen_by_name(backbone: str) -> None:
    from reccbm.config import ModelConfig
    from tests.support.tiny_models import tiny_model

    with pytest.raises(ValueError, match="unknown concept head 'cumulative'; use softmax or ordinal"):
        ModelConfig(num_concepts=3, num_levels=3, num_grades=4, concept_head="cumulative")
    model, _ = tiny_model(backbone, concept_head="ordinal")
    assert model.bottleneck.ordinal and tuple(model.bottleneck.V.shape)[:2] == (3, 1)
    assert not tiny_model(backbone)[0].bottleneck.ordinal


def test_reccbm_never_imports_rubrictool() -> None:
    from pathlib import Path

    import reccbm

    for path in Path(reccbm.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert "import rubrictool" not in text and "from rubrictool" not in text, path.name


def test_conditioning_on_an_experts_levels_is_the_gaussian_conditional() -> None:
    """Observed concepts come back exactly; the others equal the posterior mean of z_J given z_I = x_I and s̃_J,
    computed here by hand from the joint Gaussian (prior N(μ₀, Ω⁻¹), noise D on the unobserved only)."""
    K = 5
    lc = _random_lcec(K, seed=3)
    with torch.no_grad():
        lc.mu0.copy_(torch.rand(K, dtype=lc.mu0.dtype))
    s = torch.rand(4, K, dtype=torch.float64)
    observed = torch.tensor([[True, False, False, True, False], [False] * K, [True] * K,
                             [False, True, False, False, False]])
    got = lc(s, observed).detach().numpy()
    Omega, D = lc.precision().detach().numpy(), np.diag(lc.noise_variance().detach().numpy())
    C, mu0 = np.linalg.inv(Omega), lc.mu0.double().numpy()
    for i in range(4):
        I, J = observed[i].numpy(), ~observed[i].numpy()
        want = s[i].numpy().copy()
        if J.any():
            # z_J | z_I = x_I: mean m, covariance S (the prior conditional); then s̃_J = z_J + noise (D_J)
            m = mu0[J] + C[np.ix_(J, I)] @ np.linalg.solve(C[np.ix_(I, I)],
                                                           s[i].numpy()[I] - mu0[I]) if I.any() else mu0[J]
            S = C[np.ix_(J, J)] - (C[np.ix_(J, I)] @ np.linalg.solve(C[np.ix_(I, I)], C[np.ix_(I, J)]) if I.any()
                                   else 0)
            want[J] = m + S @ np.linalg.solve(S + D[np.ix_(J, J)], s[i].numpy()[J] - m)
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(got[observed.numpy()], s.numpy()[observed.numpy()])  # exactly the expert's value
    unobserved_only = lc(s[1:2], observed[1:2]).detach()
    torch.testing.assert_close(unobserved_only, lc(s[1:2]).detach())  # no observation: Eq. 20
