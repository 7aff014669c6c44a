"""GaussCSE's symmetric similarity: the authors' STS score averages the two KL divergences, then
applies ``1 / (1 + KL)`` (yoda122/GaussCSE ``src/similarity.py``, ``symmetrical_kl_sim``), checked
against a hand computation; the former score (the mean of the two similarities) keeps its own name."""

from __future__ import annotations

import math

import pytest
import torch

from unisent.evaluation.metrics import averaged_kl_similarity, symmetric_kl_similarity
from unisent.evaluation.similarities import SIMILARITIES, get_similarity
from unisent.losses import symmetric_gaussian_similarity


def _kl(mu_a: float, var_a: float, mu_b: float, var_b: float) -> float:
    """KL(N(mu_a, var_a) || N(mu_b, var_b)) in one dimension, written out."""
    return 0.5 * (math.log(var_b / var_a) + (var_a + (mu_a - mu_b) ** 2) / var_b - 1.0)


def _authors(a, b, reduction: str) -> list[float]:
    """The authors' formula, by hand: per dimension (``mean``, their code) or summed (``sum``)."""
    (mu_a, var_a), (mu_b, var_b) = a, b
    out = []
    for i in range(mu_a.shape[0]):
        ab = [
            _kl(mu_a[i, d].item(), var_a[i, d].item(), mu_b[i, d].item(), var_b[i, d].item())
            for d in range(mu_a.shape[1])
        ]
        ba = [
            _kl(mu_b[i, d].item(), var_b[i, d].item(), mu_a[i, d].item(), var_a[i, d].item())
            for d in range(mu_a.shape[1])
        ]
        if reduction == "mean":
            out.append(sum(1.0 / (1.0 + (x + y) / 2) for x, y in zip(ab, ba)) / len(ab))
        else:
            out.append(1.0 / (1.0 + (sum(ab) + sum(ba)) / 2))
    return out


@pytest.fixture
def pair():
    g = torch.Generator().manual_seed(0)
    mu_a, mu_b = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    var_a, var_b = torch.rand(4, 3, generator=g) + 0.2, torch.rand(4, 3, generator=g) * 3 + 0.1
    return (mu_a, var_a), (mu_b, var_b)


def test_one_dimension_by_hand():
    """N(0, 1) vs N(1, 4): KL = 0.4431 one way and 1.3069 the other; their mean is exactly 0.875
    (the log terms cancel), so the authors' score is 1 / 1.875 = 8/15, while the mean of the two
    similarities is (1/1.4431 + 1/2.3069) / 2 = 0.5632."""
    a = (torch.tensor([[0.0]]), torch.tensor([[1.0]]))
    b = (torch.tensor([[1.0]]), torch.tensor([[4.0]]))
    assert symmetric_kl_similarity(a, b).item() == pytest.approx(8 / 15, rel=1e-6)
    assert symmetric_kl_similarity(a, b, reduction="mean").item() == pytest.approx(8 / 15, rel=1e-6)
    kl_ab, kl_ba = 0.5 * (math.log(4) + 0.5 - 1), 0.5 * (-math.log(4) + 5 - 1)
    old = 0.5 * (1 / (1 + kl_ab) + 1 / (1 + kl_ba))
    assert averaged_kl_similarity(a, b).item() == pytest.approx(old, rel=1e-6)
    assert abs(old - 8 / 15) > 0.02  # the two forms are different scores


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_matches_the_authors_formula(pair, reduction):
    a, b = pair
    expected = torch.tensor(_authors(a, b, reduction))
    torch.testing.assert_close(symmetric_kl_similarity(a, b, reduction=reduction), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        symmetric_gaussian_similarity(*a, *b, reduction=reduction), expected, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(symmetric_kl_similarity(b, a, reduction=reduction), expected, rtol=1e-5, atol=1e-6)


def test_matches_the_authors_code_primitives(pair):
    """Their ``symmetrical_kl_sim`` on torch.distributions Normals (std = sqrt(var))."""
    (mu_a, var_a), (mu_b, var_b) = pair
    p1 = torch.distributions.Normal(mu_a, var_a.sqrt())
    p2 = torch.distributions.Normal(mu_b, var_b.sqrt())
    mean_kld = (torch.distributions.kl_divergence(p1, p2) + torch.distributions.kl_divergence(p2, p1)) / 2
    theirs = (1 / (1 + mean_kld)).mean(dim=-1)
    torch.testing.assert_close(
        symmetric_kl_similarity(pair[0], pair[1], reduction="mean"), theirs, rtol=1e-5, atol=1e-6
    )


def test_identical_gaussians_score_one_and_bad_reduction_fails(pair):
    a, _ = pair
    torch.testing.assert_close(symmetric_kl_similarity(a, a), torch.ones(4))
    with pytest.raises(ValueError, match="reduction"):
        symmetric_kl_similarity(a, a, reduction="max")


def test_named_similarities(pair):
    """``kl_symmetric`` (what the docs call symmetric) is the authors' form; the per-dimension form
    and the former mean of similarities keep names of their own."""
    a, b = pair
    torch.testing.assert_close(
        get_similarity("kl_symmetric")(a, b), torch.tensor(_authors(a, b, "sum")), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        get_similarity("kl_symmetric_mean")(a, b), torch.tensor(_authors(a, b, "mean")), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(get_similarity("kl_avg_sim")(a, b), averaged_kl_similarity(a, b))
    assert all(SIMILARITIES[name].gaussian for name in ("kl_symmetric", "kl_symmetric_mean", "kl_avg_sim"))
    assert not torch.allclose(get_similarity("kl_symmetric")(a, b), get_similarity("kl_avg_sim")(a, b))
