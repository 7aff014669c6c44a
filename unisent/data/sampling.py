"""Training samplers: deterministic, shardable, resumable; optional length grouping (less padding)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import DistributedSampler, Sampler

__all__ = ["LengthGroupedSampler", "ResumableSampler", "length_grouped_order"]

# seed distance between the passes of one epoch (a shorter loader cycled by CombinedLoader): no collision
# with other epochs' seeds
_PASS_STRIDE = 1_000_003


def length_grouped_order(lengths: torch.Tensor, group: int, mega: int, generator: torch.Generator) -> torch.Tensor:
    """A permutation of ``range(len(lengths))`` whose consecutive runs of ``group`` have similar lengths (as
    [`LengthGroupedSampler`][unisent.data.LengthGroupedSampler] describes, with mega-batches of ``mega``); partial
    groups come last."""
    perm = torch.randperm(len(lengths), generator=generator)
    groups = []
    for chunk in perm.split(mega):
        order = torch.argsort(lengths[chunk], descending=True, stable=True)
        groups.extend(chunk[order].split(group))
    full = [g for g in groups if len(g) == group]
    partial = [g for g in groups if len(g) != group]
    shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()] + partial
    return torch.cat(shuffled) if shuffled else torch.empty(0, dtype=torch.long)


class LengthGroupedSampler(Sampler[int]):
    """Yield indices so that consecutive ``batch_size`` runs have similar lengths (single process; the DataModule uses
    [`ResumableSampler`][unisent.data.ResumableSampler] with ``lengths``, which orders the data the same way).

    Each epoch: shuffle all indices, cut them into mega-batches of ``batch_size * mega_batch_factor``,
    sort each by length (longest first), cut it into batches and shuffle the batch order: batches random
    in content, homogeneous in length. The epoch (``set_epoch``) is added to ``seed``.

    Effect on contrastive learning: in-batch negatives have similar lengths, so length is no longer a
    cue. Usually harmless, sometimes helpful; it changes the negative distribution, so keep it off when
    reproducing a paper's numbers exactly.
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
        return iter(length_grouped_order(self.lengths, self.batch_size, self.mega, g).tolist())


class ResumableSampler(DistributedSampler):
    """The training sampler: a deterministic order per (seed, epoch, pass), sharded, resumable.

    * **Deterministic.** The order depends only on ``seed``, the epoch
      ([`set_epoch`][unisent.data.ResumableSampler.set_epoch]) and the pass within the epoch (a loader cycled by
      ``CombinedLoader`` starts a new pass each time), never on the global random state, which dropout uses.
    * **Sharded.** Global batches of ``batch_size * num_replicas``, process ``rank`` taking its
      contiguous slice of each: every process gets the same number of full batches (contrastive losses
      gather equal-sized batches). A ``DistributedSampler`` subclass, so Lightning does not wrap it.
    * **Resumable.** [`set_position`][unisent.data.ResumableSampler.set_position] starts the next pass at a given batch
      by index arithmetic:
      nothing before it is read, tokenised or collated.
    * **Length grouping** (``lengths``): global batches formed as by
      [`LengthGroupedSampler`][unisent.data.LengthGroupedSampler].

    Incomplete global batches are dropped (as ``drop_last=True``). ``batch_size`` is per process;
    ``shuffle=False`` keeps the dataset order (sharded the same way); ``mega_batch_factor``: with
    ``lengths``, how many global batches are sorted together.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        lengths: Sequence[int] | None = None,
        mega_batch_factor: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        # DistributedSampler.__init__ is not called: it needs a process group and a dataset
        if batch_size < 1 or num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"need batch_size >= 1 and 0 <= rank < num_replicas, got {batch_size}, {rank}, {num_replicas}"
            )
        if lengths is not None and len(lengths) != num_samples:
            raise ValueError(f"got {len(lengths)} lengths for {num_samples} samples")
        self.dataset_size = num_samples
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.lengths = torch.as_tensor(list(lengths)) if lengths is not None else None
        self.mega_batch_factor = mega_batch_factor
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = True
        self.epoch = 0
        self._pass = 0  # the pass that the next __iter__ starts
        self._start = 0  # the batch that the next __iter__ starts at (set by set_position)
        self.num_samples = self.num_batches * batch_size  # DistributedSampler's attribute: per process
        self.total_size = self.num_samples * num_replicas

    @property
    def num_batches(self) -> int:
        """Full batches per process and pass."""
        return self.dataset_size // (self.batch_size * self.num_replicas)

    def __len__(self) -> int:
        return self.num_batches * self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at pass 0, batch 0; a no-op in the current epoch (Lightning sets it again on resume)."""
        if epoch != self.epoch:
            self.epoch, self._pass, self._start = epoch, 0, 0

    def set_position(self, epoch: int, pass_: int = 0, batch: int = 0) -> None:
        """Make the next pass over the data ``pass_`` of ``epoch``, starting at its batch ``batch``."""
        if not 0 <= batch <= self.num_batches:
            raise ValueError(f"batch {batch} is outside a pass of {self.num_batches} batches")
        self.epoch, self._pass, self._start = epoch, pass_, batch

    def generator(self, epoch: int, pass_: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed + epoch + _PASS_STRIDE * pass_)

    def global_order(self, epoch: int, pass_: int = 0) -> torch.Tensor:
        """All indices in the order of pass ``pass_`` of ``epoch``, before sharding."""
        n = self.dataset_size
        if not self.shuffle:
            return torch.arange(n)
        g = self.generator(epoch, pass_)
        if self.lengths is None:
            return torch.randperm(n, generator=g)
        group = self.batch_size * self.num_replicas
        return length_grouped_order(self.lengths, group, group * self.mega_batch_factor, g)

    def batches(self, epoch: int, pass_: int = 0) -> torch.Tensor:
        """This process's batches of a pass: (num_batches, batch_size) indices."""
        order = self.global_order(epoch, pass_)[: self.num_batches * self.batch_size * self.num_replicas]
        return order.view(self.num_batches, self.num_replicas, self.batch_size)[:, self.rank]

    def __iter__(self) -> Iterator[int]:
        epoch, pass_, start = self.epoch, self._pass, self._start
        self._pass, self._start = pass_ + 1, 0
        return iter(self.batches(epoch, pass_)[start:].reshape(-1).tolist())
