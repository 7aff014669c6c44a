"""Pairwise similarity functions, STS correlation, and alignment / uniformity (Wang & Isola 2020).

A *representation* is what a model returns for a batch of sentences: a tensor of shape (n, d) from
``model.encode`` or a ``(mu, var)`` pair of (n, d) tensors from ``model.encode_gaussian``. A
similarity function maps two representations with the same number of rows to a tensor of shape (n,).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Union

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
    "dot_similarity",
    "kl_similarity",
    "sts_correlation",
    "sts_spearman",
    "symmetric_kl_similarity",
    "uniformity",
]

Representation = Union[Tensor, tuple[Tensor, ...]]
SimilarityFn = Callable[[Representation, Representation], Tensor]


def cosine_similarity(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine similarity.

    Args:
        a: (n, d) embeddings.
        b: (n, d) embeddings.

    Returns:
        (n,) cosine of each row pair.
    """
    return F.cosine_similarity(a.float(), b.float(), dim=-1)


def dot_similarity(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise inner product of (n, d) embeddings; returns (n,)."""
    return (a.float() * b.float()).sum(dim=-1)


def kl_similarity(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], reduction: str = "sum") -> Tensor:
    """Asymmetric Gaussian similarity ``sim(a || b) = 1 / (1 + KL(N_a || N_b))`` (GaussCSE).

    Args:
        a: ``(mu, var)``, each (n, d), the diagonal Gaussians of the first sentences.
        b: ``(mu, var)``, each (n, d).
        reduction: ``"sum"`` sums KL over dimensions before ``1 / (1 + KL)`` (the paper);
            ``"mean"`` averages ``1 / (1 + KL_d)`` over dimensions (the authors' code).

    Returns:
        (n,) similarities in (0, 1].
    """
    from ...losses.gaussian_kl import kl_diagonal  # the one closed form, shared with the training loss

    kl = kl_diagonal(a[0], a[1], b[0], b[1])  # (n, d), float32
    if reduction == "sum":
        return 1.0 / (1.0 + kl.sum(dim=-1))
    if reduction == "mean":
        return (1.0 / (1.0 + kl)).mean(dim=-1)
    raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")


def symmetric_kl_similarity(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], reduction: str = "sum") -> Tensor:
    """GaussCSE's symmetric similarity, the authors' STS score: the two KL divergences are averaged,
    then ``1 / (1 + KL)``; returns (n,).

    ``sim(a, b) = 1 / (1 + (KL(N_a || N_b) + KL(N_b || N_a)) / 2)``.

    Args:
        a, b: ``(mu, var)`` pairs, each (n, d).
        reduction: ``"sum"`` sums each KL over dimensions (as eq. 3 of the paper); ``"mean"`` applies
            the formula per dimension and averages over dimensions, exactly the authors' code
            (``symmetrical_kl_sim`` of yoda122/GaussCSE, their STS evaluation).

    Until this version ``symmetric_kl_similarity`` was the mean of the two similarities; that score is
    :func:`averaged_kl_similarity`.
    """
    from ...losses.gaussian_kl import symmetric_gaussian_similarity

    return symmetric_gaussian_similarity(a[0], a[1], b[0], b[1], reduction=reduction)


def averaged_kl_similarity(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], reduction: str = "sum") -> Tensor:
    """The mean of the two similarities, ``(sim(a || b) + sim(b || a)) / 2`` with :func:`kl_similarity`:
    another symmetric score (unisent's ``kl_symmetric`` before it followed the authors); returns (n,).

    It is not the authors' score (:func:`symmetric_kl_similarity` averages the divergences instead);
    both are symmetric and rank pairs alike when the two divergences are close.
    """
    return 0.5 * (kl_similarity(a, b, reduction) + kl_similarity(b, a, reduction))


@dataclass(frozen=True)
class Similarity:
    """A named pairwise similarity and the model method that produces its representations.

    Attributes:
        name: label used in results (``cosine``, ``kl``...).
        fn: maps two representations with n rows to (n,) scores. For asymmetric functions
            ``fn(a, b)`` is ``sim(a || b)``; NLI tasks score ``fn(hypothesis, premise)``.
        gaussian: if true, tasks call ``model.encode_gaussian`` and pass ``(mu, var)`` pairs to ``fn``;
            otherwise they call ``model.encode`` and pass (n, d) tensors.
    """

    name: str
    fn: SimilarityFn
    gaussian: bool = False

    def __call__(self, a: Representation, b: Representation) -> Tensor:
        return self.fn(a, b)


COSINE = Similarity("cosine", cosine_similarity)


def sts_correlation(predicted: Sequence[float] | np.ndarray | Tensor, gold: Sequence[float]) -> dict[str, float]:
    """Spearman and Pearson correlation (x100) between predicted similarities and gold scores.

    Args:
        predicted: (n,) system scores.
        gold: (n,) gold scores.

    Returns:
        ``{"spearman": ..., "pearson": ...}`` in percent.
    """
    predicted = np.asarray(torch.as_tensor(predicted).detach().cpu().double())
    gold_array = np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold_array.shape or predicted.ndim != 1:
        raise ValueError(f"predicted {predicted.shape} and gold {gold_array.shape} must be equal 1-D shapes")
    predicted = np.nan_to_num(predicted)
    return {
        "spearman": 100.0 * float(spearmanr(predicted, gold_array).statistic),
        "pearson": 100.0 * float(pearsonr(predicted, gold_array).statistic),
    }


def sts_spearman(
    a: Representation,
    b: Representation,
    gold: Sequence[float],
    similarity: SimilarityFn = cosine_similarity,
) -> float:
    """Spearman correlation x100 between ``similarity(a, b)`` and the gold scores.

    Args:
        a: representations of the first sentences, n rows.
        b: representations of the second sentences, n rows.
        gold: (n,) gold scores.
        similarity: any pairwise similarity; cosine by default.

    Returns:
        Spearman's rho x100.
    """
    return sts_correlation(similarity(a, b), gold)["spearman"]


def alignment(x: Tensor, y: Tensor, alpha: float = 2.0) -> float:
    """Alignment loss ``E ||f(x) - f(y)||^alpha`` over positive pairs of L2-normalised embeddings.

    Args:
        x: (n, d) embeddings of the first sentence of each positive pair.
        y: (n, d) embeddings of the second sentence.
        alpha: exponent (2 in Wang & Isola 2020 and SimCSE).

    Returns:
        The mean, lower is better.
    """
    x, y = F.normalize(x.float(), dim=-1), F.normalize(y.float(), dim=-1)
    return float((x - y).norm(dim=-1).pow(alpha).mean())


def uniformity(x: Tensor, t: float = 2.0) -> float:
    """Uniformity loss ``log E exp(-t ||f(x) - f(y)||^2)`` over all distinct pairs of L2-normalised rows.

    Args:
        x: (n, d) embeddings, n >= 2.
        t: temperature (2 in Wang & Isola 2020).

    Returns:
        The log-mean, lower is better.
    """
    x = F.normalize(x.double(), dim=-1)
    squared = torch.pdist(x, p=2).pow(2)
    return float(torch.logsumexp(-t * squared, dim=0) - np.log(squared.numel()))
