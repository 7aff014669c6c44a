"""Balancers: how the objectives of one run combine on the shared encoder, without hand-set weights.

A balancer decides how the objectives' gradients on the **shared encoder** combine (each objective's own
parameters always get its own loss's gradient). Two kinds (``model.balancer: unisent.balancers.<Name>``):

- **loss-level** ([`Static`][unisent.balancers.Static], [`Uncertainty`][unisent.balancers.Uncertainty],
  [`DWA`][unisent.balancers.DWA]): one weight per objective, the encoder gets ``sum_i w_i * grad L_i``;
- **gradient-level** ([`PCGrad`][unisent.balancers.PCGrad],
  [`JacobianAggregator`][unisent.balancers.JacobianAggregator]): a `torchjd <https://torchjd.org>`_ aggregator over the
  matrix ``J`` (objectives x encoder parameters), applied through a surrogate loss whose gradient is exactly the
  aggregate, so Lightning's optimisation, clipping and DDP are unchanged.

Under DDP and accumulation ``J`` and DWA's loss means are summed over micro-batches and averaged over processes,
so the update equals one process's on the whole batch. Written here, not taken from LibMTL: the objectives,
Lightning's loops and the weight schedule are unisent's. Usage and costs: docs/training.md, "Balancers".
"""

from .balancer import Balancer, weight_value
from .conflicts import (
    ConflictLog,
    GradientConflicts,
    conflict_stats,
    mean_cosines,
    plot_conflicts,
    read_conflicts,
)
from .gradient_level import Anchored, JacobianAggregator, MissingDependencyError, PCGrad
from .loss_level import DWA, Static, Uncertainty
from .step_gradients import JacobianAccumulator, StepGradients

__all__ = [
    "DWA",
    "Anchored",
    "PCGrad",
    "Balancer",
    "ConflictLog",
    "GradientConflicts",
    "JacobianAccumulator",
    "JacobianAggregator",
    "MissingDependencyError",
    "Static",
    "StepGradients",
    "Uncertainty",
    "conflict_stats",
    "mean_cosines",
    "plot_conflicts",
    "read_conflicts",
    "weight_value",
]
