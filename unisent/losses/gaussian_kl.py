"""Diagonal-Gaussian KL divergences, GaussCSE's asymmetric and symmetric similarities and its loss
(Yoda et al., 2023)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from .distributed import gather_with_grad, label_offset

__all__ = [
    "kl_matrix",
    "kl_diagonal",
    "gaussian_similarity_matrix",
    "symmetric_gaussian_similarity",
    "gauss_cse_loss",
    "GAUSS_SETS",
]

GAUSS_SETS = ("ent", "con", "rev")


def kl_diagonal(mu_a: torch.Tensor, var_a: torch.Tensor, mu_b: torch.Tensor, var_b: torch.Tensor) -> torch.Tensor:
    """Per-dimension ``KL(N(mu_a, var_a) || N(mu_b, var_b))`` for aligned rows: (n, d) each -> (n, d)."""
    mu_a, var_a, mu_b, var_b = (t.float() for t in (mu_a, var_a, mu_b, var_b))
    return 0.5 * (torch.log(var_b) - torch.log(var_a) + (var_a + (mu_a - mu_b) ** 2) / var_b - 1.0)


def symmetric_gaussian_similarity(
    mu_a: torch.Tensor,
    var_a: torch.Tensor,
    mu_b: torch.Tensor,
    var_b: torch.Tensor,
    reduction: Literal["sum", "mean"] = "sum",
) -> torch.Tensor:
    """GaussCSE's symmetric similarity for aligned rows, the authors' STS score: the two KL divergences
    are averaged first, then ``1 / (1 + KL)``; (n, d) each -> (n,).

    ``sum``: ``1 / (1 + (KL(a || b) + KL(b || a)) / 2)`` with each KL summed over dimensions (as the
    paper's eq. 3 sums it). ``mean`` (exactly the authors' ``symmetrical_kl_sim``, yoda122/GaussCSE
    ``src/similarity.py``): per dimension ``1 / (1 + (KL_d(a || b) + KL_d(b || a)) / 2)``, averaged over
    dimensions. Not the same as averaging the two similarities ``1 / (1 + KL)`` of both directions.
    """
    kl = 0.5 * (kl_diagonal(mu_a, var_a, mu_b, var_b) + kl_diagonal(mu_b, var_b, mu_a, var_a))  # (n, d)
    if reduction == "sum":
        return 1.0 / (1.0 + kl.sum(dim=-1))
    if reduction == "mean":
        return (1.0 / (1.0 + kl)).mean(dim=-1)
    raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")


def kl_matrix(mu_a: torch.Tensor, var_a: torch.Tensor, mu_b: torch.Tensor, var_b: torch.Tensor) -> torch.Tensor:
    """All pairs ``K[i, j] = KL(N(a_i) || N(b_j))`` summed over dimensions, in float32.

    Closed form for diagonal Gaussians, expanded into matrix products so that no (n_a, n_b, d) tensor
    is built:
    ``2 KL = sum log var_b - sum log var_a + var_a . (1/var_b) + mu_a^2 . (1/var_b)
    - 2 mu_a . (mu_b / var_b) + sum mu_b^2 / var_b - d``.

    Args:
        mu_a: (n_a, d) means of the first arguments.
        var_a: (n_a, d) variances of the first arguments.
        mu_b: (n_b, d) means of the second arguments.
        var_b: (n_b, d) variances of the second arguments.

    Returns:
        (n_a, n_b) divergences.
    """
    mu_a, var_a, mu_b, var_b = (t.float() for t in (mu_a, var_a, mu_b, var_b))
    inv_b = var_b.reciprocal()  # (n_b, d)
    quad = (var_a + mu_a**2) @ inv_b.T - 2.0 * mu_a @ (mu_b * inv_b).T + (mu_b**2 * inv_b).sum(-1)  # (n_a, n_b)
    logdet = torch.log(var_b).sum(-1)[None, :] - torch.log(var_a).sum(-1)[:, None]
    return 0.5 * (logdet + quad - mu_a.shape[-1])


def gaussian_similarity_matrix(
    mu_a: torch.Tensor,
    var_a: torch.Tensor,
    mu_b: torch.Tensor,
    var_b: torch.Tensor,
    reduction: Literal["sum", "mean"] = "sum",
) -> torch.Tensor:
    """``S[i, j] = sim(a_i || b_j)``.

    ``sum`` (the paper, eq. 3): ``1 / (1 + KL)`` with KL summed over dimensions.
    ``mean`` (the authors' code): the mean over dimensions of ``1 / (1 + KL_d)``; it builds an
    (n_a, n_b, d) tensor.
    """
    if reduction == "sum":
        return 1.0 / (1.0 + kl_matrix(mu_a, var_a, mu_b, var_b))
    if reduction == "mean":
        per_dim = kl_diagonal(mu_a[:, None], var_a[:, None], mu_b[None], var_b[None])  # (n_a, n_b, d)
        return (1.0 / (1.0 + per_dim)).mean(-1)
    raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")


def gauss_cse_loss(
    premise: tuple[torch.Tensor, torch.Tensor],
    entailment: tuple[torch.Tensor, torch.Tensor],
    contradiction: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    sets: Sequence[str] = ("ent", "rev"),
    temperature: float = 0.05,
    reduction: Literal["sum", "mean"] = "sum",
    gather: bool = True,
) -> torch.Tensor:
    """GaussCSE's contrastive loss (eq. 4), mean over this process's premises.

    For premise ``i`` the positive logit is ``sim(s_i+ || s_i) / tau``; the denominator runs over
    the chosen sets: entailment ``sim(s_j+ || s_i)``, contradiction ``sim(s_j- || s_i)`` and
    reversed ``sim(s_j || s_i+)``, for every ``j`` of the (global) batch. The candidates (``s_j+``,
    ``s_j-``, ``s_j``) are gathered across processes with gradients; the anchors stay local.

    Args:
        premise: a ``(mu, var)`` pair, each (batch, d).
        entailment: a ``(mu, var)`` pair, each (batch, d).
        contradiction: a ``(mu, var)`` pair, each (batch, d).
        sets: a subset of ``("ent", "con", "rev")`` that contains ``"ent"``.
        temperature: tau.
        reduction: see [`gaussian_similarity_matrix`][unisent.losses.gaussian_similarity_matrix].
        gather: gather candidates across processes (no-op on one process).
    """
    sets = tuple(sets)
    if "ent" not in sets or not set(sets) <= set(GAUSS_SETS):
        raise ValueError(f"sets must contain 'ent' and be drawn from {GAUSS_SETS}, got {sets}")
    if "con" in sets and contradiction is None:
        raise ValueError("the contradiction set needs contradiction hypotheses")
    batch = premise[0].shape[0]
    maybe_gather: Callable[[torch.Tensor], torch.Tensor] = gather_with_grad if gather else (lambda t: t)
    labels = torch.arange(batch, device=premise[0].device) + (label_offset(batch) if gather else 0)

    def block(candidates: tuple[torch.Tensor, ...], anchors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        # (batch, global): sim(candidate_j || anchor_i)
        cand = [maybe_gather(t) for t in candidates]
        return gaussian_similarity_matrix(cand[0], cand[1], anchors[0], anchors[1], reduction).T

    logits = [block(entailment, premise)]
    if "con" in sets and contradiction is not None:  # (None with "con" was refused above)
        logits.append(block(contradiction, premise))
    if "rev" in sets:
        logits.append(block(premise, entailment))
    return F.cross_entropy(torch.cat(logits, dim=1) / temperature, labels)
