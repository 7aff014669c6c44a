"""Length-grouped sampling: batches of sentences of similar length, so less padding."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

__all__ = ["LengthGroupedSampler"]


class LengthGroupedSampler(Sampler[int]):
    """Yield indices so that consecutive ``batch_size`` runs have similar lengths.

    Each epoch: shuffle all indices, cut them into mega-batches of ``batch_size * mega_batch_factor``,
    sort each mega-batch by length (longest first), cut it into batches and shuffle the batch order.
    The batches stay random in content across the corpus but are homogeneous in length.

    Effect on contrastive learning: in-batch negatives become sentences of similar length, so length
    is no longer a cue for telling them apart. This is usually harmless and sometimes helps; it
    changes the negative distribution, so keep it off when reproducing a paper's numbers exactly.

    Under DDP, Lightning wraps this sampler and gives each process every ``world_size``-th index;
    neighbouring indices have similar lengths, so each process's batches stay homogeneous.

    Args:
        lengths: token length of each example.
        batch_size: batch size of the loader using this sampler.
        mega_batch_factor: how many batches are sorted together.
        seed: base seed; the epoch (see :meth:`set_epoch`) is added.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, mega_batch_factor: int = 50, seed: int = 0) -> None:
        self.lengths = torch.as_tensor(list(lengths))
        self.batch_size = batch_size
        self.mega = batch_size * mega_batch_factor
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(len(self.lengths), generator=g)
        batches = []
        for mega in perm.split(self.mega):
            order = torch.argsort(self.lengths[mega], descending=True, stable=True)
            batches.extend(mega[order].split(self.batch_size))
        full = [b for b in batches if len(b) == self.batch_size]
        partial = [b for b in batches if len(b) != self.batch_size]
        shuffled = [full[i] for i in torch.randperm(len(full), generator=g).tolist()] + partial
        return iter(torch.cat(shuffled).tolist() if shuffled else [])
