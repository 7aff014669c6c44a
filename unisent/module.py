"""The one LightningModule: an encoder, any number of weighted objectives, optimiser and schedule."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable

from .balancers import (
    Balancer,
    GradientConflicts,
    Static,
    conflict_stats,
    flat_grads,
    mean_over_processes,
    plot_conflicts,
    surrogate,
)
from .encoders import Encoder, EncoderConfig
from .inference import register_checkpoint_loader
from .io import instantiate
from .objectives import Objective, SimCSE
from .objectives.base import ObjectiveOutput
from .optim import AdamW, split_weight_decay, warmup_linear_lambda
from .testing import fault_point

__all__ = ["EvaluationConfig", "ModelConfigError", "UnisentModule", "check_unisent_checkpoint"]

CHECKPOINT_KEY = "unisent"


@dataclass
class EvaluationConfig:
    """Evaluation tasks run by Lightning's validation and test loops.

    The work is done by :class:`unisent.evaluation.EvaluationCallback`, which the ``unisent`` CLI adds
    when these settings ask for tasks (in Python, pass it in the Trainer's ``callbacks``); this
    dataclass is only the settings, kept with the model (``model.evaluation`` in YAML). ``unisent fit``
    runs ``val_tasks`` whenever Lightning validates (``trainer.val_check_interval``:
    every N training steps, as the papers evaluate STS-B dev every 125 to 250 steps), logs
    ``val/<task>`` and ``val/score`` (the mean main score, the selection metric that the default
    checkpoint callback keeps the best of as ``checkpoints/best.ckpt``). ``unisent test`` runs
    ``test_tasks`` and logs ``test/<task>``.

    Attributes:
        val_tasks: task names or groups (see ``unisent evaluate --list``); empty = no validation.
        test_tasks: task names or groups for ``unisent test``.
        data_dir: root of the evaluation data; default (``None``): the bundled sample (STS-B dev and test).
        batch_size: encoding batch size.
        panel: the columns of :func:`unisent.evaluation.panel.evaluate_panel` that ``unisent ablate``
            scores every run of this recipe on (empty: ``test_tasks``).
        panel_own: ``{objective name: panel column}``: the column that measures what each objective is
            for; ``unisent ablate`` compares it inside the combination against the objective alone.
        panel_targets: ``{panel column: minimum}``: ``unisent ablate`` reports, for every balancer, whether
            the mean over seeds reaches each (and by how much it is met or missed).
        similarity: ``cosine``, or for Gaussian models ``kl`` (asymmetric, the paper), ``kl_mean``,
            ``kl_symmetric`` (the authors' symmetric STS score), ``kl_symmetric_mean``, ``kl_avg_sim``
            (see :mod:`unisent.evaluation.similarities`).
    """

    val_tasks: list[str] = field(default_factory=lambda: ["stsb-dev"])
    test_tasks: list[str] = field(default_factory=lambda: ["stsb-test"])
    data_dir: str | None = None
    batch_size: int = 128
    similarity: Literal["cosine", "kl", "kl_mean", "kl_symmetric", "kl_symmetric_mean", "kl_avg_sim"] = "cosine"
    panel: list[str] = field(default_factory=list)
    panel_own: dict[str, str] = field(default_factory=dict)
    panel_targets: dict[str, float] = field(default_factory=dict)


# the module's hyperparameters hold these config dataclasses: let checkpoints load with
# torch.load(weights_only=True), as Lightning does when resuming (`fit(ckpt_path=...)`)
torch.serialization.add_safe_globals([EncoderConfig, EvaluationConfig])


def check_unisent_checkpoint(path: str | Path) -> None:
    """Check that ``path`` is a complete checkpoint written by ``unisent fit`` before anything loads it:
    every problem is one :class:`~unisent.io.CheckpointError` naming the file (a truncated copy, a file
    that is not a PyTorch checkpoint, one of another program, without the ``unisent`` record). Reads the
    file memory-mapped: no tensor is loaded.

    Raises:
        FileNotFoundError: no such file.
        unisent.io.CheckpointError: what is wrong with it.
    """
    import pickle

    from .io import CheckpointError, check_checkpoint

    path = check_checkpoint(path)  # missing, truncated, not a zip archive
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {path} could not be read as a PyTorch checkpoint ({type(err).__name__}: "
            f"{first[:200]}); copy it again, or pick another one"
        ) from err
    if not isinstance(ckpt, dict) or CHECKPOINT_KEY not in ckpt or "state_dict" not in ckpt:
        what = (
            f"a {type(ckpt).__name__}"
            if not isinstance(ckpt, dict)
            else (f"keys: {', '.join(sorted(map(str, ckpt))[:6])}" if ckpt else "an empty dict")
        )
        raise CheckpointError(
            f"checkpoint {path} was not written by `unisent fit` (it holds {what}, not the "
            f"{CHECKPOINT_KEY!r} record and state_dict); give a .ckpt from a run's checkpoints/ folder"
        )
    record = ckpt[CHECKPOINT_KEY]
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("encoder"), dict)
        or not isinstance(record.get("objectives"), list)
    ):
        raise CheckpointError(
            f"checkpoint {path}: its {CHECKPOINT_KEY!r} record lacks 'encoder' or 'objectives'; "
            "it was not written by `unisent fit`"
        )


def _clock(device: torch.device) -> float:
    """Seconds on a monotonic clock, after the device's queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _batch_len(batch: Any) -> int:
    """Records in a collated batch: the first dimension of its first tensor (text fields are dicts of
    ``input_ids``/``attention_mask``)."""
    for value in batch.values() if isinstance(batch, dict) else ():
        if torch.is_tensor(value):
            return int(value.shape[0])
        if isinstance(value, dict):
            return _batch_len(value)
    return 0


class ModelConfigError(ValueError):
    """A ``model`` section value the module refuses (``head_lr``, ``conflict_every``, ``weight_schedule``,
    warm-up, objective names). The CLI reports it in one line."""


def _check_schedule(schedule: dict[str, Any], names: list[str]) -> dict[str, list[tuple[int, float]]]:
    unknown = sorted(set(schedule) - set(names))
    if unknown:
        raise ModelConfigError(
            f"model.weight_schedule names {', '.join(map(repr, unknown))}, but the objectives are: {', '.join(names)}"
        )
    checked = {}
    for name, entries in schedule.items():
        pairs = []
        for i, entry in enumerate(entries):
            if len(entry) != 2 or float(entry[0]) < 0 or float(entry[1]) < 0:
                raise ModelConfigError(
                    f"model.weight_schedule.{name}[{i}] must be [step >= 0, weight >= 0], got {entry!r}"
                )
            pairs.append((int(entry[0]), float(entry[1])))
        if [p[0] for p in pairs] != sorted(p[0] for p in pairs):
            raise ModelConfigError(f"model.weight_schedule.{name}: steps must increase, got {[p[0] for p in pairs]}")
        checked[name] = pairs
    return checked


def parameter_groups(
    named_parameters, objectives, head_lr: float | None = None, encoder: torch.nn.Module | None = None
) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: :func:`~unisent.optim.split_weight_decay` over everything, and
    the same split again, with ``lr`` set, for the parameters of each objective whose
    :attr:`~unisent.objectives.Objective.param_lr` is set (GaussCSE's ``head_lr``), or, when ``head_lr``
    is given, of every other objective (one rate for all objectives' own parameters; not for a
    balancer's). Without either, the two groups of before (checkpoints resume unchanged).
    With ``encoder``, its parameters (those not in an objective's own group) are split into groups of
    their own, marked ``"encoder": True`` (for a schedule of their own: ``head_only_steps``).
    The schedule multiplies every group's own learning rate."""
    own: dict[int, float] = {}
    for objective in objectives:
        lr = objective.param_lr
        if lr is None and isinstance(objective, Objective):
            lr = head_lr
        if lr is not None:
            own.update({id(p): float(lr) for p in objective.parameters()})
    named = list(named_parameters)
    rest = [(n, p) for n, p in named if id(p) not in own]
    if encoder is None:
        groups = split_weight_decay(rest)
    else:
        shared = {id(p) for p in encoder.parameters()}
        groups = [g | {"encoder": True} for g in split_weight_decay((n, p) for n, p in rest if id(p) in shared)]
        groups = [g for g in groups + split_weight_decay((n, p) for n, p in rest if id(p) not in shared) if g["params"]]
    for lr in sorted(set(own.values())):
        for group in split_weight_decay((n, p) for n, p in named if own.get(id(p)) == lr):
            if group["params"]:
                groups.append(group | {"lr": lr})
    return groups


class UnisentModule(L.LightningModule):
    """Trains one shared encoder with a weighted sum of objectives.

    Each training step receives ``{objective name: batch}`` from :class:`~unisent.data.UnisentDataModule`,
    asks every objective for its named loss terms (and metrics), logs each as
    ``train/<objective>/<term>`` and optimises ``sum(objective.weight * objective.total(terms))``
    (logged as ``train/loss``); metrics are logged the same way and never enter the loss. The
    objectives' hooks (:class:`~unisent.objectives.Objective`: ``setup_for``, ``inference_model``)
    are called on every objective; each has a documented default.

    Evaluation is not done here: :class:`unisent.evaluation.EvaluationCallback` runs the tasks of
    ``evaluation`` in the validation and test loops and logs ``val/score``.

    Args:
        encoder: backbone, pooler and max length (:class:`~unisent.encoders.EncoderConfig`).
        objectives: the objectives, any :class:`~unisent.objectives.Objective` subclass (from YAML
            with ``class_path``); default: unsupervised SimCSE.
        optimizer: any torch optimiser (``class_path``); default :class:`unisent.optim.AdamW`
            (lr 3e-5, fused).
        warmup_steps: linear warm-up steps (from 0 to the optimiser's learning rate).
        warmup_ratio: warm-up as a fraction of all training steps (used when ``warmup_steps`` is 0);
            1.0 warms up over the whole run (GaussCSE, Appendix A).
        schedule: ``linear`` decays to 0 after warm-up; ``constant`` keeps the peak rate.
        save_encoder: after ``fit``, save the trained encoder to ``<log dir>/encoder`` (loadable by
            ``unisent.load``).
        evaluation: tasks of the validation and test loops (:class:`EvaluationConfig`), run by
            :class:`unisent.evaluation.EvaluationCallback`.
        weight_schedule: ``{objective name: [[step, weight], ...]}``: from each listed optimiser
            step on, the objective's weight is the listed one (before the first entry it is the
            objective's own ``weight``). A weight of 0 skips the objective's forward pass. This
            expresses staged training in one run, e.g. CMLM's S3 ("CMLM, then CMLM + bitext
            retrieval"): ``{bitext: [[0, 0.0], [100000, 0.2]]}``. Under DDP, an objective with its
            own parameters that is switched off needs ``strategy: ddp_find_unused_parameters_true``.
        balancer: how the objectives combine on the shared encoder (:mod:`unisent.balancers`):
            :class:`~unisent.balancers.Static` (default: the weighted sum), ``Uncertainty``, ``DWA``,
            ``PCGrad`` or any torchjd aggregator (``JacobianAggregator``). Each objective's own
            parameters always get the gradient of its own (statically weighted) loss.
        conflict_every: every N optimiser steps, log the per-objective gradient norms on the shared
            encoder and their pairwise cosines (``conflict/...``; ``conflicts.csv`` and, at the end,
            ``conflicts.png`` in the run folder); 0: never. Costs one extra gradient per objective on
            those steps for a loss-level balancer, nothing for a gradient-level one.
        head_lr: one learning rate for the own parameters of every objective (heads, entity tables,
            projections) that has no ``param_lr`` of its own; unset: the optimiser's.
        head_only_steps: for the first N optimiser steps the encoder does not learn (its rate is 0)
            while every objective's own parameters do; then the encoder starts, with a fresh optimiser
            state and the run's warm-up and decay over the remaining steps. Linear probing, then
            fine-tuning (LP-FT, Kumar et al. 2022, arXiv:2202.10054): heads that are not random when
            their gradient first reaches a pretrained encoder distort its features less. In those
            steps the encoder runs as at inference (eval mode, no dropout: the heads fit the features
            they will be used with; a dropout-only objective such as unsupervised SimCSE has nothing
            to learn then), and it still runs forward and backward (conflict logging and the balancer see
            its gradients; DDP and gradient accumulation are unchanged), so they cost a full step.
        head_only_ratio: ``head_only_steps`` as a share of all training steps (used when
            ``head_only_steps`` is 0), e.g. 0.5: the first half of however long the run is.
    """

    def __init__(
        self,
        encoder: EncoderConfig | None = None,
        objectives: list[Objective] | None = None,
        optimizer: OptimizerCallable = AdamW,
        warmup_steps: int = 0,
        warmup_ratio: float = 0.0,
        schedule: Literal["linear", "constant"] = "linear",
        save_encoder: bool = True,
        evaluation: EvaluationConfig | None = None,
        weight_schedule: dict[str, list[tuple[int, float]]] | None = None,
        balancer: Balancer | None = None,
        conflict_every: int = 0,
        head_lr: float | None = None,
        head_only_steps: int = 0,
        head_only_ratio: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["objectives", "optimizer", "balancer"])
        self.encoder_config = encoder or EncoderConfig()
        self.encoder = Encoder(self.encoder_config)
        objectives = list(objectives) if objectives is not None else [SimCSE()]
        if not objectives:
            raise ModelConfigError("the model needs at least one objective")
        names = [o.name for o in objectives]
        if len(set(names)) != len(names):
            raise ModelConfigError(f"objective names must be unique, got {names}; set `name:` on each")
        self.objectives = torch.nn.ModuleList(objectives)
        # objectives with parameters sized by the encoder build them now; those that add tokens first,
        # so that a head sized by the vocabulary (CMLM's MLM head) sees the final vocabulary
        for objective in sorted(self.objectives, key=lambda o: not o.extends_vocabulary):
            objective.setup_for(self.encoder)
        self.optimizer_factory = optimizer
        if warmup_steps < 0 or not 0.0 <= warmup_ratio <= 1.0:
            raise ModelConfigError(
                f"need model.warmup_steps >= 0 and 0 <= model.warmup_ratio <= 1, got {warmup_steps}, {warmup_ratio}"
            )
        self.warmup_steps = warmup_steps
        self.warmup_ratio = warmup_ratio
        self.schedule = schedule
        self.save_encoder = save_encoder
        self.evaluation = evaluation or EvaluationConfig()
        self.encoder_dir: Path | None = None
        self.weight_schedule = _check_schedule(weight_schedule or {}, names)
        self._logged_terms: dict[str, tuple[str, ...]] = {}
        self.balancer = balancer if balancer is not None else Static()
        self.balancer.setup(names)
        if conflict_every < 0:
            raise ModelConfigError(f"model.conflict_every must be >= 0 (0: no conflict logging), got {conflict_every}")
        self.conflict_every = conflict_every
        if head_lr is not None and not head_lr > 0:
            raise ModelConfigError(f"model.head_lr must be > 0 (or unset: the optimiser's lr), got {head_lr}")
        self.head_lr = head_lr
        if head_only_steps < 0:
            raise ModelConfigError(
                f"model.head_only_steps must be >= 0 (0: the encoder learns from the start), got {head_only_steps}"
            )
        if not 0.0 <= head_only_ratio < 1.0:
            raise ModelConfigError(f"model.head_only_ratio must be in [0, 1), got {head_only_ratio}")
        self.head_only_steps = head_only_steps
        self.head_only_ratio = head_only_ratio
        self._head_only = head_only_steps  # the run's number, set from the ratio once its length is known
        self._jacobian: torch.Tensor | None = None  # per-objective encoder gradients summed over micro-batches
        self._jacobian_rows: set[str] = set()
        self._head_scale: dict[str, float] = {}
        self._hooks: list[Any] = []
        self._conflicts_logged_at = -1

    # ------------------------------------------------------------------------------------ training
    def objective_weight(self, objective: Objective, step: int) -> float:
        """The weight of ``objective`` at optimiser step ``step`` (see ``weight_schedule``)."""
        weight = objective.weight
        for start, value in self.weight_schedule.get(objective.name, ()):
            if step >= start:
                weight = value
        return weight

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        losses: dict[str, torch.Tensor] = {}
        several = len(self.objectives) > 1
        seconds: dict[str, float] = {}
        for objective in self.objectives:
            sub = batch.get(objective.name)
            if sub is None:  # an exhausted loader in "max_size" mode
                continue
            weight = self.objective_weight(objective, self.global_step)
            if self.weight_schedule:
                self.log(f"train/{objective.name}/weight", weight, on_step=True, batch_size=1)
            if weight == 0:
                # Lightning would repeat the last logged value of a metric not logged this step
                for term in self._logged_terms.get(objective.name, ()):
                    self.log(f"train/{objective.name}/{term}", float("nan"), on_step=True, batch_size=1)
                continue
            start = _clock(self.device) if several else 0.0
            out = ObjectiveOutput.of(objective(self.encoder, sub))
            if several:
                seconds[objective.name] = _clock(self.device) - start
                self.log(f"train/{objective.name}/batch_size", float(_batch_len(sub)), on_step=True, batch_size=1)
            self._logged_terms[objective.name] = (*out.terms, *out.metrics) + (
                ("batch_size", "forward_share") if several else ()
            )
            for term, value in (out.terms | out.metrics).items():
                value = value.detach() if torch.is_tensor(value) else float(value)
                self.log(f"train/{objective.name}/{term}", value, on_step=True, batch_size=1)
            losses[objective.name] = weight * objective.total(out.terms)
        spent = sum(seconds.values())
        for name, value in seconds.items():  # each objective's share of this step's forward time
            self.log(f"train/{name}/forward_share", value / spent if spent > 0 else 0.0, on_step=True, batch_size=1)
        total = self.combine(losses)
        self.log("train/loss", total.detach(), on_step=True, prog_bar=True, batch_size=1)
        fault_point("train_step")  # (benchmarks/soak.py: a kill in the middle of a step; no-op otherwise)
        return total

    # ------------------------------------------------------------------------------------ balancing
    def _shared_params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.encoder.parameters() if p.requires_grad]

    def _own_params(self) -> dict[str, list[torch.nn.Parameter]]:
        """Each objective's trainable parameters that are not the encoder's (a head tied to the encoder's
        embeddings shares those, and they count as the encoder's)."""
        shared = {id(p) for p in self.encoder.parameters()}
        return {o.name: [p for p in o.parameters() if p.requires_grad and id(p) not in shared] for o in self.objectives}

    def _last_micro_batch(self) -> bool:
        """Whether the optimiser steps after this training step (always, without gradient accumulation)."""
        trainer = self._trainer
        if trainer is None or trainer.accumulate_grad_batches == 1:
            return True
        return not trainer.fit_loop._should_accumulate()

    def on_fit_start(self) -> None:
        """A loss-level balancer weights whole losses; a hook on each objective's own parameters divides
        their gradient by the objective's current weight, so heads keep the gradient of their own loss."""
        # the run folder, asked on every process (under DDP trainer.log_dir is a collective): conflicts.csv
        self._run_dir = self.trainer.log_dir if self._trainer is not None else None
        if self.balancer.gradient_level or isinstance(self.balancer, Static) or self._hooks:
            return
        for name, params in self._own_params().items():
            for p in params:
                self._hooks.append(p.register_hook(lambda g, n=name: g * self._head_scale.get(n, 1.0)))

    def on_fit_end(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def combine(self, losses: dict[str, torch.Tensor], step: int | None = None) -> torch.Tensor:
        """The loss whose gradient is the balancer's combination of the objectives' ``losses`` (each
        already times its static weight) on the shared encoder (see :mod:`unisent.balancers`), at
        optimiser step ``step`` (default: the trainer's). Its value is always the plain sum of
        ``losses``, the number logged as ``train/loss``."""
        if not losses:
            return torch.zeros((), device=self.device)
        step = self.global_step if step is None else step
        last = self._last_micro_batch()
        due = self.conflict_every > 0 and last and step % self.conflict_every == 0 and step != self._conflicts_logged_at
        start = time.perf_counter()
        value = sum(loss.detach() for loss in losses.values())
        shared = self._shared_params()
        stats = None
        if self.balancer.gradient_level:
            loss, stats = self._combine_gradients(losses, shared, last, due, step)
            loss = loss - loss.detach() + value
        else:
            if due:
                names = list(losses)
                rows = torch.stack(
                    [flat_grads(losses[n], shared, retain_graph=True) for n in names]
                )  # the graphs are used again by the backward pass of the weighted loss
                stats = conflict_stats(mean_over_processes(rows), names)
            weights = self.balancer.weights(losses, step)
            loss = sum(weights[n] * losses[n] for n in losses)
            regularizer = self.balancer.regularizer(losses)
            if regularizer is not None:
                loss = loss + regularizer
            if not isinstance(self.balancer, Static):
                for name, w in weights.items():
                    w = float(w)
                    self._head_scale[name] = 1.0 / w if w > 0 else 0.0
                    self.log(f"train/{name}/balance_weight", w, on_step=True, batch_size=1)
        if not isinstance(self.balancer, Static):
            self.log("train/balancer_seconds", time.perf_counter() - start, on_step=True, batch_size=1)
        if stats is not None:
            self._log_conflicts(step, stats)
        return loss

    def _combine_gradients(self, losses, shared, last: bool, due: bool, step: int):
        names_all = [o.name for o in self.objectives]
        size = sum(p.numel() for p in shared)
        if self._jacobian is None or self._jacobian.shape != (len(names_all), size):
            self._jacobian = torch.zeros(len(names_all), size, device=self.device)
            self._jacobian_rows = set()
        own = self._own_params()
        pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        for name, loss in losses.items():  # each objective's graph is its own: one backward pass over each
            grads = torch.autograd.grad(loss, shared + own[name], allow_unused=True)
            offset = 0
            row = self._jacobian[names_all.index(name)]
            for p, g in zip(shared, grads):
                if g is not None:
                    row[offset : offset + p.numel()] += g.reshape(-1).to(row.dtype)
                offset += p.numel()
            pairs += [(p, g) for p, g in zip(own[name], grads[len(shared) :]) if g is not None]
            self._jacobian_rows.add(name)
        stats = None
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if last:
            rows = [i for i, n in enumerate(names_all) if n in self._jacobian_rows]
            if distributed:  # every process aggregates the same matrix: the one of the whole batch
                mean_over_processes(self._jacobian)
            jacobian = self._jacobian[rows]
            names = [names_all[i] for i in rows]
            # in float32 whatever the step's autocast: a bf16 Gramian keeps ~3 digits of each inner product
            with torch.autocast(self.device.type, enabled=False):
                combined = self.balancer.aggregate(jacobian.float(), names, step)
            if due:
                stats = conflict_stats(jacobian, names)
            offset = 0
            for p in shared:
                pairs.append((p, combined[offset : offset + p.numel()].view_as(p)))
                offset += p.numel()
            self._jacobian.zero_()
            self._jacobian_rows = set()
            if distributed:  # DDP expects a gradient for every parameter it reduces
                seen = {id(p) for p, _ in pairs}
                pairs += [(p, torch.zeros_like(p)) for p in self.parameters() if p.requires_grad and id(p) not in seen]
        loss = surrogate(pairs)
        if loss is None:  # no own parameters and an accumulating micro-batch: nothing reaches a parameter yet
            loss = shared[0].sum() * 0.0
        return loss, stats

    def _log_conflicts(self, step: int, stats: dict[str, Any]) -> None:
        self._conflicts_logged_at = step
        names, norms, cosines = stats["names"], stats["norms"], stats["cosines"]
        for i, a in enumerate(names):
            self.log(f"conflict/{a}/grad_norm", norms[i], on_step=True, batch_size=1)
            for j in range(i + 1, len(names)):
                self.log(f"conflict/{a}~{names[j]}/cosine", cosines[i][j], on_step=True, batch_size=1)
        trainer = self._trainer
        if trainer is None or not trainer.is_global_zero:
            return
        if getattr(self, "_run_dir", None):
            GradientConflicts(self._run_dir).append(step, stats)
        for logger in trainer.loggers:
            if type(logger).__name__ == "WandbLogger":
                rows = [[a, *[round(c, 4) for c in cosines[i]]] for i, a in enumerate(names)]
                logger.log_table(key="conflict/cosine_matrix", columns=["objective", *names], data=rows)

    # ------------------------------------------------------------------------------------ loops
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """The validation loop runs over one placeholder batch; the evaluation is done at the loop's end
        by :class:`unisent.evaluation.EvaluationCallback`."""

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """See :meth:`validation_step`."""

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """Embeddings (batch, dim) of ``data.predict``'s sentences, in file order."""
        return self.inference_model()(**batch["text"]).float()

    def optimizer_groups(self) -> list[dict[str, Any]]:
        """The optimiser's parameter groups (:func:`parameter_groups`: the objectives' ``param_lr`` and
        ``head_lr``, the balancer's own rate)."""
        encoder = self.encoder if self.head_only_steps or self.head_only_ratio else None
        return parameter_groups(self.named_parameters(), [*self.objectives, self.balancer], self.head_lr, encoder)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.optimizer_groups())
        total = int(self.trainer.estimated_stepping_batches) if self.trainer else 1
        lr_lambda: Any = self._schedule(total)
        self._head_only = self.head_only_steps or round(self.head_only_ratio * total)
        if self._head_only:
            lr_lambda = [
                self._encoder_lambda(total) if group.get("encoder") else lr_lambda for group in optimizer.param_groups
            ]
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _schedule(self, total: int):
        """The learning-rate multiplier of a run of ``total`` steps: warm-up (``warmup_steps``, or
        ``warmup_ratio`` of them), then linear decay or constant."""
        return warmup_linear_lambda(
            self.warmup_steps or round(self.warmup_ratio * total), total, decay=self.schedule == "linear"
        )

    def _encoder_lambda(self, total: int):
        """The encoder's learning-rate multiplier with n head-only steps: 0 for the first n steps, then the
        run's warm-up and decay over the remaining ``total - n`` steps."""
        n = self._head_only
        if n >= total:
            raise ModelConfigError(
                f"model.head_only_steps ({n}) must be below the run's optimiser steps ({total}): "
                "the encoder would never learn (use model.head_only_ratio for a share of the run, or "
                "trainer.callbacks FreezeEncoder to never train it)"
            )
        after = self._schedule(total - n)
        return lambda step: 0.0 if step < n else after(step - n)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """During ``head_only_steps`` the encoder runs as at inference (eval mode: no dropout), so that the
        heads fit the features they will be used with, as a linear probe does; afterwards in train mode."""
        if self._head_only:
            self.encoder.train(self.global_step >= self._head_only)

    def on_before_optimizer_step(self, optimizer) -> None:
        """At step ``head_only_steps`` the encoder starts learning with a fresh optimiser state: the moments
        that AdamW gathered from its gradients while its rate was 0 (under the freshly initialised heads)
        are dropped, as if the optimiser had been built then (LP-FT's second stage)."""
        if not self._head_only or self.global_step != self._head_only:
            return
        for group in optimizer.param_groups:
            if group.get("encoder"):
                for p in group["params"]:
                    optimizer.state.pop(p, None)

    def inference_model(self) -> torch.nn.Module:
        """What ``unisent.load`` returns for this model: the encoder (with whatever the objectives put
        into it: AMR's added tokens), or the wrapper that the one objective with an inference head
        returns from :meth:`Objective.inference_model` (GaussCSE's mean/variance model). Training-only
        parts (EASE's entity table, CMLM's MLM head) stay in the checkpoint. Two objectives with
        inference heads in one model are an error: which head's vector ``encode`` returns would be a
        guess."""
        heads = [(o.name, m) for o in self.objectives if (m := o.inference_model(self.encoder)) is not None]
        if len(heads) > 1:
            raise ValueError(
                f"objectives {', '.join(repr(n) for n, _ in heads)} each put an inference head on the "
                "encoder; a model can carry one (e.g. CMLM without proj=True beside GaussCSE)"
            )
        return heads[0][1] if heads else self.encoder

    def on_train_end(self) -> None:
        if self.trainer is None:
            return
        root = Path(self.trainer.log_dir or self.trainer.default_root_dir)  # a collective: on every process
        if not self.trainer.is_global_zero:
            return
        if (root / "conflicts.csv").exists():
            try:
                print(
                    f"unisent: gradient conflicts plotted to {plot_conflicts(root / 'conflicts.csv')}", file=sys.stderr
                )
            except ImportError:
                print("unisent: conflicts.csv written; pip install matplotlib to plot it", file=sys.stderr)
        if not self.save_encoder:
            return
        self.encoder_dir = self.inference_model().save_pretrained(root / "encoder")
        print(f"unisent: trained encoder saved to {self.encoder_dir} (load it with unisent.load)", file=sys.stderr)

    # ------------------------------------------------------------------------------------ records
    def run_config(self) -> dict[str, Any]:
        """The settings that define this model: encoder and every objective (for logs and cards)."""
        return {
            "encoder": asdict(self.encoder_config),
            "objectives": [o.config() for o in self.objectives],
            "balancer": self.balancer.config(),
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = self.run_config()

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str = "cpu") -> UnisentModule:
        """Rebuild a module (encoder and objectives, weights included) from a Lightning checkpoint.

        Raises:
            FileNotFoundError: no such file.
            unisent.io.CheckpointError: truncated, not a PyTorch checkpoint, or not one of ``unisent fit``.
        """
        check_unisent_checkpoint(path)
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
        record = ckpt[CHECKPOINT_KEY]
        module = cls(
            encoder=EncoderConfig(**record["encoder"]),
            objectives=[instantiate(spec) for spec in record["objectives"]],
        )
        # the balancer's state (Uncertainty's log-variances, DWA's loss means) is training-only
        module.load_state_dict({k: v for k, v in ckpt["state_dict"].items() if not k.startswith("balancer.")})
        return module


def _load_checkpoint(path: Path) -> torch.nn.Module:
    """A ``.ckpt`` of ``unisent fit`` as its inference model: what ``unisent.load(ckpt)`` returns."""
    return UnisentModule.from_checkpoint(path).inference_model()


register_checkpoint_loader(_load_checkpoint)
