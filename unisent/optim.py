"""Optimiser defaults and the warm-up + linear-decay schedule."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import overload

import torch

__all__ = ["AdamW", "Lamb", "warmup_linear_lambda", "split_weight_decay"]


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` with fine-tuning defaults (lr 3e-5, no weight decay); ``fused=None`` uses the
    fused kernel (numerically the same update) wherever torch supports it for the parameters' device."""

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


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
    Algorithm 2): Adam's direction with decoupled weight decay, rescaled per parameter tensor by a
    trust ratio. CMLM trains with it (lr 1e-3, betas 0.9 / 0.999; Yang et al. 2021, Sec. 3).

    For each parameter ``p`` with gradient ``g`` at step ``t``::

        m = beta1 m + (1 - beta1) g            v = beta2 v + (1 - beta2) g^2
        m_hat = m / (1 - beta1^t)              v_hat = v / (1 - beta2^t)      (if bias_correction)
        u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p
        trust = ||p|| / ||u||   (1 if either norm is 0; clipped to max_trust_ratio if set)
        p = p - lr * trust * u

    ``weight_decay`` is read per parameter group (the no-decay group of ``split_weight_decay`` gets
    none). With ``adapt_no_decay=False`` a group without weight decay also skips the trust ratio (plain
    Adam), as TensorFlow Addons' LAMB does. ``max_trust_ratio`` None: no clipping, as in the paper."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        bias_correction: bool = True,
        adapt_no_decay: bool = True,
        max_trust_ratio: float | None = None,
    ) -> None:
        if lr <= 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"invalid LAMB settings: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        if max_trust_ratio is not None and max_trust_ratio <= 0:
            raise ValueError(f"max_trust_ratio must be positive, got {max_trust_ratio}")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "bias_correction": bias_correction,
            "adapt_no_decay": adapt_no_decay,
            "max_trust_ratio": max_trust_ratio,
        }
        super().__init__(params, defaults)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            decay = group["weight_decay"]
            adapt = group["adapt_no_decay"] or decay != 0
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                grad = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                m_hat, v_hat = m, v
                if group["bias_correction"]:
                    m_hat = m / (1 - beta1 ** state["step"])
                    v_hat = v / (1 - beta2 ** state["step"])
                param = p.float()
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if decay:
                    update = update + decay * param
                trust = 1.0
                if adapt:
                    w_norm, u_norm = param.norm(), update.norm()
                    trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                    if group["max_trust_ratio"] is not None:
                        trust = trust.clamp(max=group["max_trust_ratio"])
                p.copy_((param - group["lr"] * trust * update).to(p.dtype))
        return loss


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
