"""Lightning's Trainer with unisent's precision words (``unisent.hardware``): ``auto`` (bf16 where this
machine computes fast in bf16, fp32 elsewhere), ``fp32`` or ``bf16``; Lightning's own names pass through.
``unisent fit`` builds this Trainer, so a recipe may say ``precision: auto`` (the CPU recipes do). ``auto`` is
also the default: a recipe (or a call) that names no precision trains as ``unisent encode`` and
``model.encode`` encode on the same machine, not in Lightning's fp32 default."""

from __future__ import annotations

import os
import sys
from typing import Any, Literal, cast

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from .hardware import resolve_precision
from .lightning_compat import PrecisionInput

__all__ = ["UnisentTrainer", "trainer_device"]


def trainer_device(accelerator: Any) -> str:
    """The device kind a Trainer with ``accelerator`` computes on: ``cpu``, ``cuda``, ``mps``, ..."""
    if accelerator is None or accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(accelerator, str):
        return {"gpu": "cuda"}.get(accelerator.lower(), accelerator.lower())
    name = type(accelerator).__name__.lower()  # an Accelerator instance: CPUAccelerator, CUDAAccelerator ...
    return next((kind for kind in ("cuda", "mps", "xla") if kind in name), "cpu")


class UnisentTrainer(Trainer):
    """``lightning.pytorch.Trainer``; ``precision="auto"`` (the default; ``None`` too) is resolved for the
    accelerator and the choice is printed in one line (``precision auto: bf16-mixed (the CPU has avx512_bf16)``).

    ``log_dir`` is the run's own folder for every logger, the one its ``checkpoints/`` are in."""

    def __init__(
        self, *args: Any, precision: PrecisionInput | Literal["auto", "fp32"] | None = "auto", **kwargs: Any
    ) -> None:
        if precision is None:  # Lightning's "not given": the same rule as a recipe that names none
            precision = "auto"
        resolved, line = resolve_precision(precision, trainer_device(kwargs.get("accelerator", "auto")))
        if line is not None:
            if getattr(rank_zero_only, "rank", 0) == 0:
                print(f"unisent: {line}", file=sys.stderr)
        #: what ``auto`` resolved to (or the precision as given)
        self.precision_choice = resolved
        super().__init__(*args, precision=cast(PrecisionInput, resolved), **kwargs)  # one of Lightning's names

    @property
    def log_dir(self) -> str | None:
        """The run's folder: ``<save_dir>/<name>/<version>``, where ``ModelCheckpoint`` writes ``checkpoints/``
        (Lightning's own is the shared ``save_dir`` for loggers other than CSV and TensorBoard, so that every
        W&B run would write its ``config.yaml`` and ``encoder/`` to the same place). A collective under DDP."""
        logger = self.loggers[0] if self.loggers else None
        if logger is None or isinstance(logger, (CSVLogger, TensorBoardLogger)):
            return super().log_dir
        save_dir = logger.save_dir if logger.save_dir is not None else self.default_root_dir
        version = logger.version
        version = version if isinstance(version, str) else f"version_{version}"
        return self.strategy.broadcast(os.path.join(save_dir, str(logger.name), version))
