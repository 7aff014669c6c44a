"""The balancer contract (:class:`Balancer`) and the one collective the balancers share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["Balancer", "mean_over_processes"]


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def weight_value(weight: torch.Tensor | float) -> float:
    """A balancer's weight as a plain number (Uncertainty's weights are tensors that carry a graph)."""
    return float(weight.detach()) if torch.is_tensor(weight) else float(weight)


def mean_over_processes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` averaged over the processes of the default group (in place; itself without DDP)."""
    if _distributed() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(tensor)
        tensor /= torch.distributed.get_world_size()
    return tensor


class Balancer(torch.nn.Module):
    """How the objectives combine on the shared encoder (see :mod:`unisent.balancers`).

    Subclasses set :attr:`gradient_level` and implement :meth:`weights` (loss-level) or
    :meth:`aggregate` (gradient-level). :meth:`setup` is called once with the objective names before
    training; state that must survive a resume is kept in parameters or buffers (the checkpoint
    holds them).

    Attributes:
        gradient_level: whether the balancer needs the per-objective gradient matrix.
        param_lr: learning rate of the balancer's own parameters (their own optimiser group); ``None``:
            the optimiser's.
    """

    gradient_level: bool = False
    param_lr: float | None = None

    def setup(self, names: Sequence[str]) -> None:
        """Called once with the names of every objective of the model, in order."""
        self.names = list(names)

    def weights(self, losses: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """Loss-level: each active objective's weight on the shared encoder this step (a tensor that may
        carry gradient to the balancer's parameters). ``losses`` are the objectives' losses with their
        static weight applied (not detached)."""
        return {name: torch.ones((), device=loss.device) for name, loss in losses.items()}

    def regularizer(self, losses: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Loss-level: a term added to the loss for the balancer's own parameters (``None``: none)."""
        return None

    def aggregate(self, jacobian: torch.Tensor, names: Sequence[str], step: int) -> torch.Tensor:
        """Gradient-level: one update vector from the per-objective gradient matrix (rows: ``names``)."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """``{"class_path": ...}`` (and ``init_args`` in subclasses), as the checkpoint's record keeps it.
        unisent's own balancers are named by the package that exports them (``unisent.balancers.DWA``,
        the path recipes use), not by the file they are written in."""
        module = type(self).__module__
        if module.startswith(f"{__package__}."):
            module = __package__
        return {"class_path": f"{module}.{type(self).__qualname__}"}
