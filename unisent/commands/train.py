"""``unisent fit``, ``validate``, ``test`` and ``predict``: Lightning's CLI over :class:`UnisentModule` and
:class:`UnisentDataModule` (jsonargparse, as every other unisent command).

Kept apart from :mod:`unisent.cli` so that ``unisent --help`` and the other commands do not import
Lightning; ``unisent.cli`` re-exports these names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from ..data import UnisentDataModule
from ..module import UnisentModule
from ..trainer import UnisentTrainer

__all__ = ["RESUME_EVERY_N_STEPS", "TRAINER_DEFAULTS", "UnisentCLI", "UnisentSaveConfig", "main"]

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

    def __init__(self, *args: Any, trainer_class: Any = UnisentTrainer, **kwargs: Any) -> None:
        # UnisentTrainer: Lightning's Trainer, plus precision: auto (unisent.hardware); keyword-only here, as
        # LightningCLI's own arguments after the two classes are given by keyword
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
        if self.subcommand == "fit":
            if config.get("ckpt_path") == "last":
                _continue_last_run(config)  # (refuses a finished run itself, before touching it)
            else:
                _refuse_finished_run(config, config.get("ckpt_path"))
        elif self.subcommand in ("validate", "test", "predict"):
            _separate_from_training_run(config, self.subcommand)

    def parse_arguments(self, parser, args) -> None:
        """Lightning's parsing; a mistyped key gets a suggestion (:func:`did_you_mean`)."""
        from jsonargparse import ArgumentError

        try:
            super().parse_arguments(parser, args)
        except ArgumentError as err:
            better = did_you_mean(str(err), parser)
            if better is None:
                raise
            raise ArgumentError(None, better) from err

    def _parse_ckpt_path(self) -> None:
        """A ``--ckpt_path`` file is checked before Lightning loads it (for its hyperparameters, then to
        resume): a missing or truncated file is one line (FileNotFoundError / CheckpointError)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if isinstance(ckpt_path, (str, Path)) and str(ckpt_path) not in ("last", "best", "hpc", "registry"):
            from ..module import check_unisent_checkpoint

            _name_the_other_checkpoints(Path(ckpt_path))
            check_unisent_checkpoint(ckpt_path)  # also a file of another program: one line, not a KeyError
        super()._parse_ckpt_path()

    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's run, plus: on any failure or Ctrl-C, the run directory that this attempt created
        is removed when it holds nothing but config files; Ctrl-C comes out as ``KeyboardInterrupt``
        (``unisent fit`` then prints how to resume)."""
        try:
            super()._run_subcommand(subcommand)
        except BaseException as err:
            _remove_empty_run_dirs(self.trainer)
            if isinstance(err, KeyboardInterrupt) or (
                isinstance(err, SystemExit) and getattr(self.trainer, "interrupted", False)
            ):
                _record_interrupt(self.trainer)
                raise KeyboardInterrupt from err  # Lightning turns Ctrl-C into sys.exit(1) after its shutdown
            raise

    def instantiate_trainer(self, **kwargs: Any):
        """Lightning's Trainer, plus an :class:`~unisent.evaluation.callback.EvaluationCallback` when
        ``model.evaluation`` names tasks and ``trainer.callbacks`` has none (the callback runs them in
        the validation and test loops and logs ``val/score``)."""
        from lightning.pytorch.callbacks import ModelCheckpoint

        from ..evaluation.callback import add_evaluation_callback

        extra_callbacks = [self._get(self.config_init, c) for c in self._parser(self.subcommand).callback_keys]
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        if trainer_config.get("enable_checkpointing") is False:
            # the recipe turned checkpointing off: leave out the `checkpoint:` callback (Lightning refuses
            # a checkpoint callback with enable_checkpointing=False)
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
        trainer = self._instantiate_trainer(trainer_config, extra_callbacks)
        add_evaluation_callback(trainer, self.model)
        if not _VERBOSE:
            _without_version_number(trainer)
        return trainer


def _name_the_other_checkpoints(path: Path) -> None:
    """A ``--ckpt_path`` that does not exist in a folder that holds other checkpoints: name them (a run
    stopped before its first validation has ``last.ckpt`` but no ``best.ckpt``)."""
    if path.exists() or not path.parent.is_dir():
        return
    others = sorted(p.name for p in path.parent.glob("*.ckpt"))
    if not others:
        return
    why = (
        " (best.ckpt is written when a validation ranks the run: a run stopped before its first validation "
        "has only last.ckpt)"
        if path.name.startswith("best")
        else ""
    )
    raise FileNotFoundError(f"checkpoint {path} does not exist; {path.parent} holds {', '.join(others)}{why}")


def _option_names(parser) -> set[str]:
    """Every ``--option`` of ``parser`` and of its subcommands' parsers."""
    import argparse

    names: set[str] = set()
    for action in parser._actions:
        names.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= _option_names(sub)
    return names


def _close(word: str, candidates: Sequence[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.7)


def did_you_mean(message: str, parser) -> str | None:
    """jsonargparse's message for an unknown key, rewritten to name the key and the closest valid ones:

    * ``unrecognized arguments: --trainer.max_step=2`` (abbreviations are off: a prefix is not a key)
      -> ``... (did you mean --trainer.max_steps?)``;
    * a key a recipe gives that the command does not accept -> the same, from the parser's keys;
    * an argument of a class given by ``class_path`` (``--model.objectives.0.init_args.temprature``; the
      union error of ~450 characters) -> ``model.objectives.0.init_args.temprature: unisent.objectives.SimCSE
      has no argument 'temprature' (did you mean 'temperature'?); its arguments: ...``;
    * a value outside a choice of literals (``--trainer.precision=atuo``, the union error) -> ``trainer.precision:
      'atuo' is not one of 64, 32, 16, ..., auto (did you mean 'auto'?)``;
    * a class that its module does not have (``--model.balancer=unisent.balancers.PCgrad``) -> ``model.balancer:
      unisent.balancers has no class 'PCgrad' (did you mean unisent.balancers.PCGrad?)``.

    ``None`` when the message is about something else or nothing is close."""
    import inspect
    import re

    nested = re.search(
        r'Parser key "([\w.]+)".*?Problem with given class_path \'([\w.]+)\':\s*unrecognized arguments:\s*'
        r"--([\w.\-]+)",
        message,
        re.S,
    )
    if nested:
        key, class_path, rest = nested.groups()
        from ..io import import_object

        try:
            params = [
                p
                for p in inspect.signature(import_object(class_path).__init__).parameters
                if p not in ("self", "args", "kwargs")
            ]
        except (ImportError, AttributeError, TypeError, ValueError):
            return None
        name = rest.rsplit(".", 1)[-1]
        close = _close(name, params)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else "no argument is close"
        return f"{key}.{rest}: {class_path} has no argument {name!r} ({hint}); its arguments: {', '.join(params)}"
    missing = re.search(
        r'Parser key "([\w.]+)".*?class_path \'[\w.]+\':\s*module \'([\w.]+)\' has no attribute \'(\w+)\'',
        message,
        re.S,
    )
    if missing:  # a mistyped class (--model.balancer=unisent.balancers.PCgrad): the module's classes
        import importlib

        key, module_name, name = missing.groups()
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
        public = getattr(module, "__all__", None) or dir(module)
        names = sorted(n for n in public if isinstance(getattr(module, n, None), type) and n[:1] != "_")
        close = _close(name, names) or [n for n in names if n.lower() == name.lower()]
        hint = f" (did you mean {module_name}.{close[0]}?)" if close else f"; its classes: {', '.join(names)}"
        return f"{key}: {module_name} has no class {name!r}{hint}"
    value = re.search(r'Parser key "([\w.]+)":.*?Given value: ([^\s(]+)', message, re.S)
    literals = re.findall(r"Literal\[([^\]]*)\]", message)
    if value and literals:  # a value outside the choices (--trainer.precision=atuo): name them, not the union
        key, given = value.groups()
        choices = list(dict.fromkeys(c.strip().strip("'\"") for group in literals for c in group.split(",")))
        close = _close(given, choices)
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        return f"{key}: {given!r} is not one of {', '.join(choices)}{hint}"
    unknown = re.findall(r"unrecognized arguments: ((?:--[\w.\-]+(?:=\S*)?\s*)+)", message)
    unknown = [w.split("=", 1)[0] for group in unknown for w in group.split() if w.startswith("--")]
    for group, key in re.findall(r"(?:Group '([\w.]+)' )?does not accept (?:option|key) '([\w.\-]+)'", message):
        unknown.append(f"--{group}.{key}" if group else f"--{key}")
    if not unknown:
        return None
    options = sorted(_option_names(parser))
    hints = []
    for word in unknown:
        prefix = word.rsplit(".", 1)[0] + "." if "." in word else "--"
        close = _close(word, [o for o in options if o.startswith(prefix)] or options)
        if close:
            hints.append(f"{word}: did you mean {' or '.join(close)}?")
    return f"{message.rstrip('.')} ({'; '.join(hints)})" if hints else None


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
    """For ``fit --ckpt_path last``: point the logger at the run that holds the newest last.ckpt and
    resume from that file; refuse (one line, status 1) when that run already reached this config's
    stopping point."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    from ..resume import last_checkpoint, latest_run

    if config.get("ckpt_path") != "last":
        return
    dirpath = config.get("checkpoint.dirpath")
    if dirpath:  # an explicit checkpoint directory: Lightning finds last.ckpt there itself
        if "://" not in str(dirpath):
            _refuse_finished_run(config, last_checkpoint(dirpath))
        return
    logger = config.get("trainer.logger")
    if isinstance(logger, list):
        logger = logger[0] if logger else None
    cls = _logger_class(logger) if logger not in (None, True, False) else None
    if cls is None:
        return
    args = logger.init_args
    run = None
    if issubclass(cls, (CSVLogger, TensorBoardLogger)):
        save_dir = args.get("save_dir") or config.get("trainer.default_root_dir") or "."
        name = args.get("name", "lightning_logs")
        version = args.get("version")
        root = Path(save_dir) / (name or "")
        if version is not None:  # a pinned run: resume that one, never another
            run = root / (version if isinstance(version, str) else f"version_{version}")
            if last_checkpoint(run / "checkpoints") is None:
                _say(f"--ckpt_path last: {run} has no checkpoint; training starts from scratch in it")
                config["ckpt_path"] = None
                return
        else:
            run = latest_run(root)
            if run is None:
                _say(f"--ckpt_path last: no run under {root} has a checkpoint; starting a new run")
        if run is not None:
            _refuse_finished_run(config, last_checkpoint(run / "checkpoints"))
            version = run.name
            args["version"] = (
                int(version[len("version_") :]) if version.startswith("version_") and version[8:].isdigit() else version
            )
            if issubclass(cls, CSVLogger):
                _keep_metrics(run)
            _quiet_resume_warnings()
    elif issubclass(cls, WandbLogger):
        if args.get("id") or args.get("version"):
            return
        import os

        project = args.get("project") or os.environ.get("WANDB_PROJECT", "lightning_logs")
        run = latest_run(Path(args.get("save_dir") or ".") / project)
        if run is not None:
            _refuse_finished_run(config, last_checkpoint(run / "checkpoints"))
            args["id"] = run.name  # WandbLogger resumes a run id with resume="allow"
    if run is not None:
        # the file itself, so that a run without a checkpoint callback (trainer.enable_checkpointing:
        # false) resumes it too
        ckpt = last_checkpoint(run / "checkpoints")
        config["ckpt_path"] = str(ckpt)
        _say(_resuming_line(config, run, ckpt))


def _say(message: str) -> None:
    """One line on stderr from the first process (``unisent fit: ...``)."""
    import os
    import sys

    if all(os.environ.get(key, "0") == "0" for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID")):
        print(f"unisent fit: {message}", file=sys.stderr, flush=True)


def _resuming_line(config, run: Path, ckpt: Path) -> str:
    """``resuming RUN from checkpoints/last.ckpt (step 7, 0 epoch(s) done); training to max_steps=16``."""
    from ..resume import checkpoint_progress

    progress = checkpoint_progress(ckpt)
    where = f" (step {progress.global_step}, {progress.epochs_done} epoch(s) done)" if progress else ""
    max_steps, max_epochs = config.get("trainer.max_steps"), config.get("trainer.max_epochs")
    until = (
        f"max_steps={max_steps}"
        if max_steps not in (None, -1)
        else f"max_epochs={max_epochs}"
        if max_epochs is not None
        else "the end"
    )
    return (
        f"resuming {run} from {ckpt.relative_to(run) if ckpt.is_relative_to(run) else ckpt}{where}; training to {until}"
    )


def _record_interrupt(trainer: Any) -> None:
    """After a SIGINT/SIGTERM: note in :data:`unisent.resume.INTERRUPT` the checkpoint that continues the
    run (saved at the interrupted step, or the run's earlier last.ckpt) and the run's directory, for the
    message ``unisent fit`` prints."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from ..resume import INTERRUPT, last_checkpoint

    callback = getattr(trainer, "checkpoint_callback", None)
    dirpath = getattr(callback, "dirpath", None)
    if not INTERRUPT.get("checkpoint") and dirpath and Path(dirpath).is_dir():
        found = last_checkpoint(dirpath)
        INTERRUPT["checkpoint"] = str(found) if found else None
    for logger in getattr(trainer, "loggers", ()):
        if isinstance(logger, (CSVLogger, TensorBoardLogger)) and INTERRUPT.get("checkpoint"):
            run = Path(logger.log_dir)
            if Path(INTERRUPT["checkpoint"]).parent.parent == run:  # the run's own checkpoints/: pin its version
                INTERRUPT["version"] = run.name
            break


_SPECIAL_CKPT_PATHS = ("last", "best", "hpc", "registry")


def _quiet_resume_warnings() -> None:
    """Resuming into the run's own directory: Lightning warns that the directory is not empty and that
    "previous log files ... will be deleted". Nothing is lost (the interrupted attempt's metrics.csv is
    kept as metrics-<k>.csv, config and hparams are rewritten with the same run's values, checkpoints
    are the run's), and a warning that is always wrong here would teach users to ignore it elsewhere."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


def _refuse_finished_run(config, ckpt_path: Any) -> None:
    """Exit with one line (status 1) when checkpoint ``ckpt_path`` is at or past the stopping point of
    ``config`` (``trainer.max_steps``/``max_epochs``, counted from the start of the run, as Lightning
    does): resuming would train nothing. An unreadable file is left to the checks that load it."""
    import sys

    from ..resume import checkpoint_progress, stopping_point_reached

    if ckpt_path is None or str(ckpt_path) in _SPECIAL_CKPT_PATHS or "://" in str(ckpt_path):
        return
    path = Path(ckpt_path)
    progress = checkpoint_progress(path) if path.is_file() else None
    if progress is None:
        return
    reached = stopping_point_reached(progress, config.get("trainer.max_steps"), config.get("trainer.max_epochs"))
    if reached is None:
        return
    key, _, value = reached.partition("=")
    more = int(value) + 1 if key == "max_epochs" else int(value) * 2
    sys.exit(
        f"unisent fit: error: nothing to train: checkpoint {path} (step {progress.global_step}, "
        f"{progress.epochs_done} epoch(s) done) already reached {reached}; to train on, raise it "
        f"(e.g. --trainer.{key}={more}), or leave out --ckpt_path to start a new run"
    )


def _separate_from_training_run(config, subcommand: str) -> None:
    """``validate``/``test``/``predict`` log into a directory of their own, next to the training run,
    never into it: Lightning's CSV logger would overwrite the run's ``metrics.csv`` and ``hparams.yaml``
    and the config callback its ``config.yaml``. The training run is the directory of a
    ``--ckpt_path <run>/checkpoints/<file>``, or the run that the config's logger version names (a
    run's own ``config.yaml`` names its version). The new directory is ``<run>-<subcommand>-<k>``
    (first free k), beside ``<run>``; with neither, the logger makes a new version as usual."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    logger = config.get("trainer.logger")
    if isinstance(logger, list):
        logger = logger[0] if logger else None
    cls = _logger_class(logger) if logger not in (None, True, False) else None
    if cls is None or not issubclass(cls, (CSVLogger, TensorBoardLogger)):
        return
    args = logger.init_args
    run = None
    ckpt = config.get("ckpt_path")
    if ckpt is not None and str(ckpt) not in _SPECIAL_CKPT_PATHS and "://" not in str(ckpt):
        path = Path(ckpt).absolute()
        if path.parent.name == "checkpoints":
            run = path.parent.parent
    version = args.get("version")
    if run is None and version is not None:
        save_dir = args.get("save_dir") or config.get("trainer.default_root_dir") or "."
        named = (
            Path(save_dir) / (args.get("name") or "") / (version if isinstance(version, str) else f"version_{version}")
        )
        if named.is_dir() and any(named.iterdir()):
            run = named.absolute()
    if run is None:
        return
    k = 0
    while (run.parent / f"{run.name}-{subcommand}-{k}").exists():
        k += 1
    args["save_dir"], args["name"], args["version"] = str(run.parent), "", f"{run.name}-{subcommand}-{k}"


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


#: files a run directory holds before anything is trained or logged
_CONFIG_FILES = {"config.yaml", "hparams.yaml"}


def _remove_empty_run_dirs(trainer: Any) -> None:
    """After a failed or interrupted run: remove each logger's run directory (``version_N``) when it
    holds nothing but config files (no checkpoint, no metrics), so that failed attempts leave no
    empty runs behind. A resumed run's directory holds checkpoints and is always kept."""
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


#: what a quiet run leaves out: Lightning's own notices (hardware, seed, tips, "Restoring states", "`Trainer.fit`
#: stopped"), the model summary, transformers' weight-loading and shard-writing bars, the version number in the
#: progress bar, and these warnings (each a known, harmless case)
QUIET_WARNINGS = (
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning on torch's _pytree (a DeprecationWarning)
    r"`ModelCheckpoint\(monitor='val/score'\)` could not find the monitored key",  # max_steps before a validation
    r"Checkpoint directory .* exists and is not empty",
    r"The dirpath has changed from",  # `unisent test` of a run's checkpoint: its logs go beside the run
)


@contextlib.contextmanager
def quiet():
    """While a Lightning command runs: print the progress bar and what the user asked for (``unisent fit``'s
    own lines, warnings that matter, errors); ``--verbose`` skips this. Restores the logging levels,
    warning filters and transformers' settings afterwards (the command may run inside another program)."""
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


#: set by :func:`main` (``unisent fit --verbose``)
_VERBOSE = False


def main(argv: Sequence[str] | None = None, verbose: bool = False) -> None:
    """``unisent fit|validate|test|predict ...`` (``argv`` includes the command word). Quiet unless
    ``verbose`` (:func:`quiet`)."""
    global _VERBOSE

    _VERBOSE = verbose
    with contextlib.nullcontext() if verbose else quiet():
        _cli(argv, verbose)


def _cli(argv: Sequence[str] | None, verbose: bool) -> None:
    UnisentCLI(
        UnisentModule,
        UnisentDataModule,
        save_config_callback=UnisentSaveConfig,
        trainer_defaults=TRAINER_DEFAULTS if verbose else {**TRAINER_DEFAULTS, "enable_model_summary": False},
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=None if argv is None else list(argv),
        # a bad option, key or value raises jsonargparse's ArgumentError: `unisent fit` prints it in one
        # line naming the config file (unisent.cli), without the ~75-line usage block
        # no argparse abbreviations: `--trainer.max_step=2` is an error with a suggestion, not max_steps
        parser_kwargs={
            "exit_on_error": False,
            "allow_abbrev": False,
            **{
                name: {"exit_on_error": False, "allow_abbrev": False} for name in ("fit", "validate", "test", "predict")
            },
        },
    )
