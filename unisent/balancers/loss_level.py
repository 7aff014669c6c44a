"""Loss-level balancers: one weight per objective on the shared encoder, as cheap as a weighted sum."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .balancer import Balancer, mean_over_processes

__all__ = ["DWA", "Static", "Uncertainty"]


class Static(Balancer):
    """The default: the encoder gets ``sum_i weight_i * grad L_i``, each objective's own ``weight`` (and
    ``model.train.weight_schedule``)."""


class Uncertainty(Balancer):
    """Homoscedastic uncertainty weighting (Kendall, Gal and Cipolla, CVPR 2018, eq. 7 as multi-task libraries write
    it): ``sum_i exp(-s_i) * L_i + s_i``, one learned ``s_i = log sigma_i^2`` per objective; at the optimum
    ``exp(-s_i) = 1 / L_i`` brings each loss to the same scale.

    Args:
        lr: learning rate of the ``s_i`` (own optimiser group): at an encoder's 5e-5 they would barely
            move; 1e-2 lets ``exp(-s)`` travel a factor of ~6 in 186 Adam steps.
        init: initial ``s_i`` (0: every weight starts at 1, as with [`Static`][unisent.balancers.Static]).
    """

    def __init__(self, lr: float = 1e-2, init: float = 0.0) -> None:
        super().__init__()
        self.param_lr = lr
        self.init = init

    def setup(self, names: Sequence[str]) -> None:
        super().setup(names)
        self.log_vars = torch.nn.Parameter(torch.full((len(self.names),), float(self.init)))

    def weights(self, losses: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        return {name: torch.exp(-self.log_vars[self.names.index(name)]) for name in losses}

    def regularizer(self, losses: dict[str, torch.Tensor]) -> torch.Tensor:
        active = torch.zeros(len(self.names), dtype=torch.bool, device=self.log_vars.device)
        active[[self.names.index(n) for n in losses]] = True
        # inactive objectives keep their s_i in the graph (zero gradient): DDP sees every parameter used
        return (self.log_vars * active).sum()

    def config(self) -> dict[str, Any]:
        return super().config() | {"init_args": {"lr": self.param_lr, "init": self.init}}


class DWA(Balancer):
    """Dynamic Weight Average (Liu, Johns and Davison, "End-to-End Multi-Task Learning with Attention", CVPR 2019,
    eq. 7): ``w_i = K * softmax_i(r_i / T)`` with ``r_i = L_i(t-1) / L_i(t-2)``: a loss that stops falling gets more
    weight. A period is ``period`` optimiser steps (the paper's: an epoch), ``L_i(t)`` the loss's mean over it (all
    micro-batches and processes); weights are 1 for the first two periods.

    Args:
        temperature: T (the paper's 2).
        period: optimiser steps per period.
    """

    # registered by setup: sums and counts of the current period; the means of the last two complete periods
    current_sum: torch.Tensor
    current_count: torch.Tensor
    previous: torch.Tensor
    current_period: torch.Tensor

    def __init__(self, temperature: float = 2.0, period: int = 10) -> None:
        super().__init__()
        if temperature <= 0 or period < 1:
            raise ValueError(f"DWA needs temperature > 0 and period >= 1, got {temperature}, {period}")
        self.temperature = temperature
        self.period = period

    def setup(self, names: Sequence[str]) -> None:
        super().setup(names)
        k = len(self.names)
        self.register_buffer("current_sum", torch.zeros(k, dtype=torch.float64))
        self.register_buffer("current_count", torch.zeros(k, dtype=torch.float64))
        self.register_buffer("previous", torch.full((2, k), float("nan"), dtype=torch.float64))
        self.register_buffer("current_period", torch.zeros((), dtype=torch.long))

    def _roll(self, step: int) -> None:
        period = step // self.period
        while int(self.current_period) < period:
            mean = self.current_sum / self.current_count.clamp_min(1)
            mean[self.current_count == 0] = float("nan")
            self.previous = torch.stack([self.previous[1], mean])
            self.current_sum.zero_()
            self.current_count.zero_()
            self.current_period += 1

    def record(self, losses: dict[str, torch.Tensor]) -> None:
        values = torch.zeros(len(self.names), dtype=torch.float64, device=self.current_sum.device)
        seen = torch.zeros_like(values)
        for i, name in enumerate(self.names):
            if name in losses:
                values[i] = float(losses[name].detach())
                seen[i] = 1.0
        both = mean_over_processes(torch.stack([values * seen, seen]))
        self.current_sum += both[0] / both[1].clamp_min(1e-12) * (both[1] > 0)
        self.current_count += (both[1] > 0).double()

    def current(self) -> torch.Tensor:
        """Every objective's weight now: ``K * softmax(r / T)`` over the K objectives with a loss in both
        of the last two periods; 1 for the others."""
        older, last = self.previous
        weights = torch.ones(len(self.names), dtype=torch.float64)
        valid = ~(torch.isnan(older) | torch.isnan(last)) & (older > 0)
        if valid.any():
            ratio = last[valid] / older[valid]
            weights[valid] = int(valid.sum()) * torch.softmax(ratio / self.temperature, dim=0)
        return weights

    def weights(self, losses: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        self._roll(step)
        w = self.current()
        self.record(losses)
        first = next(iter(losses.values()))
        return {name: w[self.names.index(name)].to(first.device, torch.float32) for name in losses}

    def config(self) -> dict[str, Any]:
        return super().config() | {"init_args": {"temperature": self.temperature, "period": self.period}}
