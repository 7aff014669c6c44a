"""Optimiser defaults and the warm-up + linear-decay schedule."""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["AdamW", "warmup_linear_lambda", "split_weight_decay"]


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` with fine-tuning defaults (lr 3e-5, no weight decay, fused kernel).

    ``fused=None`` picks the fused implementation (one kernel for all parameters) whenever the
    installed torch supports it for the parameters' device; it is numerically the same update.
    Any other torch optimiser can be used instead through ``class_path``.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 3e-5,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        fused: bool | None = None,
    ) -> None:
        params = list(params)
        if fused is None:
            fused = _fused_supported(params)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused)


def _fused_supported(params: list) -> bool:
    tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
    return bool(tensors) and all(t.is_floating_point() and t.device.type in ("cpu", "cuda") for t in tensors)


def split_weight_decay(named_parameters: Iterable[tuple[str, torch.nn.Parameter]]) -> list[dict]:
    """Two parameter groups: biases and norm weights get no weight decay (as in BERT fine-tuning)."""
    decay, no_decay = [], []
    for name, param in named_parameters:
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "norm" in name.lower() else decay).append(param)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_linear_lambda(warmup_steps: int, total_steps: int, decay: bool = True):
    """Multiplier of the learning rate: linear warm-up to 1, then linear decay to 0 (or constant)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        if not decay:
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor
