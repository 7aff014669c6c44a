"""The metric file of a sweep trial: ``unisent sweep --local`` adds ``MetricFile`` to each trial's
``unisent fit``, the path in ``METRIC_FILE_ENV``. After each validation the file is replaced by::

    {"metrics": {"val/score": 71.3, ...},                      # the last value of each metric
     "history": [{"step": 10, "val/score": 69.0, ...}, ...]}  # one entry per validation

Another sweep command writes the file itself (``{"metrics": {...}}`` is enough); a file without the
sweep's metric is a failed trial."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from .io import atomic_write

__all__ = ["METRIC_FILE_ENV", "MetricFile", "read_metric"]

#: environment variable with the path of a trial's metric file
METRIC_FILE_ENV = "UNISENT_SWEEP_METRIC_FILE"


def _number(value: Any) -> float | None:
    """A finite float from a Python number or a one-element tensor, else ``None``."""
    if hasattr(value, "numel"):
        if value.numel() != 1:
            return None
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class MetricFile(Callback):
    """Writes ``trainer.callback_metrics`` to ``path`` (default: ``UNISENT_SWEEP_METRIC_FILE``; neither:
    nothing) after every validation, on rank zero. ``validate_at_end``: at ``max_steps`` mid-epoch, stop
    through ``trainer.should_stop`` so that Lightning validates first and a short trial has its metric."""

    def __init__(self, path: str | None = None, validate_at_end: bool = True) -> None:
        self.path = path or os.environ.get(METRIC_FILE_ENV) or None
        self.validate_at_end = validate_at_end
        self.history: list[dict[str, float | None]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.validate_at_end and 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not self.path:
            return
        metrics = {name: _number(value) for name, value in trainer.callback_metrics.items()}
        self.history.append({"step": trainer.global_step, **metrics})
        with atomic_write(self.path) as f:
            json.dump({"metrics": metrics, "history": self.history}, f, indent=1)


def read_metric(path: str | os.PathLike, name: str, goal: str = "maximize") -> tuple[float | None, float | None]:
    """``(last, best)`` of metric ``name`` in a metric file (``best``: the max or min by ``goal`` over
    its history); ``(None, None)`` when the file or the metric is missing or not a finite number."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        last = _number(data["metrics"].get(name))
        values = [v for row in data.get("history") or [] if (v := _number(row.get(name))) is not None]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, None
    return last, None if last is None else (max if goal == "maximize" else min)(values or [last])
