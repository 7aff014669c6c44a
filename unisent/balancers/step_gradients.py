"""One micro-batch's gradients, taken objective by objective right after each objective's forward pass, so that
one objective's graph is alive at a time. The buffers: a gradient-level balancer's Jacobian rows; Static's one
summed row (one per objective on conflict-logging steps); one row per objective for the other loss-level balancers,
whose own parameters learn from ``sum_i w_i * L_i + regularizer`` on the detached losses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import torch

from .balancer import Balancer, mean_over_processes, weight_value
from .conflicts import conflict_stats
from .jacobian import JacobianAccumulator, Pairs, add_to_row, grad_or_none, loss_level_conflicts, surrogate
from .loss_level import Static

__all__ = ["StepGradients"]

#: ``Tensor.register_hook`` (untyped in torch): ``hook(grad)`` replaces the gradient of the tensor
_register_hook = cast(Callable[[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]], Any], torch.Tensor.register_hook)


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
            pairs, stats, weights, extra = self._loss_level(step)
            value = sum((w.detach() if torch.is_tensor(w := weights[n]) else w) * values[n] for n in values)
            regularizer = self.balancer.regularizer(values)
            value = value if regularizer is None else value + regularizer.detach()
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
        loss = cast(torch.Tensor, sum(weights[n] * losses[n] for n in losses))
        regularizer = balancer.regularizer(losses)
        loss = loss if regularizer is None else loss + regularizer
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

    def _loss_level(
        self, step: int
    ) -> tuple[Pairs, dict[str, Any] | None, dict[str, torch.Tensor], torch.Tensor | None]:
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
        # the balancer's own parameters (Uncertainty's log-variances): the gradient of its weighted loss
        extra = None
        if any(torch.is_tensor(w) and w.requires_grad for w in weights.values()):
            extra = cast(torch.Tensor, sum(weights[n] * values[n] for n in values))
        regularizer = self.balancer.regularizer(values)
        if regularizer is not None:
            extra = regularizer if extra is None else extra + regularizer
        return pairs, stats, weights, extra
