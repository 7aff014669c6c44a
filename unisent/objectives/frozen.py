"""A frozen sub-module of an objective (a teacher, a fixed reference encoder): the pattern, in one class.

An ``nn.Module`` attribute of an objective is part of the training module's tree, and so everything
Lightning does to the tree applies to it: its parameters reach ``parameters()`` (the optimiser, DDP's
bucket, gradient clipping), its weights every checkpoint (a teacher of BERT size: +420 MB per file),
``module.train()`` switches its dropout back on at the start of every epoch and after every
validation, and a module kept in eval mode makes Lightning warn ("Found N module(s) in eval mode") on
every run. :class:`Frozen` holds the module *outside* the tree instead (a plain attribute, not a
registered child), so none of that happens, and does the few things the tree did that a frozen
module still needs: it follows the input's device, runs without building a graph, and stays in eval
mode. What is left to its owner is to rebuild it from its spec in ``setup_for`` (it is in no
checkpoint), which is what makes resuming exact: the spec, not the file, defines it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["Frozen"]


class Frozen:
    """Hold ``module`` frozen, outside the module tree of whatever object stores this holder.

    ``frozen(*args)`` calls the module under ``torch.no_grad()`` in eval mode, on the device of the
    first tensor argument (the module is moved there on first use, so it follows the training module
    to the GPU without being one of its children). Its parameters never require gradients.

    Example::

        class MyObjective(Objective):
            def setup_for(self, encoder):
                if getattr(self, "_teacher", None) is None:  # setup_for may be called twice
                    self._teacher = Frozen(copy.deepcopy(encoder))

            def forward(self, encoder, batch):
                target = self._teacher(ids, mask)  # no graph, eval mode, on ids' device
    """

    def __init__(self, module: nn.Module) -> None:
        if not isinstance(module, nn.Module):
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
        """Move the module to ``device`` (nothing to do where it is already)."""
        first = next(self.module.parameters(), None)
        if first is not None and first.device != torch.device(device):
            self.module.to(device)
        return self

    def __repr__(self) -> str:
        return f"Frozen({type(self.module).__name__})"
