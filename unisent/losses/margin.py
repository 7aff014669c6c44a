"""Bidirectional additive margin softmax for translation ranking (bitext retrieval).

CMLM (Yang et al. 2021, Sec. 4.2, eq. 1) takes the loss from Yang et al. (2019b): for a batch of
translation pairs ``(s_i, t_i)``,

    L_s = -1/B sum_i log( e^{phi(s_i, t_i) - m} / (e^{phi(s_i, t_i) - m} + sum_{j != i} e^{phi(s_i, t_j)}) )

and ``L_t``, the same with sources and targets exchanged (each target ranks all sources);
``L_br = L_s + L_t``. Eq. 1 as printed lacks the ``log``; without it the "loss" would be an average
probability, not the softmax cross-entropy of the additive margin softmax it names, so the log is
taken here.

``phi`` is the inner product of the sentence vectors (the paper: "the inner products of sentence
vectors"; the vectors are made "the same as in CMLM", i.e. mean pooling, not normalised). That is
the default. The additive margin softmax of Wang et al. (2018), which Yang et al. (2019b) build on,
compares L2-normalised vectors and multiplies the cosine by a scale; ``normalize=True`` and
``scale`` give that form: ``phi = scale * cos`` and the margin is subtracted before scaling
(``scale * (cos - m)``), as in AM-softmax.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .distributed import gather_with_grad, label_offset

__all__ = ["additive_margin_softmax", "margin_logits"]


def margin_logits(
    query: torch.Tensor,  # (batch, dim), local
    candidates: torch.Tensor,  # (n_candidates, dim), gathered
    labels: torch.Tensor,  # (batch,) column of each query's true candidate
    *,
    margin: float,
    scale: float = 1.0,
    normalize: bool = False,
) -> torch.Tensor:
    """``scale * (phi(q_i, c_j) - m [j == labels_i])`` in float32: (batch, n_candidates)."""
    q, c = query.float(), candidates.float()
    if normalize:
        q, c = F.normalize(q, dim=-1), F.normalize(c, dim=-1)
    logits = q @ c.T - margin * F.one_hot(labels, c.shape[0]).to(torch.float32)
    return logits * scale


def additive_margin_softmax(
    source: torch.Tensor,
    target: torch.Tensor,
    *,
    margin: float = 0.3,
    scale: float = 1.0,
    normalize: bool = False,
    bidirectional: bool = True,
    gather: bool = True,
) -> torch.Tensor:
    """Translation ranking loss with an additive margin on the true pair, ``L_s + L_t``.

    Row ``i`` of ``source`` must rank ``target[i]`` above every other target of the (global) batch, by at least the
    margin; with ``bidirectional`` each target must also rank its source above every other source, and the two losses
    are added (the paper: ``L_br = L_s + L_t``). Across processes the candidates are gathered with gradients and the
    queries stay local (see ``unisent.losses.distributed``), so DDP's gradient average equals the global-batch update.

    Args:
        source: (batch, dim) sentence vectors of the sources on this process.
        target: (batch, dim) their translations.
        margin: m, subtracted from the true pair's logit (0.3 in the paper).
        scale: multiplies the logits (1 = the paper's plain inner products).
        normalize: L2-normalise the vectors first (cosine; AM-softmax's form).
        bidirectional: add the target -> source loss.
        gather: gather candidates from all processes (no-op on one process).

    Returns:
        Scalar: ``L_s (+ L_t)``, each a mean over this process's queries.
    """
    if source.shape != target.shape:
        raise ValueError(f"source {tuple(source.shape)} and target {tuple(target.shape)} differ in shape")
    batch = source.shape[0]
    maybe_gather: Callable[[torch.Tensor], torch.Tensor] = gather_with_grad if gather else (lambda t: t)
    labels = torch.arange(batch, device=source.device) + (label_offset(batch) if gather else 0)
    kw = {"margin": margin, "scale": scale}
    loss = F.cross_entropy(margin_logits(source, maybe_gather(target), labels, normalize=normalize, **kw), labels)
    if bidirectional:
        logits = margin_logits(target, maybe_gather(source), labels, normalize=normalize, **kw)
        loss = loss + F.cross_entropy(logits, labels)
    return loss
