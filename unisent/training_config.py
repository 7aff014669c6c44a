"""The ``model`` section's plain-data settings and their checks: ``model.train`` (``TrainConfig``: the
learning-rate schedule, the heads, the weight schedule, conflict logging, caching), ``model.evaluation``, and the
old flat keys' new places (``MOVED``, ``train_from_flat``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .io import unknown_objectives

__all__ = [
    "MOVED",
    "EvaluationConfig",
    "HeadsConfig",
    "ModelConfigError",
    "ScheduleConfig",
    "TrainConfig",
    "check_weight_schedule",
    "train_from_flat",
]

#: each flat key ``UnisentModule`` took before the training settings were grouped -> its place now
MOVED = {
    "warmup_steps": "train.schedule.warmup_steps",
    "warmup_ratio": "train.schedule.warmup_ratio",
    "schedule": "train.schedule.decay",
    "save_encoder": "train.save_encoder",
    "weight_schedule": "train.weight_schedule",
    "conflict_every": "train.conflict_every",
    "head_lr": "train.heads.lr",
    "head_only_steps": "train.heads.only_steps",
    "head_only_ratio": "train.heads.only_ratio",
    "cache_chunk": "train.cache_chunk",
}


@dataclass
class ScheduleConfig:
    """The learning rate over the run (``model.train.schedule``): a linear warm-up from 0, then a decay.

    Attributes:
        warmup_steps: linear warm-up steps (from 0 to the optimiser's learning rate).
        warmup_ratio: warm-up as a fraction of all training steps (used when ``warmup_steps`` is 0); 1.0 warms
            up over the whole run (GaussCSE, Appendix A).
        decay: ``linear`` decays to 0 after warm-up; ``constant`` keeps the peak rate.
    """

    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    decay: Literal["linear", "constant"] = "linear"

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ModelConfigError(f"model.train.schedule.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise ModelConfigError(f"model.train.schedule.warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        if self.decay not in ("linear", "constant"):
            raise ModelConfigError(f"model.train.schedule.decay must be linear or constant, got {self.decay!r}")


@dataclass
class HeadsConfig:
    """The objectives' own parameters (``model.train.heads``): their learning rate, and a start in which
    only they learn.

    Attributes:
        lr: learning rate of the own parameters of objectives without a ``param_lr``; unset: the optimiser's.
        only_steps: for the first N optimiser steps only the objectives' own parameters learn, the encoder in
            eval mode (but still run backward: a full step's cost); then it starts with a fresh optimiser state
            and the schedule over the remaining steps (LP-FT, Kumar et al. 2022, arXiv:2202.10054: trained heads
            distort a pretrained encoder's features less).
        only_ratio: ``only_steps`` as a share of all training steps (used when ``only_steps`` is 0).
    """

    lr: float | None = None
    only_steps: int = 0
    only_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.lr is not None and not self.lr > 0:
            raise ModelConfigError(f"model.train.heads.lr must be > 0 (or unset: the optimiser's lr), got {self.lr}")
        if self.only_steps < 0:
            raise ModelConfigError(
                f"model.train.heads.only_steps must be >= 0 (0: the encoder learns from the start), got "
                f"{self.only_steps}"
            )
        if not 0.0 <= self.only_ratio < 1.0:
            raise ModelConfigError(f"model.train.heads.only_ratio must be in [0, 1), got {self.only_ratio}")


@dataclass
class TrainConfig:
    """How ``UnisentModule`` trains (``model.train``), beside the optimiser and the balancer, which are
    ``class_path`` objects of the ``model`` section.

    Attributes:
        schedule: the learning rate's warm-up and decay (``ScheduleConfig``).
        heads: the objectives' own parameters: their rate, head-only steps (``HeadsConfig``).
        weight_schedule: ``{objective name: [[step, weight], ...]}``: the objective's weight from each listed
            optimiser step on (0 skips its forward pass), e.g. CMLM's S3: ``{bitext: [[0, 0.0], [100000, 0.2]]}``.
            Under DDP, switching off one with own parameters needs ``strategy: ddp_find_unused_parameters_true``.
        conflict_every: every N optimiser steps, log gradient conflicts
            ([`ConflictLog`][unisent.balancers.ConflictLog]); 0: never. A loss-level balancer keeps one
            gradient row per objective on those steps.
        cache_chunk: GradCache (``unisent.objectives.grad_cache``): in-batch objectives encode in chunks of
            this many rows, in one chunk's memory, with the whole batch's loss and gradients. Unset: no cache.
        save_encoder: after ``fit``, save the trained encoder to ``<log dir>/encoder``.
    """

    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    weight_schedule: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    conflict_every: int = 0
    cache_chunk: int | None = None
    save_encoder: bool = True

    def __post_init__(self) -> None:
        # a checkpoint's hyper-parameters hold the groups as dicts (Lightning's load_from_checkpoint)
        self.schedule = ScheduleConfig(**self.schedule) if isinstance(self.schedule, dict) else self.schedule
        self.heads = HeadsConfig(**self.heads) if isinstance(self.heads, dict) else self.heads
        self.weight_schedule = check_weight_schedule(self.weight_schedule or {})
        if self.conflict_every < 0:
            raise ModelConfigError(
                f"model.train.conflict_every must be >= 0 (0: no conflict logging), got {self.conflict_every}"
            )
        chunk = self.cache_chunk
        if chunk is not None and (isinstance(chunk, bool) or not int(chunk) >= 1):
            raise ModelConfigError(
                f"model.train.cache_chunk must be a number of rows >= 1 (or unset: no cache), got {chunk}"
            )


def train_from_flat(hparams: dict[str, Any]) -> dict[str, Any]:
    """The ``train`` dict of ``hparams`` (a checkpoint's ``hyper_parameters``) written before the groups: its
    flat keys of ``MOVED`` in their places (empty: it has none)."""
    train: dict[str, Any] = {}
    for key in MOVED.keys() & hparams.keys():
        *group, name = MOVED[key].split(".")[1:]  # train.[group.]name
        (train.setdefault(group[0], {}) if group else train)[name] = hparams[key]
    return train


@dataclass
class EvaluationConfig:
    """Evaluation tasks of Lightning's validation and test loops (``model.evaluation``), run by
    ``unisent.evaluation.EvaluationCallback`` (the CLI adds it; in Python, pass it to the Trainer).

    ``val_tasks`` log ``val/<task>`` and ``val/score`` (the mean main score, which selects
    ``checkpoints/best.ckpt``) whenever Lightning validates; ``unisent test`` runs ``test_tasks``.

    Attributes:
        val_tasks: task names or groups (see ``unisent evaluate --list``); empty = no validation.
        test_tasks: task names or groups for ``unisent test``.
        data_dir: root of the evaluation data; default (``None``): the bundled sample (STS-B dev and test).
        panel: the columns of [`unisent.evaluation.panel.evaluate_panel`][unisent.evaluation.evaluate_panel] that
            ``unisent ablate`` scores this recipe's runs on (empty: ``test_tasks``).
        panel_own: ``{objective name: panel column}``: what each objective is for; ``unisent ablate``
            compares it in the combination against the objective alone.
        panel_targets: ``{panel column: minimum}``: ``unisent ablate`` reports, per balancer, whether the
            mean over seeds meets each, and by how much.
        similarity: ``cosine``, or for Gaussian models a KL score (``unisent.evaluation.similarities``):
            ``kl`` (asymmetric, the paper), ``kl_symmetric`` (the authors' STS score), ...
    """

    val_tasks: list[str] = field(default_factory=lambda: ["stsb-dev"])
    test_tasks: list[str] = field(default_factory=lambda: ["stsb-test"])
    data_dir: str | None = None
    batch_size: int = 128
    similarity: Literal["cosine", "kl", "kl_mean", "kl_symmetric", "kl_symmetric_mean", "kl_avg_sim"] = "cosine"
    panel: list[str] = field(default_factory=list)
    panel_own: dict[str, str] = field(default_factory=dict)
    panel_targets: dict[str, float] = field(default_factory=dict)


class ModelConfigError(ValueError):
    """A ``model`` section value the module refuses; the CLI reports it in one line."""


def check_weight_schedule(
    schedule: dict[str, Any], names: list[str] | None = None
) -> dict[str, list[tuple[int, float]]]:
    """``model.train.weight_schedule`` as ``{name: [(step, weight), ...]}``, steps increasing, steps and
    weights >= 0, checked against the objectives' ``names`` when given (a copy: a module appends to it).

    Raises:
        ModelConfigError: an unknown objective, a malformed entry or steps out of order.
    """
    unknown = sorted(set(schedule) - set(names)) if names is not None else []
    if unknown:
        raise ModelConfigError(unknown_objectives("model.train.weight_schedule", unknown, names or []))
    checked = {}
    for name, entries in schedule.items():
        pairs = []
        for i, entry in enumerate(entries):
            if len(entry) != 2 or float(entry[0]) < 0 or float(entry[1]) < 0:
                raise ModelConfigError(
                    f"model.train.weight_schedule.{name}[{i}] must be [step >= 0, weight >= 0], got {entry!r}"
                )
            pairs.append((int(entry[0]), float(entry[1])))
        if [p[0] for p in pairs] != sorted(p[0] for p in pairs):
            raise ModelConfigError(
                f"model.train.weight_schedule.{name}: steps must increase, got {[p[0] for p in pairs]}"
            )
        checked[name] = pairs
    return checked
