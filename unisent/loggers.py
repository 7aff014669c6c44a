"""Lightning's W&B logger with each row logged under its global step, so that a resumed run continues it.

Lightning's ``WandbLogger`` lets W&B number the rows itself (``_step`` 0, 1, 2 ...). A run resumed in
another process (``--ckpt_path last`` after a requeue, a torchrun restart) continues the same W&B run id,
but W&B's count starts again at 0 where it cannot ask a server (offline mode, then ``wandb sync``), and a
server drops rows whose step is not above the last one it has. Here every row is logged at the trainer's
global step: steps continue across attempts, and what one step logs (training, validation, tables) is one
row. ``unisent fit`` uses this class for ``lightning.pytorch.loggers.WandbLogger`` (``use_step_logger``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger

from .lightning_compat import logger_prefix, wandb_init_settings

__all__ = ["LIGHTNING_WANDB", "WandbLogger", "use_step_logger"]

#: the class paths a recipe names Lightning's W&B logger by
LIGHTNING_WANDB = ("lightning.pytorch.loggers.WandbLogger", "pytorch_lightning.loggers.WandbLogger")


class WandbLogger(LightningWandbLogger):
    """``lightning.pytorch.loggers.WandbLogger`` that logs every row at ``step=`` the global step (a call
    without a step joins the row of the last one)."""

    _last_step: int | None = None

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if wandb_init_settings(self).get("sync_tensorboard"):
            return super().log_metrics(metrics, step)
        step = self._last_step if step is None else int(step)
        if step is None:
            return super().log_metrics(metrics, step)
        self._last_step = step
        prefix = logger_prefix(self)
        if prefix:
            metrics = {f"{prefix}{self.LOGGER_JOIN_CHAR}{k}": v for k, v in metrics.items()}
        self.experiment.log(dict(metrics, **{"trainer/global_step": step}), step=step)


def use_step_logger(spec: Any) -> None:
    """Point a parsed ``trainer.logger`` entry (a namespace or dict with ``class_path``) that names Lightning's
    W&B logger at ``WandbLogger`` (same arguments)."""
    getter = spec.get if isinstance(spec, dict) else lambda key: getattr(spec, key, None)
    if getter("class_path") in LIGHTNING_WANDB:
        if isinstance(spec, dict):
            spec["class_path"] = f"{__name__}.WandbLogger"
        else:
            spec.class_path = f"{__name__}.WandbLogger"
