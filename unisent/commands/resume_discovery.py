"""Which run a Lightning command continues or sits beside, from the parsed config, per logger (each names
its runs its own way); called by :class:`unisent.commands.train.UnisentCLI` before anything is built."""

from __future__ import annotations

import itertools
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
    """A missing ``--ckpt_path`` in a folder of other checkpoints: name them."""
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


def _configured_logger(config):
    """The first logger of ``trainer.logger`` and its class (``None`` without one or when it does not import)."""
    logger = config.get("trainer.logger")
    if isinstance(logger, list):
        logger = logger[0] if logger else None
    return logger, _logger_class(logger) if logger not in (None, True, False) else None


def continue_last_run(config) -> None:
    """``fit --ckpt_path last``: point the logger at the run with the newest last.ckpt and resume from it
    (:class:`NothingToTrain` when it reached this config's stopping point)."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    from ..run_progress import last_checkpoint

    if config.get("ckpt_path") != "last":
        return
    dirpath = config.get("checkpoint.dirpath")
    if dirpath:  # an explicit checkpoint directory: Lightning finds last.ckpt there itself
        if "://" not in str(dirpath):
            refuse_finished_run(config, last_checkpoint(dirpath))
        return
    logger, cls = _configured_logger(config)
    if cls is None:
        return
    args = logger.init_args
    run = None
    if issubclass(cls, (CSVLogger, TensorBoardLogger)):
        run = _continue_versioned_run(config, args, keep_metrics=issubclass(cls, CSVLogger))
    elif issubclass(cls, WandbLogger):
        run = _continue_wandb_run(config, args)
    if run is not None:
        # the file itself, so that a run without a checkpoint callback resumes it too
        ckpt = last_checkpoint(run / "checkpoints")
        from ..checkpoint_record import check_unisent_checkpoint

        if ckpt is not None:
            check_unisent_checkpoint(ckpt)  # read as data before Lightning loads it: a file with code is refused
        config["ckpt_path"] = str(ckpt)
        _say(_resuming_line(run, ckpt))


def _continue_versioned_run(config, args, keep_metrics: bool) -> Path | None:
    """CSV/TensorBoard: the pinned version or the newest run with a checkpoint (``None``: from scratch)."""
    from ..run_progress import last_checkpoint, latest_run

    root = Path(args.get("save_dir") or config.get("trainer.default_root_dir") or ".") / (
        args.get("name", "lightning_logs") or ""
    )
    version = args.get("version")
    if version is not None:  # a pinned run: resume that one, never another
        run = root / (version if isinstance(version, str) else f"version_{version}")
        if last_checkpoint(run / "checkpoints") is None:
            _say(f"--ckpt_path last: {run} has no checkpoint; training starts from scratch in it")
            config["ckpt_path"] = None
            return None
    else:
        run = latest_run(root)
        if run is None:
            _say(f"--ckpt_path last: no run under {root} has a checkpoint; starting a new run")
            return None
    refuse_finished_run(config, last_checkpoint(run / "checkpoints"))
    args["version"] = int(run.name[8:]) if run.name.startswith("version_") and run.name[8:].isdigit() else run.name
    if keep_metrics:
        _keep_metrics(run)
    _quiet_resume_warnings()
    return run


def _continue_wandb_run(config, args) -> Path | None:
    """W&B: the newest run with a checkpoint, its id given to the logger (``None``: named run, or none)."""
    from ..run_progress import last_checkpoint, latest_run

    if args.get("id") or args.get("version"):
        return None
    project = args.get("project") or os.environ.get("WANDB_PROJECT", "lightning_logs")
    run = latest_run(Path(args.get("save_dir") or ".") / project)
    if run is not None:
        refuse_finished_run(config, last_checkpoint(run / "checkpoints"))
        args["id"] = run.name
    return run


def run_folder_without_logger(config) -> Path | None:
    """``fit`` with ``trainer.logger: false``: ``<default_root_dir>/runs/unisent/version_N``, or the newest
    there with ``--ckpt_path last`` (``None`` with a logger), never files the next such run would replace."""
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
    """``resuming RUN from checkpoints/last.ckpt (step 7, 0 epoch(s) done)``."""
    from ..run_progress import checkpoint_progress

    progress = checkpoint_progress(ckpt)
    where = f" (step {progress.global_step}, {progress.epochs_done} epoch(s) done)" if progress else ""
    return f"resuming {run} from {ckpt.relative_to(run) if ckpt.is_relative_to(run) else ckpt}{where}"


def _quiet_resume_warnings() -> None:
    """Lightning's "directory not empty" warnings when resuming into the run's own: nothing is lost here,
    and a warning always wrong here would teach users to ignore it elsewhere."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


def refuse_finished_run(config, ckpt_path: Any) -> None:
    """:class:`NothingToTrain` when ``ckpt_path`` is at or past ``config``'s ``trainer.max_steps``/``max_epochs``
    (counted from the run's start, as Lightning does); an unreadable file is left to the loading checks."""
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
    """``validate``/``test``/``predict`` log into ``<run>-<subcommand>-<k>`` beside the training run (of the
    ``--ckpt_path`` or the logger's version), never into it, where they would overwrite its files."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    logger, cls = _configured_logger(config)
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
    k = next(k for k in itertools.count() if not (run.parent / f"{run.name}-{subcommand}-{k}").exists())
    args["save_dir"], args["name"], args["version"] = str(run.parent), "", f"{run.name}-{subcommand}-{k}"


def _keep_metrics(run: Path) -> None:
    """Keep the interrupted attempt's metrics.csv, which CSVLogger would delete, as metrics-<k>.csv."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    metrics = run / "metrics.csv"
    if getattr(rank_zero_only, "rank", 0) != 0 or not metrics.is_file():
        return
    k = next(k for k in itertools.count() if not (run / f"metrics-{k}.csv").exists())
    metrics.rename(run / f"metrics-{k}.csv")
