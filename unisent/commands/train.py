"""``unisent fit``, ``validate``, ``test`` and ``predict``: Lightning's CLI over :class:`UnisentModule` and
:class:`UnisentDataModule` (jsonargparse, as every other unisent command).

Kept apart from :mod:`unisent.cli` so that ``unisent --help`` and the other commands do not import
Lightning; ``unisent.cli`` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from ..data import UnisentDataModule
from ..module import UnisentModule

__all__ = ["RESUME_EVERY_N_STEPS", "TRAINER_DEFAULTS", "UnisentCLI", "UnisentSaveConfig", "main"]

TRAINER_DEFAULTS = {
    "max_epochs": 1,
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 10,
    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "runs", "name": "unisent"}},
}


#: ``checkpoint.every_n_train_steps``: resume points (``last.ckpt``) every N optimiser steps
RESUME_EVERY_N_STEPS = 500


class UnisentSaveConfig(SaveConfigCallback):
    """Writes ``config.yaml`` to the run directory (Lightning's behaviour) and also logs the whole
    parsed config (every objective with its settings, optimiser, data, trainer, checkpointing) and
    the model's :meth:`~unisent.module.UnisentModule.run_config` (objectives with their defaults
    filled in) to every logger as hyperparameters, e.g. a W&B run's config. Lightning alone logs
    only the module's ``save_hyperparameters``, which leave out the objectives and the optimiser."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        import yaml

        if not trainer.loggers:
            return
        params: dict[str, Any] = {"config": yaml.safe_load(self.parser.dump(self.config, skip_none=False))}
        run_config = getattr(pl_module, "run_config", None)
        if callable(run_config):
            params["unisent"] = run_config()
        for logger in trainer.loggers:
            logger.log_hyperparams(params)


class UnisentCLI(LightningCLI):
    """LightningCLI over :class:`UnisentModule` and :class:`UnisentDataModule`.

    Adds a ``checkpoint:`` section (:class:`~unisent.resume.UnisentCheckpoint`, Lightning's
    ModelCheckpoint plus resume points, atomic writes and random states) that by default keeps the
    best checkpoint by ``val/score`` (the mean main score of ``model.evaluation.val_tasks``) as
    ``checkpoints/best.ckpt`` and writes ``checkpoints/last.ckpt`` every
    ``checkpoint.every_n_train_steps`` optimiser steps and after each validation.

    ``fit --ckpt_path last`` continues the newest run of the configured logger directory (the
    newest ``<save_dir>/<name>/<version>/checkpoints/last.ckpt``): the logger is pointed at that run
    so that logs and checkpoints go on where they stopped; with no such run, training starts from
    scratch (so a job script can always pass it).
    """

    def add_arguments_to_parser(self, parser) -> None:
        from ..resume import UnisentCheckpoint

        parser.add_lightning_class_args(UnisentCheckpoint, "checkpoint")
        parser.set_defaults(
            {"checkpoint.monitor": "val/score", "checkpoint.mode": "max", "checkpoint.filename": "best",
             "checkpoint.save_last": True, "checkpoint.save_top_k": 1,
             "checkpoint.every_n_train_steps": RESUME_EVERY_N_STEPS}
        )

    def before_instantiate_classes(self) -> None:
        if self.subcommand == "fit":
            _continue_last_run(self.config["fit"])

    def instantiate_trainer(self, **kwargs: Any):
        """Lightning's Trainer, plus an :class:`~unisent.evaluation.callback.EvaluationCallback` when
        ``model.evaluation`` names tasks and ``trainer.callbacks`` has none (the callback runs them in
        the validation and test loops and logs ``val/score``)."""
        from ..evaluation.callback import add_evaluation_callback

        trainer = super().instantiate_trainer(**kwargs)
        add_evaluation_callback(trainer, self.model)
        return trainer


def _logger_class(spec: Any):
    import importlib

    class_path = getattr(spec, "class_path", None) if not isinstance(spec, dict) else spec.get("class_path")
    if not class_path:
        return None
    module_name, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None


def _continue_last_run(config) -> None:
    """For ``fit --ckpt_path last``: point the logger at the run that holds the newest last.ckpt."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    from ..resume import latest_run

    if config.get("ckpt_path") != "last" or config.get("checkpoint.dirpath"):
        return  # an explicit checkpoint directory: Lightning finds last.ckpt there itself
    logger = config.get("trainer.logger")
    if isinstance(logger, list):
        logger = logger[0] if logger else None
    cls = _logger_class(logger) if logger not in (None, True, False) else None
    if cls is None:
        return
    args = logger.init_args
    if issubclass(cls, (CSVLogger, TensorBoardLogger)):
        if args.get("version") is not None:
            return
        save_dir = args.get("save_dir") or config.get("trainer.default_root_dir") or "."
        name = args.get("name", "lightning_logs")
        run = latest_run(Path(save_dir) / (name or ""))
        if run is not None:
            version = run.name
            args["version"] = int(version[len("version_"):]) if version.startswith("version_") and version[8:].isdigit() else version
            if issubclass(cls, CSVLogger):
                _keep_metrics(run)
    elif issubclass(cls, WandbLogger):
        if args.get("id") or args.get("version"):
            return
        import os

        project = args.get("project") or os.environ.get("WANDB_PROJECT", "lightning_logs")
        run = latest_run(Path(args.get("save_dir") or ".") / project)
        if run is not None:
            args["id"] = run.name  # WandbLogger resumes a run id with resume="allow"


def _keep_metrics(run: Path) -> None:
    """CSVLogger deletes the metrics.csv of a directory it starts in: keep the interrupted attempt's
    as metrics-<k>.csv (it may hold steps after the checkpoint, which the resumed run repeats)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    metrics = run / "metrics.csv"
    if getattr(rank_zero_only, "rank", 0) != 0 or not metrics.is_file():
        return
    k = 0
    while (run / f"metrics-{k}.csv").exists():
        k += 1
    metrics.rename(run / f"metrics-{k}.csv")


def main(argv: Sequence[str] | None = None) -> None:
    """``unisent fit|validate|test|predict ...`` (``argv`` includes the command word)."""
    UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        save_config_callback=UnisentSaveConfig,
        trainer_defaults=TRAINER_DEFAULTS,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=None if argv is None else list(argv),
    )
