"""Pairwise similarity functions, STS correlation, and alignment / uniformity (Wang & Isola 2020).

A *representation* is an (n, d) tensor from ``model.encode`` or a ``(mu, var)`` pair of (n, d) tensors
from ``model.encode_gaussian``; a similarity function maps two with n rows to (n,) scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import pearsonr, spearmanr
from torch import Tensor

__all__ = [
    "COSINE",
    "Representation",
    "Similarity",
    "SimilarityFn",
    "alignment",
    "averaged_kl_similarity",
    "cosine_similarity",
    "kl_similarity",
    "sts_correlation",
    "sts_spearman",
    "symmetric_kl_similarity",
    "uniformity",
]

Representation = Union[Tensor, tuple[Tensor, ...]]
SimilarityFn = Callable[..., Tensor]  # of two representations of one kind: (n, d) tensors or (mu, var) pairs


def cosine_similarity(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine similarity of (n, d) embeddings; returns (n,)."""
    return F.cosine_similarity(a.float(), b.float(), dim=-1)


def kl_similarity(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], reduction: str = "sum") -> Tensor:
    """Asymmetric Gaussian similarity ``sim(a || b) = 1 / (1 + KL(N_a || N_b))`` (GaussCSE), (n,) in (0, 1].

    ``a``, ``b``: ``(mu, var)`` diagonal Gaussians, each (n, d). ``reduction``: ``"sum"`` sums KL over
    dimensions (the paper); ``"mean"`` averages ``1 / (1 + KL_d)`` over dimensions (the authors' code).
    """
    from ...losses.gaussian_kl import kl_diagonal  # the one closed form, shared with the training loss

    kl = kl_diagonal(a[0], a[1], b[0], b[1])  # (n, d), float32
    if reduction == "sum":
        return 1.0 / (1.0 + kl.sum(dim=-1))
    if reduction == "mean":
        return (1.0 / (1.0 + kl)).mean(dim=-1)
    raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")


def symmetric_kl_similarity(
    a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], reduction: Literal["sum", "mean"] = "sum"
) -> Tensor:
    """GaussCSE's symmetric similarity, the authors' STS score; returns (n,).

    ``sim(a, b) = 1 / (1 + (KL(N_a || N_b) + KL(N_b || N_a)) / 2)``. ``reduction``: ``"sum"`` sums each KL
    over dimensions (eq. 3 of the paper); ``"mean"`` applies the formula per dimension and averages, exactly
    the authors' code (``symmetrical_kl_sim`` of yoda122/GaussCSE).
    """
    from ...losses.gaussian_kl import symmetric_gaussian_similarity

    return symmetric_gaussian_similarity(a[0], a[1], b[0], b[1], reduction=reduction)


def averaged_kl_similarity(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], reduction: str = "sum") -> Tensor:
    """``(sim(a || b) + sim(b || a)) / 2`` with [`kl_similarity`][unisent.evaluation.kl_similarity]; returns (n,). Not
    the authors' score ([`symmetric_kl_similarity`][unisent.evaluation.symmetric_kl_similarity] averages the
    divergences); both rank alike when the KLs are close."""
    return 0.5 * (kl_similarity(a, b, reduction) + kl_similarity(b, a, reduction))


@dataclass(frozen=True)
class Similarity:
    """A named pairwise similarity and the model method that produces its representations.

    Attributes:
        fn: ``fn(a, b)`` is ``sim(a || b)`` for asymmetric functions; NLI tasks score ``fn(hypothesis, premise)``.
        gaussian: tasks call ``model.encode_gaussian`` and pass ``(mu, var)`` pairs to ``fn``, not
            ``model.encode``'s (n, d) tensors.
    """

    name: str
    fn: SimilarityFn
    gaussian: bool = False

    def __call__(self, a: Representation, b: Representation) -> Tensor:
        return self.fn(a, b)


COSINE = Similarity("cosine", cosine_similarity)


def sts_correlation(predicted: Sequence[float] | np.ndarray | Tensor, gold: Sequence[float]) -> dict[str, float]:
    """``{"spearman": ..., "pearson": ...}``: correlations x100 of (n,) predicted similarities and gold."""
    predicted = np.asarray(torch.as_tensor(predicted).detach().cpu().double())
    gold_array = np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold_array.shape or predicted.ndim != 1:
        raise ValueError(f"predicted {predicted.shape} and gold {gold_array.shape} must be equal 1-D shapes")
    predicted = np.nan_to_num(predicted)
    return {
        "spearman": 100.0 * float(spearmanr(predicted, gold_array).statistic),  # pyright: ignore[reportAttributeAccessIssue]  # made at run time
        "pearson": 100.0 * float(pearsonr(predicted, gold_array).statistic),  # pyright: ignore[reportAttributeAccessIssue]  # made at run time
    }


def sts_spearman(
    a: Representation,
    b: Representation,
    gold: Sequence[float],
    similarity: SimilarityFn = cosine_similarity,
) -> float:
    """Spearman correlation x100 between ``similarity(a, b)`` and the (n,) gold scores."""
    return sts_correlation(similarity(a, b), gold)["spearman"]


def alignment(x: Tensor, y: Tensor, alpha: float = 2.0) -> float:
    """Alignment loss ``E ||f(x) - f(y)||^alpha`` over positive pairs (rows of ``x``, ``y``) of L2-normalised
    embeddings; lower is better. ``alpha``: 2 in Wang & Isola 2020 and SimCSE."""
    x, y = F.normalize(x.float(), dim=-1), F.normalize(y.float(), dim=-1)
    return float((x - y).norm(dim=-1).pow(alpha).mean())


def uniformity(x: Tensor, t: float = 2.0) -> float:
    """Uniformity loss ``log E exp(-t ||f(x) - f(y)||^2)`` over all distinct pairs of L2-normalised rows
    (n >= 2); lower is better. ``t``: 2 in Wang & Isola 2020."""
    x = F.normalize(x.double(), dim=-1)
    squared = torch.pdist(x, p=2).pow(2)
    return float(torch.logsumexp(-t * squared, dim=0) - np.log(squared.numel()))
