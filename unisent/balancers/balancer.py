"""The balancer contract ([`Balancer`][unisent.balancers.Balancer]) and the one collective the balancers share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

__all__ = ["Balancer", "mean_over_processes"]


def weight_value(weight: torch.Tensor | float) -> float:
    """A balancer's weight as a plain number (Uncertainty's weights are tensors that carry a graph)."""
    return float(weight.detach()) if torch.is_tensor(weight) else float(weight)


def mean_over_processes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` averaged over the processes of the default group (in place; itself without DDP)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        cast(Callable[[torch.Tensor], object], torch.distributed.all_reduce)(tensor)  # untyped in torch
        tensor /= torch.distributed.get_world_size()
    return tensor


class Balancer(torch.nn.Module):
    """How the objectives combine on the shared encoder (see [`unisent.balancers`][unisent.balancers]).

    Subclasses set ``gradient_level`` (needs the per-objective gradient matrix) and implement
    [`weights`][unisent.balancers.Balancer.weights] (loss-level) or [`aggregate`][unisent.balancers.Balancer.aggregate];
    state that must survive a resume lives in parameters or buffers, whose learning rate is ``param_lr`` (``None``: the
    optimiser's).
    """

    gradient_level: bool = False
    param_lr: float | None = None

    def setup(self, names: Sequence[str]) -> None:
        """Called once with the names of every objective of the model, in order."""
        self.names = list(names)

    def weights(self, losses: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """Loss-level: each active objective's weight this step (a tensor; may carry gradient to the
        balancer's parameters), from the statically weighted, undetached ``losses``."""
        return {name: torch.ones((), device=loss.device) for name, loss in losses.items()}

    def regularizer(self, losses: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Loss-level: a term added to the loss for the balancer's own parameters (``None``: none)."""
        return None

    def aggregate(self, jacobian: torch.Tensor, names: Sequence[str], step: int) -> torch.Tensor:
        """Gradient-level: one update vector from the per-objective gradient matrix (rows: ``names``)."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """``{"class_path": ...}`` (subclasses add ``init_args``) for the checkpoint's record; unisent's own
        balancers are named by their package (``unisent.balancers.DWA``, as recipes write it)."""
        module = type(self).__module__
        if module.startswith(f"{__package__}."):
            module = __package__
        return {"class_path": f"{module}.{type(self).__qualname__}"}
