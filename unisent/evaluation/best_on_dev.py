"""Early stopping per objective: ``BestOnDev`` reads each objective's held-out panel column during a run
(docs/training.md, "Early stopping per objective"). In the evaluation layer, beside ``EvaluationCallback``,
because it scores the model in training with the panel."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch

from ..io import closest_hint, unknown_objectives

if TYPE_CHECKING:
    from ..lightning_module import UnisentModule
    from ..objectives import Objective

__all__ = ["BestOnDev"]


class BestOnDev(L.Callback):
    """Each objective keeps its own parameters from the reading where its held-out column was best, and stops
    after ``patience`` readings without a gain: early stopping per objective, one rule for every objective that
    has a column of its own.

    From the step the encoder starts learning (after ``model.train.heads.only_steps``/``only_ratio``; or
    ``start_step``), every ``every_n_steps`` steps and at the last step, each objective's column is read on the model
    being trained ([`evaluate_panel`][unisent.evaluation.evaluate_panel], at the panel's token limit; the random state
    is left as it was). The objective's own parameters (``objective.state_dict()``: a head, its own layers, projections)
    at its best reading are kept. ``patience`` readings without a gain above ``min_delta`` stop the objective: it weighs
    0 from then on (``UnisentModule.stop_objective``: no loss, no gradient, so its parameters rest) and its best
    parameters are put back. At the last step every objective still learning gets its best parameters back too, before
    the last checkpoint and the saved encoder. The encoder itself is shared and is not rolled back.

    Readings are logged as ``dev/<objective>/<column>`` (NaN between readings) and written to
    ``<log dir>/best_on_dev.json``, each with its step: the optimiser steps taken when it was read.
    Columns that need a checkpoint (the entity columns) cannot be read during a run. Usage:
    docs/training.md, "Early stopping per objective"; in a recipe, ``trainer.callbacks`` with class_path
    ``unisent.evaluation.BestOnDev``.

    Args:
        columns: ``{objective name: panel column}``, e.g. ``{gausscse: sick-direction-hyp-not-shorter-train}``.
        every_n_steps: optimiser steps between two readings.
        patience: readings without a gain that stop the objective; ``None``: never stopped, only its best kept.
        start_step: the first reading's step; ``None``: the step the encoder starts learning.
        data_dir: the evaluation data root (as ``unisent evaluate --data-dir``).
        min_delta: a gain is a reading above the best by more than this.
    """

    def __init__(
        self,
        columns: dict[str, str],
        every_n_steps: int = 8,
        patience: int | None = None,
        start_step: int | None = None,
        data_dir: str | None = None,
        min_delta: float = 0.0,
    ) -> None:
        from .panel import PANEL_COLUMNS

        if not columns:
            raise ValueError("BestOnDev needs columns: {objective name: panel column}")
        for name, column in columns.items():
            if column not in PANEL_COLUMNS:
                raise ValueError(
                    f"BestOnDev.columns.{name}: {column!r} is not a panel column{closest_hint(column, PANEL_COLUMNS)}"
                )
            if column.startswith("entity-"):
                raise ValueError(
                    f"BestOnDev.columns.{name}: {column!r} reads a checkpoint, not the model being trained"
                )
        if every_n_steps < 1 or (patience is not None and patience < 1) or (start_step is not None and start_step < 0):
            raise ValueError(
                f"BestOnDev needs every_n_steps >= 1, patience >= 1 or None and start_step >= 0 or None, got "
                f"{every_n_steps}, {patience}, {start_step}"
            )
        self.columns = dict(columns)
        self.every_n_steps, self.patience, self.start_step = every_n_steps, patience, start_step
        self.data_dir, self.min_delta = data_dir, min_delta
        self.best: dict[str, dict[str, float]] = {}  # name -> {"score", "step"}
        self.snapshots: dict[str, dict[str, torch.Tensor]] = {}
        self.stale: dict[str, int] = {}
        self.stopped: dict[str, int] = {}
        self.readings: list[dict[str, Any]] = []
        self._last_step = -1

    def setup(self, trainer, pl_module, stage: str) -> None:
        names = [o.name for o in getattr(pl_module, "objectives", ())]
        unknown = [n for n in self.columns if n not in names]
        if unknown:
            raise ValueError(unknown_objectives("BestOnDev.columns", unknown, names))

    def on_train_start(self, trainer, pl_module) -> None:
        for name, step in self.stopped.items():  # resumed: the stops of the run so far hold again
            cast("UnisentModule", pl_module).stop_objective(name, step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return  # (gradient accumulation: one reading per optimiser step)
        self._last_step = step
        start = self.start_step if self.start_step is not None else cast("UnisentModule", pl_module).encoder_start_step
        last = step >= trainer.estimated_stepping_batches
        if not last and (step < start or (step - start) % self.every_n_steps != 0):
            for name, column in self.columns.items():  # or Lightning repeats the last reading at every step
                pl_module.log(f"dev/{name}/{column}", float("nan"), on_step=True, batch_size=1)
            return
        objectives = {o.name: o for o in cast("Iterable[Objective]", pl_module.objectives)}
        for name, column in self.columns.items():
            if name in self.stopped:
                pl_module.log(f"dev/{name}/{column}", float("nan"), on_step=True, batch_size=1)
                continue
            score = self._read(pl_module, column)
            self.readings.append({"step": step, "objective": name, "column": column, "score": score})
            pl_module.log(f"dev/{name}/{column}", score, on_step=True, batch_size=1)
            best = self.best.get(name)
            if best is None or score > best["score"] + self.min_delta:
                self.best[name] = {"score": score, "step": step}
                self.snapshots[name] = {k: v.detach().clone() for k, v in objectives[name].state_dict().items()}
                self.stale[name] = 0
            else:
                self.stale[name] = self.stale.get(name, 0) + 1
            if self.patience is not None and self.stale[name] >= self.patience:
                self.stopped[name] = step
                cast("UnisentModule", pl_module).stop_objective(name, step)
                self._restore(objectives[name], f"stopped at step {step}")
        if last:
            for name in self.columns:
                if name not in self.stopped:
                    self._restore(objectives[name], "at the last step")

    def _read(self, pl_module, column: str) -> float:
        from .panel import evaluate_panel

        model = pl_module.inference_model()
        data_dir = self.data_dir or pl_module.evaluation.data_dir
        config = model.config
        length = config.max_length
        try:
            with torch.random.fork_rng(devices=[]):
                result = evaluate_panel(model, [column], data_dir)[column]
        finally:
            config.max_length = length  # the panel's limit for the reading, the training limit after it
        if result["score"] is None:
            raise ValueError(f"BestOnDev: column {column!r} scores nothing on this model: {result.get('reason')}")
        return float(result["score"])

    def _restore(self, objective, when: str) -> None:
        best = self.best[objective.name]
        objective.load_state_dict(self.snapshots[objective.name])
        print(
            f"unisent: BestOnDev: {objective.name} {when}; its parameters are those of step {best['step']} "
            f"({self.columns[objective.name]} {best['score']:.2f})",
            file=sys.stderr,
        )

    def on_train_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero or not trainer.log_dir:
            return
        record = {"columns": self.columns, "best": self.best, "stopped": self.stopped, "readings": self.readings}
        path = Path(trainer.log_dir) / "best_on_dev.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    _STATE = ("best", "snapshots", "stale", "stopped", "readings", "_last_step")

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._STATE}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for key in self._STATE:  # only its own keys: a checkpoint is data and names no other attribute
            if key in state_dict:
                setattr(self, key, state_dict[key])
