"""A frozen sub-module of an objective (a teacher, a fixed reference encoder), held outside the module tree: as a
registered child it would reach the optimiser, DDP and every checkpoint, and be switched back to train mode
(docs/new-objective.md, "A frozen sub-module"). Its owner rebuilds it from its spec in ``setup_for``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["Frozen"]


class Frozen:
    """Hold ``module`` frozen, outside the module tree of whatever object stores this holder: ``frozen(*args)``
    calls the module under ``torch.no_grad()`` in eval mode, moved to the device of the first tensor argument. Its
    parameters never require gradients.
    """

    def __init__(self, module: nn.Module) -> None:
        if not isinstance(module, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]  # untyped callers pass anything
            raise TypeError(f"Frozen holds a torch.nn.Module, got {type(module).__name__}")
        module.requires_grad_(False)
        self.module = module.eval()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        device = next((a.device for a in (*args, *kwargs.values()) if torch.is_tensor(a)), None)
        if device is not None:
            self.to(device)
        self.module.eval()  # whatever called .train() on the module itself
        with torch.no_grad():
            return self.module(*args, **kwargs)

    def to(self, device: torch.device | str) -> Frozen:
        """Move the module to ``device`` (if not there already)."""
        first = next(self.module.parameters(), None)
        if first is not None and first.device != torch.device(device):
            self.module.to(device)
        return self

    def __repr__(self) -> str:
        return f"Frozen({type(self.module).__name__})"
