"""``unisent fit``, ``validate``, ``test`` and ``predict``: Lightning's CLI over ``UnisentModule`` and
[`UnisentDataModule`][unisent.data.UnisentDataModule], apart from ``unisent.cli`` so that the other commands do not
import Lightning."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from ..resume import Interrupt
from ..trainer import UnisentTrainer
from .function_commands import did_you_mean
from .resume_discovery import (
    SPECIAL_CKPT_PATHS,
    continue_last_run,
    name_the_other_checkpoints,
    refuse_finished_run,
    run_folder_without_logger,
    separate_from_training_run,
)

__all__ = [
    "QUIET_WARNINGS",
    "RESUME_EVERY_N_STEPS",
    "TRAINER_DEFAULTS",
    "FitInterrupted",
    "UnisentCLI",
    "UnisentSaveConfig",
    "interrupt_of",
    "quiet",
    "run_dir_of",
]

TRAINER_DEFAULTS = {
    "max_epochs": 1,
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 10,
    "logger": {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": "runs", "name": "unisent"},
    },
}


#: ``checkpoint.every_n_train_steps``: resume points (``last.ckpt``) every N optimiser steps
RESUME_EVERY_N_STEPS = 500


class UnisentSaveConfig(SaveConfigCallback):
    """Also logs the whole config and the model's ``run_config()`` to every logger as hyperparameters
    (Lightning's ``save_hyperparameters`` leave out the objectives and the optimiser)."""

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


def _log_wandb_rows_by_step(config: Any) -> None:
    """Lightning's W&B logger becomes ``unisent.loggers.WandbLogger`` (rows at the global step: a resumed
    run's steps continue the W&B run's)."""
    from ..loggers import use_step_logger

    logger = config.get("trainer.logger")
    for spec in logger if isinstance(logger, list) else [logger]:
        if spec not in (None, True, False):
            use_step_logger(spec)


def _import_recipe_pooler(config: Any) -> None:
    """Import a pooler the recipe names by class path, as jsonargparse does its other class paths (a recipe
    is code; names read from a model's files never come here: ``unisent.io.registry``)."""
    from ..encoders.poolers import POOLERS, Pooler
    from ..io import import_object
    from ..io.registry import subclasses

    try:
        name = config.get("model.encoder.pooler")
    except (AttributeError, KeyError, TypeError):
        return
    if isinstance(name, str) and "." in name and name not in POOLERS and name not in subclasses(Pooler):
        import_object(name, "pooler")


class UnisentCLI(LightningCLI):
    """LightningCLI with a ``checkpoint:`` section (``UnisentCheckpoint``: ``best.ckpt``
    by ``val/score``; ``last.ckpt`` every ``checkpoint.every_n_train_steps`` steps and after each validation).
    ``fit --ckpt_path last`` continues the logger's newest run, else starts from scratch."""

    def __init__(self, *args: Any, trainer_class: Any = UnisentTrainer, verbose: bool = False, **kwargs: Any) -> None:
        # UnisentTrainer adds precision: auto; verbose is set before Lightning's __init__, which parses and runs
        self.verbose = verbose
        super().__init__(*args, trainer_class=trainer_class, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        from ..resume import UnisentCheckpoint

        parser.add_lightning_class_args(UnisentCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/score",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best",
                "checkpoint.save_last": True,
                "checkpoint.save_top_k": 1,
                "checkpoint.every_n_train_steps": RESUME_EVERY_N_STEPS,
            }
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        _import_recipe_pooler(config)
        self.run_folder = run_folder_without_logger(config) if self.subcommand == "fit" else None
        _log_wandb_rows_by_step(config)
        if self.subcommand == "fit":
            if config.get("ckpt_path") == "last":
                continue_last_run(config)  # (refuses a finished run itself, before touching it)
            else:
                refuse_finished_run(config, config.get("ckpt_path"))
        elif self.subcommand in ("validate", "test", "predict"):
            separate_from_training_run(config, self.subcommand)

    def parse_arguments(self, parser, args) -> None:
        """Lightning's parsing, without its warning when ``sys.argv`` holds words too (``unisent ablate``); a
        mistyped key gets a suggestion (``did_you_mean``)."""
        from jsonargparse import ArgumentError, Namespace

        try:
            if isinstance(args, (dict, Namespace)):
                self.config = parser.parse_object(args)
            else:
                self.config = parser.parse_args(args)
        except ArgumentError as err:
            better = did_you_mean(str(err), parser)
            if better is None:
                raise
            raise ArgumentError(None, better) from err

    def _parse_ckpt_path(self) -> None:
        """Check a ``--ckpt_path`` file, not Lightning's step, which merges its ``hyper_parameters`` into the
        config: a received checkpoint would choose the code that runs (docs/security.md)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if isinstance(ckpt_path, (str, Path)) and str(ckpt_path) not in SPECIAL_CKPT_PATHS:
            from ..checkpoint_record import check_unisent_checkpoint

            name_the_other_checkpoints(Path(ckpt_path))
            check_unisent_checkpoint(ckpt_path)  # also a file of another program: one line, not a KeyError

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's run; an empty run directory is removed on failure; Ctrl-C/SIGTERM: ``FitInterrupted``."""
        from ..strategies import join_elastic_group

        try:
            join_elastic_group(self.trainer.strategy)  # torchrun's restarts (see there)
            super()._run_subcommand(subcommand)
        except BaseException as err:
            _remove_empty_run_dirs(self.trainer)
            if isinstance(err, KeyboardInterrupt) or (
                isinstance(err, SystemExit) and getattr(self.trainer, "interrupted", False)
            ):
                # Lightning turns Ctrl-C into sys.exit(1) after its shutdown
                raise FitInterrupted(interrupt_of(self.trainer), run_dir_of(self.trainer)) from err
            raise

    def instantiate_trainer(self, **kwargs: Any):
        """Lightning's Trainer, plus an ``EvaluationCallback`` when
        ``model.evaluation`` names tasks, checked first (``unisent.evaluation.name_checks``)."""
        from lightning.pytorch.callbacks import ModelCheckpoint

        from ..evaluation.callback import add_evaluation_callback
        from ..evaluation.name_checks import check_evaluation_names

        if getattr(self.model, "evaluation", None) is not None:  # after the plugins, before the Trainer
            names = [o.name for o in getattr(self.model, "objectives", ())]
            check_evaluation_names(self.model.evaluation, names, self.subcommand)
        extra_callbacks = [self._get(self.config_init, c) for c in self._parser(self.subcommand).callback_keys]
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        if getattr(self, "run_folder", None) is not None:  # trainer.logger: false (the saved config keeps its own)
            trainer_config["default_root_dir"] = str(self.run_folder)
        if trainer_config.get("enable_checkpointing") is False:
            # Lightning refuses a checkpoint callback with enable_checkpointing=False
            extra_callbacks = [c for c in extra_callbacks if not isinstance(c, ModelCheckpoint)]
            if self.subcommand == "fit":
                import sys

                from lightning.fabric.utilities.rank_zero import rank_zero_only

                if getattr(rank_zero_only, "rank", 0) == 0:
                    print(
                        "unisent: trainer.enable_checkpointing is false: this run writes no checkpoints (no "
                        "best.ckpt, no last.ckpt), so it cannot be resumed with --ckpt_path last or exported "
                        "from a checkpoint; the trained encoder is still saved to <run>/encoder",
                        file=sys.stderr,
                    )
        if self.subcommand == "fit" and not trainer_config.get("fast_dev_run"):
            from ..run_progress import StoppingReport

            extra_callbacks.append(StoppingReport())  # which limit will end the run, and which one did
        trainer = self._instantiate_trainer(trainer_config, extra_callbacks)
        add_evaluation_callback(trainer, self.model)
        if not self.verbose:
            _without_version_number(trainer)
        _epoch_without_limit(trainer)
        return trainer


class FitInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a Lightning command: what it left and its run directory (or ``None``)."""

    def __init__(self, interrupt: Interrupt, run_dir: Path | None = None) -> None:
        super().__init__(interrupt.signal or "SIGINT")
        self.interrupt = interrupt
        self.run_dir = run_dir


def interrupt_of(trainer: Any) -> Interrupt:
    """The checkpoint callback's record of the signal, with the checkpoint that continues the run and the
    run's version when that checkpoint is the run's own."""
    from dataclasses import replace

    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from ..resume import UnisentCheckpoint
    from ..run_progress import last_checkpoint

    records = [c.interrupt for c in getattr(trainer, "callbacks", ()) if isinstance(c, UnisentCheckpoint)]
    record = next((r for r in records if r is not None), Interrupt())
    dirpath = getattr(getattr(trainer, "checkpoint_callback", None), "dirpath", None)
    if not record.checkpoint and dirpath and Path(dirpath).is_dir():
        found = last_checkpoint(dirpath)
        record = replace(record, checkpoint=str(found) if found else None)
    for logger in getattr(trainer, "loggers", ()):
        if isinstance(logger, (CSVLogger, TensorBoardLogger)) and record.checkpoint:
            run = Path(logger.log_dir)
            if Path(record.checkpoint).parent.parent == run:  # the run's own checkpoints/: pin its version
                record = replace(record, version=run.name)
            break
    return record


def run_dir_of(trainer: Any) -> Path | None:
    """The run directory of ``trainer``'s first logger (``None``: no logger, or one that cannot say)."""
    try:
        log_dir = trainer.loggers[0].log_dir if trainer is not None and trainer.loggers else None
    except Exception:  # a logger that cannot say (W&B before its run started)
        return None
    return Path(log_dir) if log_dir else None


#: files a run directory holds before anything is trained or logged
_CONFIG_FILES = {"config.yaml", "hparams.yaml"}


def _remove_empty_run_dirs(trainer: Any) -> None:
    """Remove each logger's run directory that holds only config files: failed attempts leave no empty runs."""
    import shutil

    from lightning.fabric.utilities.rank_zero import rank_zero_only

    if trainer is None or getattr(rank_zero_only, "rank", 0) != 0:
        return
    for logger in getattr(trainer, "loggers", ()):
        try:
            log_dir = logger.log_dir
        except Exception:  # a logger that cannot say (W&B before its run started)
            continue
        run = Path(log_dir) if log_dir else None
        if run is None or not run.is_dir():
            continue
        files = [f for f in run.rglob("*") if f.is_file()]
        if all(f.name in _CONFIG_FILES and f.parent == run for f in files):
            shutil.rmtree(run, ignore_errors=True)
            for parent in (run.parent, run.parent.parent):  # <save_dir>/<name>, then <save_dir>, when left empty
                try:
                    parent.rmdir()
                except OSError:  # not empty (other runs), or not ours to remove
                    break


#: warnings a quiet run leaves out, each a known, harmless case
QUIET_WARNINGS = (
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning on torch's _pytree (a DeprecationWarning)
    r"`ModelCheckpoint\(monitor='val/score'\)` could not find the monitored key",  # max_steps before a validation
    r"Checkpoint directory .* exists and is not empty",
    r"The dirpath has changed from",  # `unisent test` of a run's checkpoint: its logs go beside the run
)


@contextlib.contextmanager
def quiet():
    """Without Lightning's notices, transformers' bars and ``QUIET_WARNINGS`` while a Lightning command
    runs; the settings are restored afterwards (the command may run inside another program)."""
    import logging
    import warnings

    from transformers.utils import logging as hf_logging

    names = ("lightning.pytorch", "lightning.fabric", "lightning")
    levels = {name: logging.getLogger(name).level for name in names}
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():
        for message in QUIET_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        for name in names:
            logging.getLogger(name).setLevel(logging.WARNING)
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()


def _without_version_number(trainer: Any) -> None:
    """The progress bar without Lightning's ``v_num`` (the run's directory says which run it is)."""
    bar = getattr(trainer, "progress_bar_callback", None)
    if bar is None:
        return
    metrics = bar.get_metrics
    bar.get_metrics = lambda *args, **kwargs: {k: v for k, v in metrics(*args, **kwargs).items() if k != "v_num"}


def _epoch_without_limit(trainer: Any) -> None:
    """Rich's bar reads ``Epoch 0/-2`` when ``max_epochs`` is -1: ``Epoch 0/N`` only for a real limit."""
    from lightning.pytorch.callbacks import RichProgressBar

    bar = getattr(trainer, "progress_bar_callback", None)
    if not isinstance(bar, RichProgressBar):
        return

    def describe(current_epoch: int) -> str:
        limit = trainer.max_epochs
        text = f"Epoch {current_epoch}" + (f"/{limit - 1}" if limit is not None and limit > 0 else "")
        return f"{text:{len(bar.validation_description)}}"  # padded as Lightning does, against flicker

    bar._get_train_description = describe
