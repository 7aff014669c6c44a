"""The per-objective gradient matrix ``J`` of the shared encoder (objectives x shared parameters): summed
over an optimiser step's micro-batches, averaged over processes, aggregated once by a gradient-level
balancer and applied through ``surrogate`` (see [`unisent.balancers`][unisent.balancers])."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import torch

from .balancer import Balancer, mean_over_processes
from .conflicts import conflict_stats

__all__ = ["JacobianAccumulator", "flat_grads", "loss_level_conflicts", "surrogate"]

Pairs = list[tuple[torch.nn.Parameter, torch.Tensor]]
#: ``torch.autograd.grad`` as typed for ``allow_unused=True``: ``None`` for an input the output does not reach
grad_or_none = cast(Callable[..., tuple[torch.Tensor | None, ...]], torch.autograd.grad)


def flat_grads(loss: torch.Tensor, params: Sequence[torch.nn.Parameter], retain_graph: bool) -> torch.Tensor:
    """The gradient of ``loss`` w.r.t. ``params`` as one flat vector (zeros where it does not reach)."""
    flat = torch.zeros(sum(p.numel() for p in params), device=loss.device)
    add_to_row(flat, params, grad_or_none(loss, params, retain_graph=retain_graph, allow_unused=True))
    return flat


def add_to_row(
    row: torch.Tensor, params: Sequence[torch.nn.Parameter], grads: Sequence[torch.Tensor | None]
) -> list[bool]:
    """Add each gradient (``None``: not reached) to its parameter's slice of ``row``; which were reached."""
    reached, offset = list[bool](), 0
    for p, g in zip(params, grads):
        if g is not None:
            row[offset : offset + p.numel()] += g.reshape(-1).to(row.dtype)
        reached.append(g is not None)
        offset += p.numel()
    return reached


def surrogate(pairs: Iterable[tuple[torch.nn.Parameter, torch.Tensor]]) -> torch.Tensor | None:
    """``sum_p <g_p, p>``: a loss whose gradient with respect to each ``p`` is exactly ``g_p`` (no pairs: ``None``)."""
    total: torch.Tensor | None = None
    for p, g in pairs:
        term = (g.detach().to(p.dtype) * p).sum()
        total = term if total is None else total + term
    return total


def loss_level_conflicts(losses: dict[str, torch.Tensor], shared: Sequence[torch.nn.Parameter]) -> dict[str, Any]:
    """[`conflict_stats`][unisent.balancers.conflict_stats] of ``losses`` on ``shared`` for a loss-level
    balancer: one extra gradient per objective (graphs retained), averaged over processes."""
    names = list(losses)
    rows = torch.stack([flat_grads(losses[n], shared, retain_graph=True) for n in names])
    return conflict_stats(mean_over_processes(rows), names)


class JacobianAccumulator:
    """The per-objective gradient matrix over one optimiser step's micro-batches, rows ``names`` (every
    objective, in order), and its aggregation (see the module doc)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.matrix: torch.Tensor | None = None  # per-objective shared gradients summed over micro-batches
        self.rows: set[str] = set()  # the objectives that had a loss since the last optimiser step

    def reset(self) -> None:
        """Forget the gradients gathered so far (after an optimiser step)."""
        if self.matrix is not None:
            self.matrix.zero_()
        self.rows = set()

    def row(self, name: str, shared: Sequence[torch.nn.Parameter]) -> torch.Tensor:
        """Objective ``name``'s row of the matrix (a view: what is added to it counts), made on first use."""
        size = sum(p.numel() for p in shared)
        if self.matrix is None or self.matrix.shape != (len(self.names), size):
            self.matrix = torch.zeros(len(self.names), size, device=shared[0].device)
            self.rows = set()
        self.rows.add(name)
        return self.matrix[self.names.index(name)]

    def take(self) -> tuple[torch.Tensor, list[str]]:
        """This step's rows of the objectives that had a loss, averaged over processes, and their names (no copy when
        every objective had one); the caller then calls [`reset`][unisent.balancers.JacobianAccumulator.reset]."""
        if self.matrix is None:
            raise RuntimeError("no gradient was added since the last optimiser step")
        mean_over_processes(self.matrix)  # every process aggregates the same matrix: the one of the whole batch
        names = [n for n in self.names if n in self.rows]
        if names == self.names:
            return self.matrix, names
        return self.matrix[[self.names.index(n) for n in names]], names

    def update(
        self,
        balancer: Balancer,
        shared: Sequence[torch.nn.Parameter],
        *,
        step: int,
        conflicts: bool = False,
        parameters: Iterable[torch.nn.Parameter] = (),
    ) -> tuple[Pairs, dict[str, Any] | None]:
        """The balancer's aggregation of this step's matrix ([`take`][unisent.balancers.JacobianAccumulator.take]) as
        ``(parameter, gradient)`` pairs of ``shared``, in float32 whatever the autocast (a bf16 Gramian keeps ~3
        digits), and with ``conflicts`` its statistics; then [`reset`][unisent.balancers.JacobianAccumulator.reset].
        Under DDP every other trainable one of ``parameters`` gets a zero gradient (DDP reduces them all)."""
        jacobian, names = self.take()
        with torch.autocast(jacobian.device.type, enabled=False):
            combined = balancer.aggregate(jacobian.float(), names, step)
        stats = conflict_stats(jacobian, names) if conflicts else None
        if combined.untyped_storage().data_ptr() == jacobian.untyped_storage().data_ptr():
            combined = combined.clone()  # a view of the matrix: the reset must not clear it
        del jacobian
        self.reset()  # the next optimiser step starts from 0
        pairs: Pairs = [(p, g.view_as(p)) for p, g in zip(shared, torch.split(combined, [p.numel() for p in shared]))]
        if torch.distributed.is_available() and torch.distributed.is_initialized():  # DDP reduces every one
            seen = {id(p) for p, _ in pairs}
            pairs += [(p, torch.zeros_like(p)) for p in parameters if p.requires_grad and id(p) not in seen]
        return pairs, stats
