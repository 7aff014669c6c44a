"""The one cross-device gather used by every contrastive loss.

Candidates (positives, negatives, entity vectors...) are gathered from all processes *with
gradients*; anchors stay local and their labels are offset by ``rank * local_batch``. Each process
then computes the mean loss over its own anchors; DDP's gradient averaging makes the update equal to
that of one process on the global batch. Gathering the anchors too and computing one global loss on
every process would scale the gradients by the world size (open_clip issue 616).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.distributed as dist

__all__ = ["gather_with_grad", "gather_no_grad", "rank_and_world", "label_offset"]


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` (batch, ...) from all processes along dim 0, keeping gradients.

    Every process must pass the same shape. Backward sums the gradient each process computes for a
    slice and routes it to the process that owns the slice. A no-op on one process.
    """
    _, world = rank_and_world()
    if world == 1:
        return tensor
    # torch's own annotation of the group parameter holds an unresolved name: the stub, not this call
    from torch.distributed._functional_collectives import all_gather_tensor_autograd  # pyright: ignore[reportUnknownVariableType]

    world_group = cast(dist.ProcessGroup, dist.group.WORLD)  # not None: the process group is initialised
    return all_gather_tensor_autograd(tensor.contiguous(), gather_dim=0, group=world_group)


def gather_no_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Like [`gather_with_grad`][unisent.losses.gather_with_grad] for tensors that need no gradient (ids, masks); a
    no-op on one process."""
    _, world = rank_and_world()
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())  # pyright: ignore[reportUnknownMemberType]  # torch: unannotated
    return torch.cat(parts)


def label_offset(local_batch: int) -> int:
    """Index of this process's first row in a gathered tensor."""
    rank, _ = rank_and_world()
    return rank * local_batch
