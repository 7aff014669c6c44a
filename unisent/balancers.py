"""Balancers: how the objectives of one run combine on the shared encoder, without hand-set weights.

A model with several objectives trains one encoder on several losses. Each objective keeps its own
parameters (GaussCSE's Gaussian head, EASE's entity table, CMLM's projections and MLM head); the
encoder's parameters are shared. A *balancer* decides how the objectives' gradients on the **shared
encoder** combine into one update; every objective's own parameters always receive the gradient of
that objective's own loss (times its static ``weight``), whatever the balancer does to the encoder.

Two kinds, picked in YAML as ``model.balancer: {class_path: unisent.balancers.<Name>}``:

- **loss-level** (:class:`Static`, :class:`Uncertainty`, :class:`DWA`): a weight per objective. The
  encoder receives ``sum_i w_i * grad L_i``; one backward pass, as cheap as a plain weighted sum. An
  objective's own parameters get ``grad L_i`` (a hook divides their gradient by ``w_i``).
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

Conflict logging (:class:`GradientConflicts`): every N optimiser steps the per-objective gradient
norms on the shared encoder and their pairwise cosines are logged (``conflict/<a>/grad_norm``,
``conflict/<a>~<b>/cosine``), appended to ``conflicts.csv`` in the run folder, sent to W&B as a
matrix table when the logger is W&B, and plotted to ``conflicts.png`` at the end of training.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "DWA",
    "PCGrad",
    "Balancer",
    "GradientConflicts",
    "JacobianAggregator",
    "Static",
    "Uncertainty",
    "conflict_stats",
    "flat_grads",
    "mean_cosines",
    "mean_over_processes",
    "plot_conflicts",
    "read_conflicts",
    "surrogate",
]


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def mean_over_processes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` averaged over the processes of the default group (in place; itself without DDP)."""
    if _distributed() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(tensor)
        tensor /= torch.distributed.get_world_size()
    return tensor


class Balancer(torch.nn.Module):
    """How the objectives combine on the shared encoder (see the module doc).

    Subclasses set :attr:`gradient_level` and implement :meth:`weights` (loss-level) or
    :meth:`aggregate` (gradient-level). :meth:`setup` is called once with the objective names before
    training; state that must survive a resume is kept in parameters or buffers (the checkpoint
    holds them).

    Attributes:
        gradient_level: whether the balancer needs the per-objective gradient matrix.
        param_lr: learning rate of the balancer's own parameters (their own optimiser group); ``None``:
            the optimiser's.
    """

    gradient_level: bool = False
    param_lr: float | None = None

    def setup(self, names: Sequence[str]) -> None:
        """Called once with the names of every objective of the model, in order."""
        self.names = list(names)

    def weights(self, losses: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """Loss-level: each active objective's weight on the shared encoder this step (a tensor that may
        carry gradient to the balancer's parameters). ``losses`` are the objectives' losses with their
        static weight applied (not detached)."""
        return {name: torch.ones((), device=loss.device) for name, loss in losses.items()}

    def regularizer(self, losses: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Loss-level: a term added to the loss for the balancer's own parameters (``None``: none)."""
        return None

    def aggregate(self, jacobian: torch.Tensor, names: Sequence[str], step: int) -> torch.Tensor:
        """Gradient-level: one update vector from the per-objective gradient matrix (rows: ``names``)."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        return {"class_path": f"{type(self).__module__}.{type(self).__qualname__}"}


class Static(Balancer):
    """Today's behaviour and the default: the encoder gets ``sum_i weight_i * grad L_i`` with each
    objective's own ``weight`` (and ``model.weight_schedule``)."""


class Uncertainty(Balancer):
    """Homoscedastic uncertainty weighting (Kendall, Gal and Cipolla, CVPR 2018, eq. 7 in the form
    multi-task libraries use: ``sum_i exp(-s_i) * L_i + s_i``, one learned ``s_i = log sigma_i^2`` per
    objective). At its optimum ``exp(-s_i) = 1 / L_i``: each loss is brought to the same scale.

    Args:
        lr: learning rate of the ``s_i`` (their own optimiser group). At the encoder's rate (5e-5) they
            would barely move in a few hundred steps; 1e-2 lets ``exp(-s)`` travel a factor of ~6 in 186
            Adam steps.
        init: initial ``s_i`` (0: every weight starts at 1, as with :class:`Static`).
    """

    def __init__(self, lr: float = 1e-2, init: float = 0.0) -> None:
        super().__init__()
        self.param_lr = lr
        self.init = init

    def setup(self, names: Sequence[str]) -> None:
        super().setup(names)
        self.log_vars = torch.nn.Parameter(torch.full((len(self.names),), float(self.init)))

    def weights(self, losses, step):
        index = {n: i for i, n in enumerate(self.names)}
        return {name: torch.exp(-self.log_vars[index[name]]) for name in losses}

    def regularizer(self, losses):
        index = {n: i for i, n in enumerate(self.names)}
        active = torch.zeros(len(self.names), dtype=torch.bool, device=self.log_vars.device)
        active[[index[n] for n in losses]] = True
        # inactive objectives (weight 0 this step) keep their s_i in the graph with a zero gradient, so
        # DDP sees every parameter used
        return (self.log_vars * active).sum()

    def config(self):
        return super().config() | {"init_args": {"lr": self.param_lr, "init": self.init}}


class DWA(Balancer):
    """Dynamic Weight Average (Liu, Johns and Davison, "End-to-End Multi-Task Learning with Attention",
    CVPR 2019, eq. 7): ``w_i = K * softmax_i(r_i / T)`` with ``r_i = L_i(t-1) / L_i(t-2)``, the rate at
    which objective i's loss fell over the last two periods. A loss that stops falling gets more weight.

    The paper's period is an epoch; here it is ``period`` optimiser steps (a unified run may have only
    three epochs), and ``L_i(t)`` is the mean of the objective's loss over the period (over all
    micro-batches and, under DDP, all processes). Until two periods have passed every weight is 1.

    Args:
        temperature: T (the paper's 2).
        period: optimiser steps per period.
    """

    def __init__(self, temperature: float = 2.0, period: int = 10) -> None:
        super().__init__()
        if temperature <= 0 or period < 1:
            raise ValueError(f"DWA needs temperature > 0 and period >= 1, got {temperature}, {period}")
        self.temperature = temperature
        self.period = period

    def setup(self, names: Sequence[str]) -> None:
        super().setup(names)
        k = len(self.names)
        # sums and counts of the current period; the means of the last two complete periods
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
        """The weights of every objective now: ``K * softmax(r / T)`` over the K objectives with a loss in
        both of the last two periods; 1 for the others (before two periods, or switched off by
        ``model.weight_schedule`` in one of them)."""
        older, last = self.previous
        weights = torch.ones(len(self.names), dtype=torch.float64)
        valid = ~(torch.isnan(older) | torch.isnan(last)) & (older > 0)
        if valid.any():
            ratio = last[valid] / older[valid]
            weights[valid] = int(valid.sum()) * torch.softmax(ratio / self.temperature, dim=0)
        return weights

    def weights(self, losses, step):
        self._roll(step)
        w = self.current()
        self.record(losses)
        index = {n: i for i, n in enumerate(self.names)}
        first = next(iter(losses.values()))
        return {name: w[index[name]].to(first.device, torch.float32) for name in losses}

    def config(self):
        return super().config() | {"init_args": {"temperature": self.temperature, "period": self.period}}


class JacobianAggregator(Balancer):
    """Any aggregator of `torchjd <https://torchjd.org>`_ over the per-objective gradients of the shared
    encoder (``aggregator``: a class name of ``torchjd.aggregation``, e.g. ``UPGrad``, ``MGDA``,
    ``PCGrad``, ``Mean``; ``init_args`` for its constructor). Aggregators that draw random numbers
    (PCGrad's order of projections) draw them from a generator seeded by ``seed`` and the step, the
    same on every process, without touching the global random state.

    Args:
        aggregator: the torchjd class name.
        init_args: keyword arguments of that class.
        seed: seed of the aggregator's random draws.
    """

    gradient_level = True

    def __init__(self, aggregator: str = "UPGrad", init_args: dict[str, Any] | None = None, seed: int = 0) -> None:
        super().__init__()
        try:
            import torchjd.aggregation as aggregation
        except ImportError as err:  # pragma: no cover - torchjd is a dependency
            raise ImportError("gradient-level balancers need torchjd: pip install torchjd") from err
        names = sorted(n for n in dir(aggregation) if n[:1].isupper() and not n.endswith("Weighting"))
        if aggregator not in names:
            import difflib

            close = difflib.get_close_matches(aggregator, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"balancer aggregator {aggregator!r} is not in torchjd.aggregation{hint}; one of: {names}")
        self.aggregator_name = aggregator
        self.init_args = dict(init_args or {})
        self.seed = seed
        self._aggregator = getattr(aggregation, aggregator)(**self.init_args)

    def aggregate(self, jacobian, names, step):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 1_000_003 + step)
            return self._aggregator(jacobian)

    def config(self):
        return super().config() | {
            "init_args": {"aggregator": self.aggregator_name, "init_args": self.init_args, "seed": self.seed}
        }


class PCGrad(JacobianAggregator):
    """Gradient surgery (Yu et al., NeurIPS 2020, Algorithm 1), torchjd's implementation: each
    objective's gradient loses its component along any other gradient it conflicts with (negative
    inner product), in a random order; the projected gradients are summed (without conflicts: the
    plain sum, as :class:`Static`)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__("PCGrad", seed=seed)

    def config(self):
        return {"class_path": "unisent.balancers.PCGrad", "init_args": {"seed": self.seed}}


# ------------------------------------------------------------------------------------------- conflicts
def conflict_stats(jacobian: torch.Tensor, names: Sequence[str]) -> dict[str, Any]:
    """Per-objective gradient norms and pairwise cosines of the rows of ``jacobian``."""
    jacobian = jacobian.double()
    norms = jacobian.norm(dim=1)
    gram = jacobian @ jacobian.T
    denom = torch.outer(norms, norms).clamp_min(1e-30)
    cosines = (gram / denom).clamp(-1, 1)
    cosines[norms == 0, :] = float("nan")
    cosines[:, norms == 0] = float("nan")
    return {"names": list(names), "norms": norms.tolist(), "cosines": cosines.tolist()}


class GradientConflicts:
    """Writes the conflict records of one run: ``conflicts.csv`` (one row per pair and logged step:
    ``step, a, b, cosine, norm_a, norm_b``; ``a == b`` rows carry the norm alone) and, from it,
    ``conflicts.png``."""

    FIELDS = ("step", "a", "b", "cosine", "norm_a", "norm_b")

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / "conflicts.csv"

    def append(self, step: int, stats: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        names, norms, cos = stats["names"], stats["norms"], stats["cosines"]
        with self.path.open("a", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(self.FIELDS)
            for i, a in enumerate(names):
                for j in range(i, len(names)):
                    c = "" if i == j or math.isnan(cos[i][j]) else f"{cos[i][j]:.6f}"
                    writer.writerow([step, a, names[j], c, f"{norms[i]:.6g}", f"{norms[j]:.6g}"])


def read_conflicts(path: str | Path) -> tuple[list[str], dict[int, dict[tuple[str, str], float]], dict[str, list]]:
    """``conflicts.csv`` as (names, {step: {(a, b): cosine}}, {name: [(step, norm), ...]}); a resumed
    run may have written a step twice: the last row wins."""
    names: list[str] = []
    cosines: dict[int, dict[tuple[str, str], float]] = {}
    norms: dict[str, dict[int, float]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            step, a, b = int(row["step"]), row["a"], row["b"]
            for n in (a, b):
                if n not in names:
                    names.append(n)
            if a == b:
                norms.setdefault(a, {})[step] = float(row["norm_a"])
            elif row["cosine"]:
                cosines.setdefault(step, {})[(a, b)] = float(row["cosine"])
    return names, cosines, {n: sorted(v.items()) for n, v in norms.items()}


def mean_cosines(names: Sequence[str], cosines: dict[int, dict[tuple[str, str], float]]) -> list[list[float]]:
    """The matrix of cosines averaged over the logged steps (diagonal 1; ``nan`` where never logged)."""
    k = len(names)
    matrix = [[1.0 if i == j else float("nan") for j in range(k)] for i in range(k)]
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            values = [c[(a, b)] if (a, b) in c else c.get((b, a)) for c in cosines.values()]
            values = [v for v in values if v is not None]
            if values:
                matrix[i][j] = sum(values) / len(values)
    return matrix


def plot_conflicts(csv_path: str | Path, png_path: str | Path | None = None) -> Path:
    """``conflicts.png`` from ``conflicts.csv``: the mean cosine matrix (left) and each objective's
    gradient norm over the steps (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path = Path(csv_path)
    png_path = Path(png_path) if png_path else csv_path.with_suffix(".png")
    names, cosines, norms = read_conflicts(csv_path)
    matrix = mean_cosines(names, cosines)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    image = left.imshow(matrix, cmap="RdBu", vmin=-1, vmax=1)
    left.set_xticks(range(len(names)), names, rotation=45, ha="right")
    left.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            if not math.isnan(matrix[i][j]):
                left.text(j, i, f"{matrix[i][j]:.2f}", ha="center", va="center", fontsize=8)
    left.set_title(f"gradient cosine on the shared encoder\n(mean over {len(cosines)} logged steps)")
    fig.colorbar(image, ax=left, fraction=0.046)
    for name, points in norms.items():
        if points:
            right.plot([s for s, _ in points], [v for _, v in points], marker=".", label=name)
    right.set_yscale("log")
    right.set_xlabel("optimiser step")
    right.set_title("gradient norm on the shared encoder")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path


# ------------------------------------------------------------------------------------------- combining
def flat_grads(loss: torch.Tensor, params: Sequence[torch.nn.Parameter], retain_graph: bool) -> torch.Tensor:
    """The gradient of ``loss`` with respect to ``params`` as one flat vector (zeros for parameters it
    does not reach)."""
    grads = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
    flat = torch.zeros(sum(p.numel() for p in params), device=loss.device)
    offset = 0
    for p, g in zip(params, grads):
        if g is not None:
            flat[offset : offset + p.numel()].copy_(g.reshape(-1))
        offset += p.numel()
    return flat


def surrogate(pairs: Iterable[tuple[torch.nn.Parameter, torch.Tensor]]) -> torch.Tensor:
    """``sum_p <g_p, p>``: a loss whose gradient with respect to each ``p`` is exactly ``g_p``."""
    total = None
    for p, g in pairs:
        term = (g.detach().to(p.dtype) * p).sum()
        total = term if total is None else total + term
    return total
