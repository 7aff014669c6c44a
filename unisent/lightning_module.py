"""The one LightningModule: an encoder, any number of weighted objectives, optimiser and schedule.

One training step, by contract: batch -> embed -> loss -> gradient row -> balancer -> optimiser.

1. **embed**: an in-batch objective makes its views with [`embed`][unisent.objectives.Objective.embed] from the encoder,
   or under ``cache_chunk`` from a ``CachedEncode``; any other objective runs its own ``forward``;
2. **loss**: the objective's loss, times its static weight;
3. **gradient row**: [`unisent.balancers.StepGradients.add`][unisent.balancers.StepGradients.add] takes its gradients at
   once (freeing its graph); under GradCache each chunk is then replayed into the row (``add_chunk``);
4. **balancer**: ``UnisentModule.finish_step`` combines the rows into the loss Lightning calls ``backward`` on;
5. **optimiser**: Lightning's automatic optimisation.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig

from .balancers import Balancer, ConflictLog, Static, StepGradients, weight_value
from .checkpoint_record import CHECKPOINT_KEY, module_from_checkpoint
from .encoders import Encoder, EncoderConfig
from .inference.base import save_at_inference_length
from .io.model_files import load_state
from .io.remote import is_remote, join, staged_folder
from .lightning_compat import should_accumulate
from .objectives import Objective, SimCSE
from .objectives.grad_cache import CachedEncode
from .objectives.objective import ObjectiveOutput
from .optim import AdamW, split_weight_decay, warmup_linear_lambda
from .testing import fault_point
from .training_config import EvaluationConfig, ModelConfigError, TrainConfig, check_weight_schedule, train_from_flat

__all__ = ["UnisentModule", "parameter_groups"]


def _takes_one_backward(strategy: Any) -> bool:
    """Whether a Lightning strategy takes the gradients in one backward call of its own (FSDP, DeepSpeed)."""
    return isinstance(strategy, (FSDPStrategy, DeepSpeedStrategy))


def _clock(device: torch.device) -> float:
    """Seconds on a monotonic clock, after the device's queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _batch_len(batch: Any) -> int:
    """Records in a collated batch: the first dimension of its first tensor."""
    for value in batch.values() if isinstance(batch, dict) else ():
        if torch.is_tensor(value):
            return int(value.shape[0])
        if isinstance(value, dict):
            return _batch_len(value)
    return 0


def parameter_groups(
    named_parameters, objectives, head_lr: float | None = None, encoder: torch.nn.Module | None = None
) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: ``split_weight_decay`` over everything, and again, with ``lr`` set, for the own
    parameters of each objective with a ``param_lr`` or, given ``head_lr``, of every other objective (not a balancer's).
    Without either, the same two groups as ever, so checkpoints resume. With ``encoder``, its parameters get groups of
    their own marked ``"encoder": True`` (for ``model.train.heads.only_steps``), with the parameters of the objectives'
    [`encoder_like_modules`][unisent.objectives.Objective.encoder_like_modules], which never take ``head_lr``."""
    own: dict[int, float] = {}
    encoder_like: set[int] = set()
    for objective in objectives:
        lr = objective.param_lr
        if isinstance(objective, Objective):
            lr = head_lr if lr is None else lr
            encoder_like |= {id(p) for m in objective.encoder_like_modules() for p in m.parameters()}
        if lr is not None:
            own.update({id(p): float(lr) for p in objective.parameters() if id(p) not in encoder_like})
    named = list(named_parameters)
    rest = [(n, p) for n, p in named if id(p) not in own]
    if encoder is None:
        groups = split_weight_decay(rest)
    else:
        shared = {id(p) for p in encoder.parameters()} | encoder_like
        groups = [g | {"encoder": True} for g in split_weight_decay((n, p) for n, p in rest if id(p) in shared)]
        groups = [g for g in groups + split_weight_decay((n, p) for n, p in rest if id(p) not in shared) if g["params"]]
    for lr in sorted(set(own.values())):
        for group in split_weight_decay((n, p) for n, p in named if own.get(id(p)) == lr):
            if group["params"]:
                groups.append(group | {"lr": lr})
    return groups


class UnisentModule(L.LightningModule):
    """Trains one shared encoder with a weighted sum of objectives.

    Each training step gets ``{objective name: batch}``, logs every loss term and metric as
    ``train/<objective>/<term>`` and optimises ``sum(objective.weight * objective.total(terms))`` (``train/loss``).

    Args:
        encoder: backbone, pooler and max length ([`EncoderConfig`][unisent.encoders.EncoderConfig]).
        objectives: [`Objective`][unisent.objectives.Objective] instances (YAML: ``class_path``); default: SimCSE.
        optimizer: any torch optimiser (``class_path``); default ``unisent.optim.AdamW`` (lr 3e-5, fused).
        balancer: how the objectives combine on the shared encoder ([`unisent.balancers`][unisent.balancers]); default:
            Static.
        train: the schedule, the heads' rate and head-only start, the weight schedule, conflict logging,
            GradCache and saving (``TrainConfig``: ``model.train.schedule.warmup_ratio``).
        evaluation: tasks of the validation and test loops (``EvaluationConfig``).

    The plain settings are dataclasses (checked when built, shown by ``unisent fit --help-all``); the optimiser,
    balancer and objectives are ``class_path`` objects, so they stay parameters of their own. The flat keys of before
    (``model.warmup_ratio``, ...) are in ``MOVED``; checkpoints that hold them still load (``load_from_checkpoint``).
    """

    def __init__(
        self,
        encoder: EncoderConfig | None = None,
        objectives: list[Objective] | None = None,
        optimizer: OptimizerCallable = AdamW,
        balancer: Balancer | None = None,
        train: TrainConfig = TrainConfig(),
        evaluation: EvaluationConfig | None = None,
    ) -> None:
        super().__init__()
        # a checkpoint's hyperparameters hold the configs as dicts (Lightning's load_from_checkpoint)
        encoder = EncoderConfig(**encoder) if isinstance(encoder, dict) else encoder
        train = TrainConfig(**train) if isinstance(train, dict) else train
        evaluation = EvaluationConfig(**evaluation) if isinstance(evaluation, dict) else evaluation
        self.save_hyperparameters(ignore=["objectives", "optimizer", "balancer"])
        self.encoder = Encoder(encoder or EncoderConfig())
        self.encoder_config = self.encoder.config  # resolved: preset and model files filled in (run_config)
        positions = self.encoder.position_limit() if hasattr(self.encoder, "position_limit") else None
        if positions and self.encoder_config.max_length > positions:
            raise ModelConfigError(
                f"model.encoder.max_length={self.encoder_config.max_length} exceeds the {positions} positions of the "
                f"backbone {self.encoder_config.model}; use at most {positions}"
            )
        objectives = list(objectives) if objectives is not None else [SimCSE()]
        if not objectives:
            raise ModelConfigError("the model needs at least one objective")
        names = [o.name for o in objectives]
        if len(set(names)) != len(names):
            raise ModelConfigError(f"objective names must be unique, got {names}; set `name:` on each")
        self.objectives = torch.nn.ModuleList(objectives)
        # setup_for: objectives that add tokens first, so that a head sized by the vocabulary sees the final one
        for objective in sorted(objectives, key=lambda o: not o.extends_vocabulary):
            objective.setup_for(self.encoder)
        self.optimizer_factory = optimizer
        self.schedule, self.heads, self.save_encoder = train.schedule, train.heads, train.save_encoder
        self.evaluation = evaluation or EvaluationConfig()
        self.encoder_dir: str | Path | None = None
        self.weight_schedule = check_weight_schedule(train.weight_schedule, names)
        self._logged_terms: dict[str, tuple[str, ...]] = {}
        self.balancer = balancer if balancer is not None else Static()
        self.balancer.setup(names)
        self._head_only = self.heads.only_steps  # the run's number, set from the ratio once its length is known
        if train.cache_chunk is not None and not any(o.in_batch for o in objectives):
            raise ModelConfigError(
                f"model.train.cache_chunk: none of the objectives ({', '.join(names)}) can be cached: GradCache "
                "applies to in-batch objectives, those that implement embed and loss (SimCSE, EASE, GaussCSE, "
                "BitextRetrieval, AMRSimCSE, Matryoshka of one of them)"
            )
        self._gradients = StepGradients(names)  # the gradient rows and the balancer of one step (module doc)
        #: rows per encoder pass under GradCache (``None``: no cache)
        self.cache_chunk: int | None = train.cache_chunk
        self._conflicts = ConflictLog(train.conflict_every)

    @property
    def objective_list(self) -> list[Objective]:
        """``objectives`` (a ``ModuleList``, whose items type as modules) as the objectives they are."""
        return cast("list[Objective]", list(self.objectives))

    @property
    def conflict_every(self) -> int:
        """Optimiser steps between two steps that log gradient conflicts (0: never)."""
        return self._conflicts.every

    # ------------------------------------------------------------------------------------ training
    def objective_weight(self, objective: Objective, step: int) -> float:
        """The weight of ``objective`` at optimiser step ``step`` (see ``model.train.weight_schedule``)."""
        weight = objective.weight
        for start, value in self.weight_schedule.get(objective.name, ()):
            if step >= start:
                weight = value
        return weight

    def stop_objective(self, name: str, step: int) -> None:
        """From optimiser step ``step`` on, objective ``name`` weighs 0 (appended to ``weight_schedule``): its
        loss is not computed and its own parameters get no gradient (``unisent.evaluation.BestOnDev``)."""
        self.weight_schedule[name] = [*self.weight_schedule.get(name, ()), (step, 0.0)]

    @property
    def encoder_start_step(self) -> int:
        """The optimiser step at which the encoder starts learning (the head-only steps; 0 without)."""
        return self._head_only

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """Each objective's forward pass and at once its gradients, then the balancer's combination."""
        step, last = self.start_step()
        several = len(self.objectives) > 1
        seconds: dict[str, float] = {}
        for objective in self.objective_list:
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
            out = self._run_objective(objective, sub, weight)
            if several:
                seconds[objective.name] = _clock(self.device) - start
                self.log(f"train/{objective.name}/batch_size", float(_batch_len(sub)), on_step=True, batch_size=1)
            self._logged_terms[objective.name] = (*out.terms, *out.metrics) + (
                ("batch_size", "forward_share") if several else ()
            )
            for term, value in (out.terms | out.metrics).items():
                value = value.detach() if torch.is_tensor(value) else float(value)
                self.log(f"train/{objective.name}/{term}", value, on_step=True, batch_size=1)
        spent = sum(seconds.values())
        for name, value in seconds.items():  # each objective's share of this step's forward time
            self.log(f"train/{name}/forward_share", value / spent if spent > 0 else 0.0, on_step=True, batch_size=1)
        total = self.finish_step(step, last)
        self.log("train/loss", total.detach(), on_step=True, prog_bar=True, batch_size=1)
        fault_point("train_step")  # (benchmarks/soak.py: a kill in the middle of a step; no-op otherwise)
        return total

    def _run_objective(self, objective: Objective, batch: dict[str, Any], weight: float) -> ObjectiveOutput:
        """Stages 1-3 for one objective: its terms and metrics (for the logs); its gradients are taken."""
        if not (self.cache_chunk and objective.in_batch):
            out = ObjectiveOutput.of(objective(self.encoder, batch))
            self._gradients.add(objective.name, weight * objective.total(out.terms))
            return out
        encode = CachedEncode(self.encoder, self.cache_chunk)
        out = ObjectiveOutput.of(objective.loss(objective.embed(encode, batch), batch))
        grads = self._gradients.add(objective.name, weight * objective.total(out.terms), encode.leaves)
        if encode.leaves and self._gradients.shared:  # a frozen encoder: nothing to replay for
            for vectors, grad in encode.replay(grads):
                self._gradients.add_chunk(objective.name, vectors, grad)
        return out

    # ------------------------------------------------------------------------------------ balancing
    def _shared_params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.encoder.parameters() if p.requires_grad]

    def _own_params(self) -> dict[str, list[torch.nn.Parameter]]:
        """Each objective's trainable parameters that are not the encoder's (tied embeddings are)."""
        shared = {id(p) for p in self.encoder.parameters()}
        return {
            o.name: [p for p in o.parameters() if p.requires_grad and id(p) not in shared] for o in self.objective_list
        }

    def _last_micro_batch(self) -> bool:
        """Whether the optimiser steps after this training step (always, without gradient accumulation)."""
        trainer = self._trainer
        if trainer is None or trainer.accumulate_grad_batches == 1:
            return True
        return not should_accumulate(trainer)

    def on_fit_start(self) -> None:
        # the run folder, asked on every process (under DDP trainer.log_dir is a collective): conflicts.csv
        self._conflicts.run_dir = self.trainer.log_dir if self._trainer is not None else None
        strategy = self._trainer.strategy if self._trainer is not None else None
        # GradCache refused, in one line, under a strategy that takes the gradients in one backward call
        if self.cache_chunk and _takes_one_backward(strategy):
            raise ModelConfigError(
                f"model.train.cache_chunk (GradCache) needs each objective's gradients inside the training step; "
                f"{type(strategy).__name__} takes them in one backward call of its own: use DDP, or unset cache_chunk"
            )

    def start_step(self) -> tuple[int, bool]:
        """Begin a micro-batch of the trainer's optimiser step: each objective's step (``_run_objective``), then
        ``finish_step`` ([`unisent.balancers.StepGradients.start`][unisent.balancers.StepGradients.start]); the
        step and whether the optimiser steps after this micro-batch, for ``finish_step``."""
        step, last = self.global_step, self._last_micro_batch()
        strategy = self._trainer.strategy if self._trainer is not None else None
        self._gradients.start(
            self.balancer,
            self._shared_params(),
            self._own_params(),
            conflicts=self._conflicts.due(step, last),
            deferred=_takes_one_backward(strategy),
            cached=bool(self.cache_chunk),
        )
        return step, last

    def finish_step(self, step: int, last: bool) -> torch.Tensor:
        """The loss whose gradient is the balancer's combination on the shared encoder (and each own
        parameter's own loss's); its value, logged as ``train/loss``, is the plain sum of the losses (a
        loss-level balancer: their weighted sum plus its regularizer)."""
        gradients = self._gradients
        loss, stats, weights = gradients.finish(last=last, step=step, parameters=self.parameters())
        if not gradients.values:
            return loss
        if not isinstance(self.balancer, Static):
            for name, w in weights.items():
                self.log(f"train/{name}/balance_weight", weight_value(w), on_step=True, batch_size=1)
            self.log("train/balancer_seconds", gradients.seconds, on_step=True, batch_size=1)
        if stats is not None:
            self._conflicts.record(self.log, self._trainer, step, stats)
        return loss

    # ------------------------------------------------------------------------------------ loops
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """One placeholder batch; ``unisent.evaluation.EvaluationCallback`` evaluates at the loop's end."""

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """See ``validation_step``."""

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """Embeddings (batch, dim) of ``data.predict``'s sentences, in file order."""
        return self.inference_model()(**batch["text"]).float()

    def optimizer_groups(self) -> list[dict[str, Any]]:
        """The optimiser's parameter groups (``parameter_groups``)."""
        heads = self.heads
        encoder = self.encoder if heads.only_steps or heads.only_ratio else None
        return parameter_groups(self.named_parameters(), [*self.objectives, self.balancer], heads.lr, encoder)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer = self.optimizer_factory(self.optimizer_groups())
        for group in optimizer.param_groups:  # lr: 1e400 reads as inf, and would train NaN weights
            lr = group.get("lr")
            if isinstance(lr, (int, float)) and not (math.isfinite(lr) and lr >= 0):
                raise ModelConfigError(f"model.optimizer.init_args.lr must be a finite number >= 0, got {lr}")
        total = int(self.trainer.estimated_stepping_batches) if self.trainer else 1
        lr_lambda: Any = self._schedule(total)
        self._head_only = self.heads.only_steps or round(self.heads.only_ratio * total)
        if self._head_only:
            lr_lambda = [
                self._encoder_lambda(total) if group.get("encoder") else lr_lambda for group in optimizer.param_groups
            ]
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _schedule(self, total: int):
        """The learning-rate multiplier of a run of ``total`` steps: warm-up (``warmup_steps``, or
        ``warmup_ratio`` of them), then linear decay or constant (``ScheduleConfig``)."""
        s = self.schedule
        return warmup_linear_lambda(s.warmup_steps or round(s.warmup_ratio * total), total, decay=s.decay == "linear")

    def _encoder_lambda(self, total: int):
        """The encoder's learning-rate multiplier: 0 for the n head-only steps, then the schedule over the rest."""
        n = self._head_only
        if n >= total:
            raise ModelConfigError(
                f"model.train.heads.only_steps ({n}) must be below the run's optimiser steps ({total}): "
                "the encoder would never learn (use model.train.heads.only_ratio for a share of the run, or "
                "trainer.callbacks FreezeEncoder to never train it)"
            )
        after = self._schedule(total - n)
        return lambda step: 0.0 if step < n else after(step - n)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """During the head-only steps (``model.train.heads``) the encoder runs in eval mode, so the heads fit
        the features they will be used with (a linear probe)."""
        if self._head_only:
            training = self.global_step >= self._head_only
            self.encoder.train(training)
            for objective in self.objective_list:
                for module in objective.encoder_like_modules():
                    module.train(training)

    def on_before_optimizer_step(self, optimizer) -> None:
        """At the last head-only step the encoder's optimiser state (moments gathered at rate 0 under fresh
        heads) is dropped, as if the optimiser were built then (LP-FT's second stage)."""
        if not self._head_only or self.global_step != self._head_only:
            return
        for group in optimizer.param_groups:
            if group.get("encoder"):
                for p in group["params"]:
                    optimizer.state.pop(p, None)

    def inference_model(self) -> torch.nn.Module:
        """What ``unisent.load`` returns for this model: the encoder, or the one objective's inference head
        ([`Objective.inference_model`][unisent.objectives.Objective.inference_model]); two such objectives are an
        error."""
        heads = [(o.name, m) for o in self.objective_list if (m := o.inference_model(self.encoder)) is not None]
        if len(heads) > 1:
            raise ValueError(
                f"objectives {', '.join(repr(n) for n, _ in heads)} each put an inference head on the "
                "encoder; a model can carry one (e.g. CMLM without proj=True beside GaussCSE)"
            )
        return heads[0][1] if heads else self.encoder

    def on_train_end(self) -> None:
        if self.trainer is None:
            return
        root = str(self.trainer.log_dir or self.trainer.default_root_dir)  # a collective: on every process
        if not self.trainer.is_global_zero:
            return
        self._conflicts.plot(root)
        if not self.save_encoder:
            return
        target = join(root, "encoder") if is_remote(root) else Path(root) / "encoder"
        with staged_folder(target) as folder:  # a URL (s3://...): saved locally, then uploaded
            self.encoder_dir, lengths = save_at_inference_length(self.inference_model(), folder)
        self.encoder_dir = target if is_remote(root) else self.encoder_dir
        print(
            f"unisent: trained encoder saved to {self.encoder_dir}{lengths} (load it with unisent.load)",
            file=sys.stderr,
        )

    # ------------------------------------------------------------------------------------ records
    def run_config(self) -> dict[str, Any]:
        """The settings that define this model: encoder and every objective (for logs and cards)."""
        return {
            "encoder": asdict(self.encoder_config),
            "objectives": [o.config() for o in self.objective_list],
            "balancer": self.balancer.config(),
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = self.run_config()
        # plain data only (dataclasses as dicts): the file must load with weights_only=True anywhere
        hparams = checkpoint.get("hyper_parameters")
        if isinstance(hparams, dict):
            checkpoint["hyper_parameters"] = {
                k: asdict(v) if isinstance(v, (EncoderConfig, TrainConfig, EvaluationConfig)) else v
                for k, v in hparams.items()
            }

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module``'s; under ``--ckpt_path`` tensors that do not fit are one line naming the checkpoint."""
        return load_state(super(), state_dict, strict, assign, source=getattr(self._trainer, "ckpt_path", None))

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        """Lightning's; a checkpoint written before ``model.train`` (flat ``warmup_steps``, ``head_lr``, ... in its
        hyper-parameters, which Lightning would drop) gets them in their groups (``train_from_flat``)."""
        local = isinstance(checkpoint_path, (str, Path)) and not is_remote(str(checkpoint_path))
        if local and "train" not in kwargs:  # a remote one goes to Lightning's fsspec reading as before
            from .io import load_checkpoint

            if train := train_from_flat(load_checkpoint(checkpoint_path, mmap=True).get("hyper_parameters") or {}):
                kwargs["train"] = train
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    @classmethod
    def from_checkpoint(cls, path: str | Path, map_location: str = "cpu") -> UnisentModule:
        """Rebuild a module, weights included, from a checkpoint of ``unisent fit`` (``module_from_checkpoint``).

        Raises:
            FileNotFoundError: no such file.
            unisent.io.CheckpointError: truncated, not a PyTorch checkpoint, or not one of ``unisent fit``.
        """
        return module_from_checkpoint(cls, path, map_location)
