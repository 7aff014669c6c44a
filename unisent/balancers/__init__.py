"""Balancers: how the objectives of one run combine on the shared encoder, without hand-set weights.

A model with several objectives trains one encoder on several losses. Each objective keeps its own
parameters (GaussCSE's Gaussian head, EASE's entity table, CMLM's projections and MLM head); the
encoder's parameters are shared. A *balancer* decides how the objectives' gradients on the **shared
encoder** combine into one update; every objective's own parameters always receive the gradient of
that objective's own loss (times its static ``weight``), whatever the balancer does to the encoder.

Two kinds, picked in YAML as ``model.balancer: {class_path: unisent.balancers.<Name>}``:

- **loss-level** (:class:`Static`, :class:`Uncertainty`, :class:`DWA`): a weight per objective. The
  encoder receives ``sum_i w_i * grad L_i``; one backward pass per objective, as cheap as a plain
  weighted sum. An objective's own parameters get ``grad L_i``.
- **gradient-level** (:class:`PCGrad`, :class:`JacobianAggregator`): the per-objective gradients of the
  shared encoder, one row each of a matrix ``J`` (objectives x encoder parameters), are aggregated
  into one vector by an aggregator of `torchjd <https://torchjd.org>`_ (PCGrad's projections, UPGrad,
  MGDA, ...). The gradients come from one ``torch.autograd.grad`` call per objective over that
  objective's own graph (the objectives run separate forward passes, so the backward work is the
  same as one pass over their sum); the combined vector reaches the parameters through a surrogate
  loss ``sum_p <g_p, p>`` whose gradient is exactly ``g``, so Lightning's automatic optimisation,
  gradient clipping, accumulation and DDP work unchanged.

Correctness under DDP and gradient accumulation (``tests/test_balancers.py``):

- gradient-level: ``J`` is summed over the micro-batches of one optimiser step and averaged over
  processes (``all_reduce``) before it is aggregated once per optimiser step, so two processes (or
  two accumulated micro-batches) give the update one process gives on the whole batch;
- DWA averages each objective's loss over processes and micro-batches before it forms loss ratios,
  and changes its weights only at optimiser-step boundaries;
- Uncertainty's log-variances are parameters: DDP averages their gradients like any other.

Why written here and not taken whole from a multi-task library: LibMTL and torchjd balance losses or
Jacobians of a model they own; here the objectives, their own heads, Lightning's loops (accumulation,
DDP's gradient hooks, checkpoints) and the per-step weight schedule are unisent's. The aggregation
itself is torchjd's (:class:`JacobianAggregator`); what is written here is the bookkeeping around it
and the two loss-weighting rules, each a few lines from its paper.

Conflict logging (:class:`ConflictLog`): every N optimiser steps the per-objective gradient
norms on the shared encoder and their pairwise cosines are logged (``conflict/<a>/grad_norm``,
``conflict/<a>~<b>/cosine``), appended to ``conflicts.csv`` in the run folder (:class:`GradientConflicts`),
sent to W&B as a matrix table when a logger is W&B, and plotted to ``conflicts.png`` at the end of training.

The files: :mod:`~unisent.balancers.balancer` (the :class:`Balancer` contract), :mod:`~unisent.balancers.loss_level`,
:mod:`~unisent.balancers.gradient_level`, :mod:`~unisent.balancers.step_gradients` (each objective's
gradients taken right after its own forward pass, so that a step holds one objective's graph at a time),
:mod:`~unisent.balancers.jacobian` (the per-objective gradient matrix: accumulation over micro-batches,
reduction over processes, reset after each optimiser step) and
:mod:`~unisent.balancers.conflicts`. Every public name is importable from ``unisent.balancers``.
"""

from .balancer import Balancer, mean_over_processes, weight_value
from .conflicts import (
    ConflictLog,
    GradientConflicts,
    conflict_stats,
    gram,
    gram_stats,
    mean_cosines,
    plot_conflicts,
    read_conflicts,
)
from .gradient_level import JacobianAggregator, MissingDependencyError, PCGrad
from .jacobian import JacobianAccumulator, flat_grads, loss_level_conflicts, surrogate
from .loss_level import DWA, Static, Uncertainty
from .step_gradients import StepGradients

__all__ = [
    "DWA",
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
    "flat_grads",
    "gram",
    "gram_stats",
    "loss_level_conflicts",
    "mean_cosines",
    "mean_over_processes",
    "plot_conflicts",
    "read_conflicts",
    "surrogate",
    "weight_value",
]
