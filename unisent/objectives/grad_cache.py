"""Cached contrastive training (GradCache, Gao, Zhang, Han and Callan 2021, arXiv:2101.06983): an in-batch
objective's batch of any size in the memory of one chunk.

An in-batch loss cannot be split into micro-batches, so GradCache splits the *encoder* instead
(``unisent.lightning_module`` runs it): (1) ``embed`` gets a ``CachedEncode``, which encodes chunk by
chunk *without a graph*, remembering each chunk's random state, and returns leaf tensors; (2) the objective's
unchanged ``loss`` runs on the leaves and its gradient w.r.t. them is taken; (3) ``CachedEncode.replay``
encodes each chunk again *with* a graph under the same random state (same dropout, same vectors), and
``autograd.grad(vectors, encoder parameters, cached)`` summed over chunks is exactly the whole-batch gradient.

Not sentence-transformers' ``CachedMultipleNegativesRankingLoss`` (a loss of its own model class): here every
objective, the balancers and the DDP gather see the cached vectors through the objective's own ``loss``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from .objective import EncodeFn

__all__ = ["CachedEncode", "RandomState"]


class RandomState:
    """The random-number state dropout draws from on ``device`` (the CPU's, and a CUDA device's)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


class CachedEncode:
    """The ``encode`` [`embed`][unisent.objectives.Objective.embed] is given under GradCache (see the module
    doc): ``encoder`` in chunks of ``chunk`` rows without a graph, returning a leaf that requires a
    gradient; with gradients disabled (GaussCSE's ``encoder_grad: 0``) the plain encoder."""

    def __init__(self, encoder: EncodeFn, chunk: int) -> None:
        if chunk < 1:
            raise ValueError(f"the cache chunk must be >= 1 rows, got {chunk}")
        self.encoder, self.chunk = encoder, int(chunk)
        self.leaves: list[torch.Tensor] = []  # one per call, in call order
        self._calls: list[tuple[torch.Tensor, torch.Tensor, list[tuple[slice, RandomState]], dict[str, Any]]] = []

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **options: Any) -> torch.Tensor:
        """``options`` (the encoder's, e.g. ``pooler``) are passed on, and again on ``replay``."""
        if not torch.is_grad_enabled():
            return self.encoder(input_ids, attention_mask, **options)
        rows = input_ids.shape[0]
        parts: list[torch.Tensor] = []
        chunks: list[tuple[slice, RandomState]] = []
        with torch.no_grad():
            for start in range(0, rows, self.chunk):
                piece = slice(start, min(start + self.chunk, rows))
                chunks.append((piece, RandomState(input_ids.device)))
                parts.append(self.encoder(input_ids[piece], attention_mask[piece], **options))
        leaf = torch.cat(parts).requires_grad_()
        self.leaves.append(leaf)
        self._calls.append((input_ids, attention_mask, chunks, options))
        return leaf

    def replay(self, grads: Sequence[torch.Tensor | None]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Per chunk, in order: its vectors encoded again with a graph under the first pass's random state, and its rows
        of ``grads`` (the loss's gradient w.r.t. each of ``leaves``; ``None``: skipped). The caller takes each chunk's
        gradients before the next, so one chunk's graph is alive at a time; the random state is restored afterwards."""
        if len(grads) != len(self._calls):
            raise ValueError(f"replay needs one gradient per cached call: {len(self._calls)} calls, {len(grads)}")
        now = RandomState(self.leaves[0].device) if self.leaves else None
        try:
            for (ids, mask, chunks, options), grad in zip(self._calls, grads):
                if grad is None:
                    continue
                for piece, state in chunks:
                    state.restore()
                    out = self.encoder(ids[piece], mask[piece], **options)
                    yield out, grad[piece].to(out.dtype)
        finally:
            if now is not None:
                now.restore()
