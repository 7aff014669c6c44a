"""Cached contrastive training (GradCache, Gao, Zhang, Han and Callan 2021, arXiv:2101.06983): an in-batch
objective's batch of any size in the memory of one chunk.

An in-batch loss scores every anchor against every candidate of the batch, so the batch cannot be split
into independent micro-batches (gradient accumulation changes the task). GradCache splits the *encoder*
instead. An in-batch objective reads the encoder only through the views its
:meth:`~unisent.objectives.Objective.embed` makes from calls ``encode(input_ids, attention_mask)``, so the
training step (:mod:`unisent.training_step`) runs it over this contract:

1. ``embed`` is given a :class:`CachedEncode`: each call encodes its rows chunk by chunk *without a graph*,
   remembering the random-number state before each chunk, and returns the concatenated vectors as a leaf
   tensor that requires a gradient;
2. the objective's :meth:`~unisent.objectives.Objective.loss` is computed on those leaves as usual (its own
   parameters, heads and entity tables, keep their graph: it starts at the leaves), and the gradient of the
   loss with respect to each leaf is taken (:meth:`~unisent.balancers.StepGradients.add`, with the own
   parameters' gradients);
3. :meth:`CachedEncode.replay` encodes each chunk again *with* a graph, under the random-number state of the
   first pass (the same dropout masks, so the same vectors), and gives that chunk's vectors with their cached
   gradient: ``autograd.grad(vectors, encoder parameters, grad_outputs=cached)`` summed over the chunks is the
   encoder's gradient of the whole-batch loss, exactly.

The step holds one chunk's graph, the leaves (batch x hidden) and the loss's own graph. Written here rather
than taken from sentence-transformers (``CachedMultipleNegativesRankingLoss``): that implementation is a
loss of its own model class, while here every objective of a run, its balancer's per-objective gradients
and the DDP gather of candidates (``unisent.losses.distributed``: the leaves are gathered like any
vectors) must see the cached vectors through the objective's unchanged ``loss``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from .objective import EncodeFn

__all__ = ["CachedEncode", "RandomState"]


class RandomState:
    """The random-number state that dropout draws from on ``device``: the CPU generator's and, on a CUDA
    device, that device's generator's."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


class CachedEncode:
    """The ``encode`` an objective's :meth:`~unisent.objectives.Objective.embed` is given under GradCache (see
    the module doc): a call encodes ``input_ids``/``attention_mask`` in chunks of ``chunk`` rows without a
    graph and returns the pooled vectors as a leaf that requires a gradient; with gradients disabled
    (GaussCSE's ``encoder_grad: 0``) it is the plain encoder.

    Args:
        encoder: the shared encoder (called as ``encoder(input_ids, attention_mask)``).
        chunk: rows per encoder pass.
    """

    def __init__(self, encoder: EncodeFn, chunk: int) -> None:
        if chunk < 1:
            raise ValueError(f"the cache chunk must be >= 1 rows, got {chunk}")
        self.encoder, self.chunk = encoder, int(chunk)
        self.leaves: list[torch.Tensor] = []  # one per call, in call order
        self._calls: list[tuple[torch.Tensor, torch.Tensor, list[tuple[slice, RandomState]]]] = []

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():
            return self.encoder(input_ids, attention_mask)
        rows = input_ids.shape[0]
        parts, chunks = [], []
        with torch.no_grad():
            for start in range(0, rows, self.chunk):
                piece = slice(start, min(start + self.chunk, rows))
                chunks.append((piece, RandomState(input_ids.device)))
                parts.append(self.encoder(input_ids[piece], attention_mask[piece]))
        leaf = torch.cat(parts).requires_grad_()
        self.leaves.append(leaf)
        self._calls.append((input_ids, attention_mask, chunks))
        return leaf

    def replay(self, grads: Sequence[torch.Tensor | None]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """For each call's chunks, in order: the chunk's vectors encoded again with a graph, under the random
        state of the first pass, and the chunk's rows of ``grads`` (the loss's gradient with respect to each
        leaf, :attr:`leaves`' order; a leaf the loss did not reach is skipped). The caller takes each chunk's
        parameter gradients before asking for the next, so one chunk's graph is alive at a time. Afterwards
        the random state is what it was before the replay (the replay draws nothing from the run's stream)."""
        if len(grads) != len(self._calls):
            raise ValueError(f"replay needs one gradient per cached call: {len(self._calls)} calls, {len(grads)}")
        now = RandomState(self.leaves[0].device) if self.leaves else None
        try:
            for (ids, mask, chunks), grad in zip(self._calls, grads):
                if grad is None:
                    continue
                for piece, state in chunks:
                    state.restore()
                    out = self.encoder(ids[piece], mask[piece])
                    yield out, grad[piece].to(out.dtype)
        finally:
            if now is not None:
                now.restore()
