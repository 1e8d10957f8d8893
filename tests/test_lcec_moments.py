"""LCEC set by its moments (``stage2.lcec_fit = "moments"``): the prior is the labels' mean and covariance, the noise
the dev outputs' squared error, so an expert's level for one concept moves the concepts the labels correlate with."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reccbm
from reccbm import JointConfig, ReccbmError, StageIConfig, StageIIConfig
from reccbm.lcec import LatentCorrection
from tests.support.tiny_models import encoded, tiny_model, toy_table

pytestmark = pytest.mark.usefixtures("one_thread")


def _labels(n: int = 4000, seed: int = 0) -> torch.Tensor:
    """z for three concepts: 0 and 1 strongly correlated, 2 independent of both."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.rand(n, generator=g), torch.rand(n, generator=g)
    z1 = (0.8 * a + 0.2 * torch.rand(n, generator=g)).clamp(0, 1)
    return torch.stack([a, z1, b], 1).double()


def test_the_prior_is_the_labels_covariance_and_the_noise_the_dev_error() -> None:
    z, z_dev = _labels(), _labels(400, seed=1)
    noise = torch.randn(400, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    s_dev = z_dev + torch.tensor([0.05, 0.10, 0.20], dtype=torch.float64) * noise
    lcec = LatentCorrection(3, eps=1e-4)
    lcec.set_from_moments(z, s_dev, z_dev)
    prior_cov = torch.linalg.inv(lcec.precision())
    torch.testing.assert_close(prior_cov, torch.cov(z.T), rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(lcec.mu0.double(), z.mean(0).to(lcec.mu0.dtype).double())
    torch.testing.assert_close(lcec.noise_variance(), ((s_dev - z_dev) ** 2).mean(0), rtol=1e-5, atol=1e-8)
    ridged = LatentCorrection(3, eps=1e-4)
    ridged.set_from_moments(z, s_dev, z_dev, ridge=1.0)
    cov = torch.cov(z.T)
    torch.testing.assert_close(torch.linalg.inv(ridged.precision()), cov + torch.diag(torch.diagonal(cov)), rtol=1e-3,
                               atol=1e-6)


def test_an_experts_level_moves_the_correlated_concept_not_the_independent_one() -> None:
    z = _labels()
    lcec = LatentCorrection(3, eps=1e-4)
    lcec.set_from_moments(z, z[:200] + 0.1, z[:200])  # every score reads 0.1 high: σ² = 0.01
    observed = torch.tensor([[True, False, False]])
    with torch.no_grad():
        low, high = (lcec(torch.tensor([[v, 0.5, 0.5]]), observed) for v in (0.0, 1.0))
    assert low[0, 0] == 0.0 and high[0, 0] == 1.0  # the expert's level is kept exactly
    assert high[0, 1] - low[0, 1] > 0.05  # concept 1 follows concept 0, as the labels do
    assert abs(float(high[0, 2] - low[0, 2])) < 0.01  # concept 2 is independent of it
    gradient_fitted = LatentCorrection(3, eps=1e-4)  # Ω = I + εI, as the gradient fit leaves it on Mohler
    with torch.no_grad():
        g_low, g_high = (gradient_fitted(torch.tensor([[v, 0.5, 0.5]]), observed) for v in (0.0, 1.0))
    assert abs(float(g_high[0, 1] - g_low[0, 1])) < 1e-6


@pytest.mark.parametrize("case", ["constant", "duplicate", "one answer"])
def test_moments_of_a_small_courses_labels_still_give_a_prior(case: str) -> None:
    """A concept whose training levels never vary, two concepts with the same levels on every answer, a single
    training answer: the prior is still a valid Gaussian (finite, positive definite) and conditioning works."""
    z = _labels(40)
    if case == "constant":
        z[:, 2] = 0.5
    elif case == "duplicate":
        z[:, 1] = z[:, 0]
    else:
        z = z[:1]
    lcec = LatentCorrection(3, eps=1e-4)
    lcec.set_from_moments(z, z + 0.1, z)
    assert torch.isfinite(lcec.L.detach()).all() and bool((torch.linalg.eigvalsh(lcec.precision()) > 0).all())
    with torch.no_grad():
        post = lcec(torch.tensor([[0.2, 0.5, 0.5]]), torch.tensor([[True, False, False]]))
    assert torch.isfinite(post).all() and float(post[0, 0].detach()) == pytest.approx(0.2)
    if case == "constant":  # its variance is one answer in 40 half the scale away, not 0
        assert float(torch.linalg.inv(lcec.precision().detach())[2, 2]) == pytest.approx(1 / 160, rel=1e-2)


def test_fit_sets_lcec_by_moments_and_refits_the_head_through_it(backbone: str) -> None:
    _, tok = tiny_model(backbone)
    train, dev = encoded(tok, toy_table(24, seed=1)), encoded(tok, toy_table(8, seed=2))
    mcfg = reccbm.ModelConfig(num_concepts=3, num_levels=3, num_grades=4, backbone=backbone, max_len=32, head="level",
                              center=True, condition=True)
    recipe = reccbm.Recipe(mcfg, StageIConfig(lr=3e-3, epochs=1, batch_size=8, eval_batch_size=16, device="cpu"),
                           JointConfig(epochs=1), StageIIConfig(epochs=2, lcec_fit="moments")).seeded(0)
    fitted = reccbm.fit(train, dev, recipe, tok)
    assert fitted.lcec is not None and fitted.lcec.steps == 0 and fitted.stage2 is not None and fitted.stage2.steps > 0
    lcec = fitted.model.lcec
    assert lcec is not None
    z = torch.tensor(train.concepts, dtype=torch.float64) / 2
    np.testing.assert_allclose(torch.linalg.inv(lcec.precision()).detach().numpy(), torch.cov(z.T).numpy(), rtol=1e-3,
                               atol=1e-5)
    with pytest.raises(reccbm.ReccbmError, match="LCEC fit"):
        reccbm.recipe("default", 3, 3, 4, {"stage2": {"lcec_fit": "prior"}})


def test_moments_of_labels_that_are_not_numbers_are_refused_not_looped_on() -> None:
    z = _labels(40)
    z[3, 1] = float("nan")
    with pytest.raises(ReccbmError, match="not a valid prior"):
        LatentCorrection(3, eps=1e-4).set_from_moments(z, z, z)
