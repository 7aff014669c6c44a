"""One micro-batch's gradients, taken objective by objective right after each objective's forward pass, so that
one objective's graph is alive at a time. The buffers: a gradient-level balancer's Jacobian rows; Static's one
summed row (one per objective on conflict-logging steps); one row per objective for the other loss-level balancers,
whose own parameters learn from ``sum_i w_i * L_i + regularizer`` on the detached losses.

The per-objective gradient matrix ``J`` of the shared encoder (objectives x shared parameters): summed
over an optimiser step's micro-batches, averaged over processes, aggregated once by a gradient-level
balancer and applied through ``surrogate`` (see [`unisent.balancers`][unisent.balancers]).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import torch

from .balancer import Balancer, mean_over_processes, weight_value
from .conflicts import conflict_stats
from .loss_level import Static

__all__ = ["JacobianAccumulator", "StepGradients", "loss_level_conflicts", "surrogate"]

#: ``Tensor.register_hook`` (untyped in torch): ``hook(grad)`` replaces the gradient of the tensor
_register_hook = cast(Callable[[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]], Any], torch.Tensor.register_hook)

Pairs = list[tuple[torch.nn.Parameter, torch.Tensor]]
#: ``torch.autograd.grad`` as typed for ``allow_unused=True``: ``None`` for an input the output does not reach
grad_or_none = cast(Callable[..., tuple[torch.Tensor | None, ...]], torch.autograd.grad)


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
    rows = torch.zeros(len(names), sum(p.numel() for p in shared), device=shared[0].device)
    for row, name in zip(rows, names):  # (zeros where a gradient does not reach)
        add_to_row(row, shared, grad_or_none(losses[name], shared, retain_graph=True, allow_unused=True))
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


class StepGradients:
    """The gradients of one micro-batch, objective by objective, for ``names`` (every objective, in order)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.jacobian = JacobianAccumulator(names)  # gradient-level: summed over micro-batches
        self.rows: torch.Tensor | None = None  # loss-level: this micro-batch's gradients (1 or k rows)
        self._started = False
        self._hooks: list[Any] = []
        self.seconds = 0.0  # spent in add and finish since start

    def start(
        self,
        balancer: Balancer,
        shared: Sequence[torch.nn.Parameter],
        own: dict[str, list[torch.nn.Parameter]],
        *,
        conflicts: bool = False,
        deferred: bool = False,
        cached: bool = False,
    ) -> None:
        """Begin a micro-batch: ``shared``, the encoder's trainable parameters; ``own``, each objective's;
        ``conflicts``: log conflict statistics. ``deferred``: keep every loss with its graph until
        [`finish`][unisent.balancers.StepGradients.finish] (FSDP, DeepSpeed); also taken for one objective under Static
        without conflicts, unless ``cached``."""
        for handle in self._hooks:  # the deferred order's hooks, used by the last micro-batch's backward pass
            handle.remove()
        self._hooks = []
        shared = list(shared)
        deferred = deferred or (len(self.names) == 1 and isinstance(balancer, Static) and not conflicts and not cached)
        deferred |= not shared  # a frozen encoder: only the objectives' own parameters learn, from the plain sum
        self.balancer, self.shared, self.own, self.conflicts = balancer, shared, own, conflicts
        self.deferred, self.losses = deferred, dict[str, torch.Tensor]()
        self.pairs: Pairs = []  # the own parameters' gradients
        self.values: dict[str, torch.Tensor] = {}  # each objective's loss, detached
        self.reached = [False] * len(self.shared)  # loss-level: shared parameters some objective reaches
        self._started = True
        self.seconds = 0.0
        if balancer.gradient_level or deferred:
            return
        single = isinstance(balancer, Static) and not conflicts
        shape = (1 if single else len(self.names), sum(p.numel() for p in self.shared))
        if self.rows is None or self.rows.shape != shape or self.rows.device != self.shared[0].device:
            self.rows = None  # the old buffer goes before the new one is made
            self.rows = torch.zeros(shape, device=self.shared[0].device)
        else:  # the last micro-batch's backward pass has used its rows (its surrogate holds views of them)
            self.rows.zero_()
        self._single = single

    def add(self, name: str, loss: torch.Tensor, leaves: Sequence[torch.Tensor] = ()) -> list[torch.Tensor | None]:
        """Take objective ``name``'s gradients of ``loss`` (its graph is freed): its shared row, its own parameters'.
        ``leaves``: GradCache's cached vectors (``unisent.objectives.grad_cache``); their gradients are returned, for
        the caller to replay each chunk into [`add_chunk`][unisent.balancers.StepGradients.add_chunk]."""
        if not self._started:
            raise RuntimeError("StepGradients.add before start")
        start = time.perf_counter()
        self.values[name] = loss.detach()
        leaves = list(leaves)
        if self.deferred:
            if leaves and self.shared:
                raise RuntimeError("cached objectives need their gradients at once (StepGradients.start(cached=True))")
            self.losses[name] = loss
            return []
        grads = self._take(name, loss, leaves)
        self.seconds += time.perf_counter() - start
        return grads

    def _take(self, name: str, loss: torch.Tensor, leaves: Sequence[torch.Tensor] = ()) -> list[torch.Tensor | None]:
        """``name``'s gradients of ``loss``: added to its shared row and its own parameters' pairs; the leaves'
        returned."""
        own = self.own.get(name, [])
        grads = grad_or_none(loss, [*leaves, *self.shared, *own], allow_unused=True)
        self._accumulate(self._row(name), grads[len(leaves) : len(leaves) + len(self.shared)])
        self.pairs += [(p, g) for p, g in zip(own, grads[len(leaves) + len(self.shared) :]) if g is not None]
        return list(grads[: len(leaves)])

    def add_chunk(self, name: str, vectors: torch.Tensor, grad: torch.Tensor) -> None:
        """Add to ``name``'s row the shared gradient of one replayed chunk's ``vectors``, given the loss's
        gradient ``grad`` w.r.t. them (GradCache); nothing without shared parameters or a graph."""
        if self.shared and vectors.requires_grad:
            start = time.perf_counter()
            self._accumulate(self._row(name), grad_or_none(vectors, self.shared, grad, allow_unused=True))
            self.seconds += time.perf_counter() - start

    def _row(self, name: str) -> torch.Tensor:
        """The buffer ``name``'s shared gradient is added to: its Jacobian row, its ``rows`` row, or
        Static's one summed row."""
        if self.balancer.gradient_level:
            return self.jacobian.row(name, self.shared)
        assert self.rows is not None  # made by start for a loss-level balancer
        return self.rows[0 if self._single else self.names.index(name)]

    def _accumulate(self, row: torch.Tensor, grads: Sequence[torch.Tensor | None]) -> None:
        reached = add_to_row(row, self.shared, grads)
        self.reached = [a or b for a, b in zip(self.reached, reached)]

    def finish(
        self, *, last: bool, step: int, parameters: Iterable[torch.nn.Parameter] = ()
    ) -> tuple[torch.Tensor, dict[str, Any] | None, dict[str, torch.Tensor]]:
        """The loss to call ``backward`` on, the conflict statistics (if asked) and a loss-level balancer's
        weights. Its value: the plain sum of the losses (gradient-level) or their weighted sum plus the
        regularizer (loss-level). ``last``: the last micro-batch of step ``step``; ``parameters``: the
        model's (under DDP a gradient-level step gives the others a zero gradient)."""
        start = time.perf_counter()
        self._started = False
        values = self.values
        if not values:  # no objective had a loss (switched off, or exhausted loaders)
            return torch.zeros((), device=self.shared[0].device), None, {}
        weights: dict[str, torch.Tensor] = {}
        if self.deferred and self.balancer.gradient_level and self.shared:
            for name, graph in self.losses.items():  # every graph alive until here: one gradient pass over each
                self._take(name, graph)
            self.losses = {}
        elif self.deferred:
            loss, stats, weights = self._deferred(step)
            self.seconds += time.perf_counter() - start
            return loss, stats, weights
        if self.balancer.gradient_level:
            pairs, stats = self._gradient_level(last, step, parameters)
            extra, value = None, sum(values.values())
        else:
            pairs, stats, weights, total = self._loss_level(step)
            # the balancer's own parameters (Uncertainty's log-variances) learn from its weighted loss
            extra, value = (total if total.requires_grad else None), total.detach()
        loss = surrogate(pairs)
        if extra is not None:
            loss = extra if loss is None else loss + extra
        if loss is None:  # nothing reaches a parameter yet (an accumulating micro-batch without own parameters)
            loss = self.shared[0].sum() * 0.0
        self.pairs = []
        self.seconds += time.perf_counter() - start
        return loss - loss.detach() + value, stats, weights

    def _deferred(self, step: int) -> tuple[torch.Tensor, dict[str, Any] | None, dict[str, torch.Tensor]]:
        """Every graph alive until here; a loss-level weighted sum, with hooks that divide each own
        parameter's gradient by its objective's weight."""
        losses, balancer = self.losses, self.balancer
        self.losses = {}
        if not self.shared:  # nothing shared to balance (a frozen encoder): each own parameter gets its own loss's
            return cast(torch.Tensor, sum(losses.values())), None, {}  # not empty: values has a loss
        stats = loss_level_conflicts(losses, self.shared) if self.conflicts else None
        weights = balancer.weights(losses, step)
        loss = self._weighted(weights, losses)
        if not isinstance(balancer, Static):
            for name, w in weights.items():
                w = weight_value(w)
                scale = 1.0 / w if w > 0 else 0.0
                self._hooks += [_register_hook(p, lambda g, s=scale: g * s) for p in self.own.get(name, [])]
        return loss, stats, weights

    def _gradient_level(
        self, last: bool, step: int, parameters: Iterable[torch.nn.Parameter]
    ) -> tuple[Pairs, dict[str, Any] | None]:
        if not last:
            return self.pairs, None
        shared, stats = self.jacobian.update(
            self.balancer, self.shared, step=step, conflicts=self.conflicts, parameters=parameters
        )
        # under DDP the zero gradients of the other parameters must not shadow the own parameters' pairs
        own = {id(p) for p, _ in self.pairs}
        return self.pairs + [(p, g) for p, g in shared if id(p) not in own], stats

    def _loss_level(self, step: int) -> tuple[Pairs, dict[str, Any] | None, dict[str, torch.Tensor], torch.Tensor]:
        values, rows = self.values, self.rows
        assert rows is not None  # made by start for a loss-level balancer
        stats = None
        if self.conflicts:  # the rows averaged over processes (the update is the same: DDP averages it again)
            mean_over_processes(rows)
            present = [n for n in self.names if n in values]
            stats = conflict_stats(rows, present, [self.names.index(n) for n in present])
        weights = self.balancer.weights(values, step)
        if self._single:
            update = rows[0]
        else:
            update = torch.zeros_like(rows[0])
            for name in values:
                update.add_(rows[self.names.index(name)], alpha=weight_value(weights[name]))
        slices = torch.split(update, [p.numel() for p in self.shared])
        pairs = self.pairs + [(p, g.view_as(p)) for p, g, r in zip(self.shared, slices, self.reached) if r]
        return pairs, stats, weights, self._weighted(weights, values)

    def _weighted(self, weights: dict[str, torch.Tensor], losses: dict[str, torch.Tensor]) -> torch.Tensor:
        """``sum_i w_i * L_i`` plus the balancer's regularizer."""
        total = cast(torch.Tensor, sum(weights[n] * losses[n] for n in losses))
        regularizer = self.balancer.regularizer(losses)
        return total if regularizer is None else total + regularizer
