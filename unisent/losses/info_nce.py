"""InfoNCE with in-batch negatives, optional hard negatives, temperature and a symmetric form."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .distributed import gather_with_grad, label_offset

__all__ = ["info_nce", "cosine_logits"]


def cosine_logits(query: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """``cos(q_i, c_j) / temperature`` for all pairs: (n_query, dim) x (n_cand, dim) -> (n_query, n_cand).

    Computed in float32 whatever the autocast dtype: logits divided by a small temperature lose
    too much precision in bf16.
    """
    q = F.normalize(query.float(), dim=-1)
    c = F.normalize(candidates.float(), dim=-1)
    return q @ c.T / temperature


def info_nce(
    query: torch.Tensor,
    positives: torch.Tensor,
    *,
    hard_negatives: torch.Tensor | None = None,
    temperature: float = 0.05,
    hard_negative_weight: float = 0.0,
    symmetric: bool = False,
    gather: bool = True,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Contrastive cross-entropy: row ``i`` of ``query`` must pick its own positive.

    Candidates for every query are all positives of the (global) batch, then all hard negatives of the batch.
    ``hard_negative_weight`` is added to the logit of each query's *own* hard negative (a log-weight, as in SimCSE's
    ``hard_negative_weight``). With ``symmetric``, the loss of the positives picking their query (over all queries) is
    averaged in. Across processes the candidates are gathered with gradients and the queries stay local (see
    ``unisent.losses.distributed``).

    Args:
        query: (batch, dim) anchors of this process.
        positives: (batch, dim) the positive of each anchor.
        hard_negatives: optional (batch, dim) one hard negative per anchor.
        temperature: the logits are ``cos / temperature``.
        hard_negative_weight: added to ``logit(i, negative_i)``; 0 leaves the logits unchanged.
        symmetric: also the positive -> query direction.
        gather: gather candidates from all processes (no-op on one process).
        exclude: optional bool (batch, n_candidates) over the gathered candidates (all positives,
            then all hard negatives): ``True`` removes a candidate from a query's softmax (a missing
            hard negative, or a false negative such as the same entity linked by two sentences).
            A query's own positive is never removed. Only the query -> positive direction uses it.

    Returns:
        Scalar mean loss over this process's anchors.
    """
    if query.shape != positives.shape:
        raise ValueError(f"query {tuple(query.shape)} and positives {tuple(positives.shape)} differ in shape")
    batch = query.shape[0]
    maybe_gather: Callable[[torch.Tensor], torch.Tensor] = gather_with_grad if gather else (lambda t: t)
    labels = torch.arange(batch, device=query.device) + (label_offset(batch) if gather else 0)
    logits = cosine_logits(query, maybe_gather(positives), temperature)  # (batch, global_batch)
    if hard_negatives is not None:
        neg_logits = cosine_logits(query, maybe_gather(hard_negatives), temperature)  # (batch, global_batch)
        if hard_negative_weight:
            # (batch, global_batch): the weight sits at each anchor's own negative
            weight = torch.zeros_like(neg_logits)
            weight[torch.arange(batch, device=query.device), labels] = hard_negative_weight
            neg_logits = neg_logits + weight
        logits = torch.cat([logits, neg_logits], dim=1)
    if exclude is not None:
        if exclude.shape != logits.shape:
            raise ValueError(f"exclude has shape {tuple(exclude.shape)}, the logits {tuple(logits.shape)}")
        exclude = exclude.clone()
        exclude[torch.arange(batch, device=query.device), labels] = False
        logits = logits.masked_fill(exclude, float("-inf"))
    loss = F.cross_entropy(logits, labels)
    if symmetric:
        loss = (loss + F.cross_entropy(cosine_logits(positives, maybe_gather(query), temperature), labels)) / 2
    return loss
