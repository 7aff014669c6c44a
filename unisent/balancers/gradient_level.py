"""Gradient-level balancers: a `torchjd <https://torchjd.org>`_ aggregator over the per-objective
gradient matrix of the shared encoder (gathered by [`JacobianAccumulator`][unisent.balancers.JacobianAccumulator])."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import torch

from ..io import unknown_name
from ..training_config import ModelConfigError
from .balancer import Balancer

__all__ = ["Anchored", "JacobianAggregator", "MissingDependencyError", "PCGrad"]


class JacobianAggregator(Balancer):
    """Any aggregator of `torchjd <https://torchjd.org>`_ over the per-objective gradients of the shared encoder.

    Args:
        aggregator: a class name of ``torchjd.aggregation`` (``UPGrad``, ``MGDA``, ``PCGrad``, ``Mean``, ...).
        init_args: keyword arguments of that class.
        seed: with the step, seeds the aggregator's random draws (PCGrad's order): the same on every process, and
            the global random state is left alone.
    """

    gradient_level = True

    def __init__(self, aggregator: str = "UPGrad", init_args: dict[str, Any] | None = None, seed: int = 0) -> None:
        super().__init__()
        import torchjd.aggregation as aggregation

        names = sorted(n for n in dir(aggregation) if n[:1].isupper() and not n.endswith("Weighting"))
        if aggregator not in names:  # one line, before the first step (a ValueError)
            raise ModelConfigError(
                unknown_name("model.balancer.init_args.aggregator", "torchjd aggregator", aggregator, names)
            )
        self.aggregator_name = aggregator
        self.init_args = dict(init_args or {})
        self.seed = seed
        try:
            self._aggregator = getattr(aggregation, aggregator)(**self.init_args)
        except ImportError as err:  # torchjd checks its optional solvers when the aggregator is built
            raise MissingDependencyError(_missing_solver(aggregator, err)) from None

    def aggregate(self, jacobian: torch.Tensor, names: Sequence[str], step: int) -> torch.Tensor:
        with cast(Callable[..., AbstractContextManager[None]], torch.random.fork_rng)(devices=[]):  # untyped in torch
            cast(Callable[[int], object], torch.manual_seed)(self.seed * 1_000_003 + step)
            return self._aggregator(jacobian)

    def config(self) -> dict[str, Any]:
        return super().config() | {
            "init_args": {"aggregator": self.aggregator_name, "init_args": self.init_args, "seed": self.seed}
        }


class MissingDependencyError(ImportError):
    """A balancer needs a package that is not installed; one line with the pip command (the CLI reports
    it before training starts, also from inside jsonargparse's checks)."""


#: the packages behind torchjd's optional extras (pyproject.toml requires UPGrad/DualProj's QP solvers itself)
_SOLVER_PACKAGES = {
    "quadprog": "qpsolvers quadprog",
    "qpsolvers": "qpsolvers quadprog",
    "cvxpy": "cvxpy clarabel ecos",
    "clarabel": "cvxpy clarabel",
    "ecos": "cvxpy ecos",
    "scipy": "scipy",
}


def _missing_solver(aggregator: str, err: ImportError) -> str:
    """torchjd's "requires [...] to be installed" in one line, with a pip command of package names (pip
    before PEP 685 misses torchjd's extra ``quadprog_projector``)."""
    found = re.search(r"requires \[([^\]]*)\]", str(err))
    missing: list[str] = re.findall(r"'([^']+)'", found.group(1)) if found else []
    packages = sorted({p for name in missing for p in _SOLVER_PACKAGES.get(name, name).split()})
    needs = ", ".join(missing) if missing else str(err)
    install = f"pip install {' '.join(packages)}" if packages else "pip install 'torchjd[...]' (see torchjd's docs)"
    return f"balancer aggregator {aggregator!r} needs {needs}, which is not installed: {install}"


class PCGrad(JacobianAggregator):
    """Gradient surgery (Yu et al., NeurIPS 2020, Algorithm 1; torchjd's): each objective's gradient loses
    its component along any gradient it conflicts with (negative inner product), in a random order; the
    projections are summed (without conflicts: [`Static`][unisent.balancers.Static]'s plain sum)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__("PCGrad", seed=seed)

    def config(self) -> dict[str, Any]:
        return {"class_path": "unisent.balancers.PCGrad", "init_args": {"seed": self.seed}}


class Anchored(Balancer):
    """The start against the tasks: IMTL-G between an anchor objective (``Distill``: keep the starting
    encoder) and the tasks' update, which ``aggregator`` makes of every other objective's gradient.

    IMTL-G (Liu et al., ICLR 2021, arXiv:2010.04641) gives the update the same projection on each of the two
    unit gradients, so "keep the start" counts as much as all the tasks together, whatever the norms (Distill's
    gradient is 25 to 500 times smaller than a task's), while the tasks keep ``aggregator``'s shares among
    themselves (UPGrad's: by their gradients). One rule for every objective and no weight: the anchor is a
    constraint-like second task, not a hand-set weight. A step without the anchor's loss (or with a zero
    anchor gradient, e.g. while the encoder is held) is ``aggregator``'s update; a step with the anchor alone
    is its gradient.

    Args:
        anchor: the name of the objective that holds the start (``distill``).
        aggregator: the torchjd aggregator of the other objectives (as
            [`JacobianAggregator`][unisent.balancers.JacobianAggregator]).
        seed: as [`JacobianAggregator`][unisent.balancers.JacobianAggregator]'s.
    """

    gradient_level = True

    def __init__(self, anchor: str = "distill", aggregator: str = "UPGrad", seed: int = 0) -> None:
        super().__init__()
        from torchjd.aggregation import IMTLG

        self.anchor = anchor
        self.tasks = JacobianAggregator(aggregator, seed=seed)
        self._pair = IMTLG()

    def setup(self, names: Sequence[str]) -> None:
        super().setup(names)
        if self.anchor not in self.names:  # one line, before the first step
            raise ModelConfigError(
                unknown_name("model.balancer.init_args.anchor", "objective", self.anchor, self.names)
            )

    def aggregate(self, jacobian: torch.Tensor, names: Sequence[str], step: int) -> torch.Tensor:
        names = list(names)
        if self.anchor not in names:
            return self.tasks.aggregate(jacobian, names, step)
        at = names.index(self.anchor)
        rest = [i for i in range(len(names)) if i != at]
        if not rest:
            return jacobian[at]
        tasks = self.tasks.aggregate(jacobian[rest], [names[i] for i in rest], step)
        return self._pair(torch.stack([tasks, jacobian[at]]))

    @classmethod
    def without_anchor(cls, init_args: dict[str, Any], objectives: set[str]) -> dict[str, Any] | None:
        """The balancer of a run of ``objectives`` that lacks the anchor (an ablation's ``only ease`` or
        ``without distill``): the tasks' aggregator alone, which is what ``aggregate`` does on a step without
        the anchor's loss. ``None`` when the anchor is among them. Defaults are this class's own."""
        defaults = {k: v.default for k, v in inspect.signature(cls.__init__).parameters.items() if k != "self"}
        args = defaults | dict(init_args)
        if args["anchor"] in objectives:
            return None
        return {"class_path": "unisent.balancers.JacobianAggregator", "init_args": {"aggregator": args["aggregator"]}}

    def config(self) -> dict[str, Any]:
        return {
            "class_path": "unisent.balancers.Anchored",
            "init_args": {"anchor": self.anchor, "aggregator": self.tasks.aggregator_name, "seed": self.tasks.seed},
        }
