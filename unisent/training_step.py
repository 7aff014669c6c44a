"""One training step, by contract: batch -> embed -> loss -> gradient row -> balancer -> optimiser.

1. **embed**: an in-batch objective makes its views with [`embed`][unisent.objectives.Objective.embed] from the encoder,
   or under ``cache_chunk`` from a ``CachedEncode``; any other objective runs its own ``forward``;
2. **loss**: the objective's loss, times its static weight;
3. **gradient row**: [`unisent.balancers.StepGradients.add`][unisent.balancers.StepGradients.add] takes its gradients at
   once (freeing its graph); under GradCache each chunk is then replayed into the row (``add_chunk``);
4. **balancer**: ``TrainingStep.finish`` combines the rows into the loss Lightning calls ``backward`` on;
5. **optimiser**: Lightning's automatic optimisation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy

from .balancers import Balancer, StepGradients
from .objectives import Objective
from .objectives.grad_cache import CachedEncode
from .objectives.objective import EncodeFn, ObjectiveOutput
from .training_config import ModelConfigError

__all__ = ["TrainingStep", "takes_one_backward"]


def takes_one_backward(strategy: Any) -> bool:
    """Whether a Lightning strategy takes the gradients in one backward call of its own (FSDP, DeepSpeed)."""
    return isinstance(strategy, (FSDPStrategy, DeepSpeedStrategy))


class TrainingStep:
    """The training step of the objectives ``names`` (see the module doc); ``cache_chunk``: rows per
    encoder pass under GradCache (``None``: no cache)."""

    def __init__(self, names: Sequence[str], cache_chunk: int | None = None) -> None:
        self.gradients = StepGradients(names)
        self.cache_chunk = cache_chunk

    def check_strategy(self, strategy: Any) -> None:
        """Refuse GradCache, in one line, under a strategy that takes the gradients in one backward call."""
        if self.cache_chunk and takes_one_backward(strategy):
            raise ModelConfigError(
                f"model.train.cache_chunk (GradCache) needs each objective's gradients inside the training step; "
                f"{type(strategy).__name__} takes them in one backward call of its own: use DDP, or unset cache_chunk"
            )

    def start(
        self,
        balancer: Balancer,
        shared: Sequence[torch.nn.Parameter],
        own: dict[str, list[torch.nn.Parameter]],
        *,
        conflicts: bool,
        strategy: Any = None,
    ) -> None:
        """Begin a micro-batch ([`unisent.balancers.StepGradients.start`][unisent.balancers.StepGradients.start])."""
        self.gradients.start(
            balancer,
            shared,
            own,
            conflicts=conflicts,
            deferred=takes_one_backward(strategy),
            cached=bool(self.cache_chunk),
        )

    def run(self, objective: Objective, encoder: EncodeFn, batch: dict[str, Any], weight: float) -> ObjectiveOutput:
        """Stages 1-3 for one objective: its terms and metrics (for the logs); its gradients are taken."""
        if not (self.cache_chunk and objective.in_batch):
            out = ObjectiveOutput.of(objective(encoder, batch))
            self.gradients.add(objective.name, weight * objective.total(out.terms))
            return out
        encode = CachedEncode(encoder, self.cache_chunk)
        out = ObjectiveOutput.of(objective.loss(objective.embed(encode, batch), batch))
        grads = self.gradients.add(objective.name, weight * objective.total(out.terms), encode.leaves)
        if encode.leaves and self.gradients.shared:  # a frozen encoder: nothing to replay for
            for vectors, grad in encode.replay(grads):
                self.gradients.add_chunk(objective.name, vectors, grad)
        return out

    def finish(
        self, *, last: bool, step: int, parameters: Iterable[torch.nn.Parameter] = ()
    ) -> tuple[torch.Tensor, dict[str, Any] | None, dict[str, torch.Tensor]]:
        """Stage 4 ([`unisent.balancers.StepGradients.finish`][unisent.balancers.StepGradients.finish])."""
        return self.gradients.finish(last=last, step=step, parameters=parameters)
