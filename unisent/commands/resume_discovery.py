"""Which run a Lightning command continues or sits beside, read from the parsed config before anything is built.

``fit --ckpt_path last`` continues the newest run of the configured logger (:func:`continue_last_run`), and
nothing is trained again past a run's stopping point (:func:`refuse_finished_run`); ``validate``, ``test``
and ``predict`` log beside a training run, never into it (:func:`separate_from_training_run`). Each logger
names its runs its own way (CSV and TensorBoard: ``<save_dir>/<name>/<version>``; W&B: a run id), so the
discovery is per logger. :class:`unisent.commands.train.UnisentCLI` calls these on the parsed config.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "NothingToTrain",
    "continue_last_run",
    "name_the_other_checkpoints",
    "refuse_finished_run",
    "run_folder_without_logger",
    "separate_from_training_run",
]

#: where a run without a logger goes, under ``trainer.default_root_dir``: the default CSV logger's runs
LOGGERLESS_RUNS = Path("runs", "unisent")

#: values of ``--ckpt_path`` that Lightning resolves itself
SPECIAL_CKPT_PATHS = ("last", "best", "hpc", "registry")


class NothingToTrain(Exception):
    """The checkpoint to resume already reached the config's stopping point: resuming would train nothing."""


def name_the_other_checkpoints(path: Path) -> None:
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


def continue_last_run(config) -> None:
    """For ``fit --ckpt_path last``: point the logger at the run that holds the newest last.ckpt and
    resume from that file; refuse (:class:`NothingToTrain`) when that run already reached this config's
    stopping point."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    from ..run_progress import last_checkpoint, latest_run

    if config.get("ckpt_path") != "last":
        return
    dirpath = config.get("checkpoint.dirpath")
    if dirpath:  # an explicit checkpoint directory: Lightning finds last.ckpt there itself
        if "://" not in str(dirpath):
            refuse_finished_run(config, last_checkpoint(dirpath))
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
            refuse_finished_run(config, last_checkpoint(run / "checkpoints"))
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
        project = args.get("project") or os.environ.get("WANDB_PROJECT", "lightning_logs")
        run = latest_run(Path(args.get("save_dir") or ".") / project)
        if run is not None:
            refuse_finished_run(config, last_checkpoint(run / "checkpoints"))
            args["id"] = run.name  # WandbLogger resumes a run id with resume="allow"
    if run is not None:
        # the file itself, so that a run without a checkpoint callback (trainer.enable_checkpointing:
        # false) resumes it too
        ckpt = last_checkpoint(run / "checkpoints")
        from ..checkpoint_record import check_unisent_checkpoint

        if ckpt is not None:
            check_unisent_checkpoint(ckpt)  # read as data before Lightning loads it: a file with code is refused
        config["ckpt_path"] = str(ckpt)
        _say(_resuming_line(run, ckpt))


def run_folder_without_logger(config) -> Path | None:
    """``fit`` with ``trainer.logger: false``: the fresh folder the run writes into, ``None`` for a run with a
    logger (whose folder the logger names).

    Lightning would write such a run's ``config.yaml``, ``checkpoints/`` and ``encoder/`` straight into
    ``trainer.default_root_dir`` (the working directory), and the next such run would replace them. Instead it
    gets ``<default_root_dir>/runs/unisent/version_N``, numbered with the logged runs there (the default
    CSV logger's folder), and says so. ``--ckpt_path last`` continues the newest run there that has a
    ``last.ckpt`` (or a run of the old layout, with ``checkpoints/`` right in ``default_root_dir``)."""
    from ..run_progress import last_checkpoint, latest_run

    if config.get("trainer.logger") not in (False, []):
        return None
    base = Path(config.get("trainer.default_root_dir") or ".")
    root = base / LOGGERLESS_RUNS
    if config.get("ckpt_path") == "last" and not config.get("checkpoint.dirpath"):
        run = latest_run(root)
        if run is None and last_checkpoint(base / "checkpoints") is not None:
            return None  # a run written before runs got their own folder: it goes on where it is
        if run is not None:
            ckpt = last_checkpoint(run / "checkpoints")
            refuse_finished_run(config, ckpt)
            config["ckpt_path"] = str(ckpt)
            _say(f"trainer.logger is false; {_resuming_line(run, ckpt)}")
            _quiet_resume_warnings()
            return run
        _say(f"--ckpt_path last: no run under {root} has a checkpoint; starting a new run")
        config["ckpt_path"] = None
    versions = [int(d.name[len("version_") :]) for d in root.glob("version_*") if d.name[len("version_") :].isdigit()]
    run = root / f"version_{max(versions, default=-1) + 1}"
    _say(f"trainer.logger is false: this run writes config.yaml, checkpoints/ and encoder/ to {run}")
    return run


def _say(message: str) -> None:
    """One line on stderr from the first process (``unisent fit: ...``)."""
    if all(os.environ.get(key, "0") == "0" for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID")):
        print(f"unisent fit: {message}", file=sys.stderr, flush=True)


def _resuming_line(run: Path, ckpt: Path) -> str:
    """``resuming RUN from checkpoints/last.ckpt (step 7, 0 epoch(s) done)``; which limit ends the run is said
    when training starts, once the epoch's length is known (:class:`~unisent.run_progress.StoppingReport`)."""
    from ..run_progress import checkpoint_progress

    progress = checkpoint_progress(ckpt)
    where = f" (step {progress.global_step}, {progress.epochs_done} epoch(s) done)" if progress else ""
    return f"resuming {run} from {ckpt.relative_to(run) if ckpt.is_relative_to(run) else ckpt}{where}"


def _quiet_resume_warnings() -> None:
    """Resuming into the run's own directory: Lightning warns that the directory is not empty and that
    "previous log files ... will be deleted". Nothing is lost (the interrupted attempt's metrics.csv is
    kept as metrics-<k>.csv, config and hparams are rewritten with the same run's values, checkpoints
    are the run's), and a warning that is always wrong here would teach users to ignore it elsewhere."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


def refuse_finished_run(config, ckpt_path: Any) -> None:
    """Raise :class:`NothingToTrain` (one line) when checkpoint ``ckpt_path`` is at or past the stopping point
    of ``config`` (``trainer.max_steps``/``max_epochs``, counted from the start of the run, as Lightning
    does): resuming would train nothing. An unreadable file is left to the checks that load it."""
    from ..run_progress import checkpoint_progress, stopping_point_reached

    if ckpt_path is None or str(ckpt_path) in SPECIAL_CKPT_PATHS or "://" in str(ckpt_path):
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
    raise NothingToTrain(
        f"nothing to train: checkpoint {path} (step {progress.global_step}, {progress.epochs_done} epoch(s) "
        f"done) already reached {reached}; to train on, raise it (e.g. --trainer.{key}={more}), or leave out "
        "--ckpt_path to start a new run"
    )


def separate_from_training_run(config, subcommand: str) -> None:
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
    if ckpt is not None and str(ckpt) not in SPECIAL_CKPT_PATHS and "://" not in str(ckpt):
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
