"""Which run a Lightning command continues or sits beside, from the parsed config, per logger (each names
its runs its own way); called by ``unisent.commands.train.UnisentCLI`` before anything is built."""

from __future__ import annotations

import importlib
import itertools
import os
import posixpath
import sys
import warnings
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from ..io.remote import filesystem, is_remote, join, localize
from ..resume import is_rank_zero
from ..run_progress import checkpoint_progress, last_checkpoint, latest_run, stopping_point_reached

__all__ = [
    "NothingToTrain",
    "continue_last_run",
    "localize_ckpt_path",
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
    (``NothingToTrain`` when it reached this config's stopping point)."""
    if config.get("ckpt_path") != "last":
        return
    dirpath = config.get("checkpoint.dirpath")
    if dirpath:  # an explicit checkpoint directory: Lightning finds last.ckpt there itself (a URL: found here)
        if not is_remote(str(dirpath)):
            refuse_finished_run(config, last_checkpoint(dirpath))
        elif (ckpt := last_checkpoint(str(dirpath))) is not None:
            config["ckpt_path"] = localize(str(ckpt), "checkpoint")  # the copy Lightning loads, checked by the CLI
            refuse_finished_run(config, config["ckpt_path"])
            _say(f"resuming from {ckpt}")
        return
    logger, cls = _configured_logger(config)
    if logger is None or cls is None:
        return
    args = logger.init_args
    run = None
    if issubclass(cls, (CSVLogger, TensorBoardLogger)):
        run = _continue_versioned_run(config, args, keep_metrics=issubclass(cls, CSVLogger))
    elif issubclass(cls, WandbLogger):
        run = _continue_wandb_run(config, args)
    if run is not None:
        # the file itself, so that a run without a checkpoint callback resumes it too
        ckpt = last_checkpoint(_join(run, "checkpoints"))  # the run was picked for having one
        if ckpt is None:  # removed since: from scratch, as a pinned run without one (not ckpt_path "None")
            config["ckpt_path"] = None
            return
        from ..checkpoint_record import check_unisent_checkpoint

        local = localize(str(ckpt), "checkpoint")  # a URL: the copy Lightning loads
        check_unisent_checkpoint(local)  # read as data before Lightning loads it: a file with code is refused
        config["ckpt_path"] = local
        _say(_resuming_line(run, ckpt, local))


def _continue_versioned_run(config, args, keep_metrics: bool) -> Path | str | None:
    """CSV/TensorBoard: the pinned version or the newest run with a checkpoint (``None``: from scratch); a
    run under a URL (``save_dir: s3://...``) as its URL."""
    root = _join(
        str(args.get("save_dir") or config.get("trainer.default_root_dir") or "."),
        args.get("name", "lightning_logs") or "",
    )
    version = args.get("version")
    if version is not None:  # a pinned run: resume that one, never another
        run = _join(root, version if isinstance(version, str) else f"version_{version}")
        if last_checkpoint(_join(run, "checkpoints")) is None:
            _say(f"--ckpt_path last: {run} has no checkpoint; training starts from scratch in it")
            config["ckpt_path"] = None
            return None
    else:
        run = latest_run(root)
        if run is None:
            _say(f"--ckpt_path last: no run under {root} has a checkpoint; starting a new run")
            return None
    last = last_checkpoint(_join(run, "checkpoints"))
    refuse_finished_run(config, localize(str(last), "checkpoint") if last is not None else None)  # a URL: its copy
    name = _name(run)
    args["version"] = int(name[8:]) if name.startswith("version_") and name[8:].isdigit() else name
    if keep_metrics:
        _keep_metrics(run)
    _quiet_resume_warnings()
    return run


def _continue_wandb_run(config, args) -> Path | str | None:
    """W&B: the newest run with a checkpoint, its id given to the logger (``None``: named run, or none)."""
    if args.get("id") or args.get("version"):
        return None
    project = args.get("project") or os.environ.get("WANDB_PROJECT", "lightning_logs")
    run = latest_run(_join(str(args.get("save_dir") or "."), project))
    if run is not None:
        last = last_checkpoint(_join(run, "checkpoints"))
        refuse_finished_run(config, localize(str(last), "checkpoint") if last is not None else None)
        args["id"] = _name(run)
    return run


def run_folder_without_logger(config) -> Path | str | None:
    """``fit`` with ``trainer.logger: false``: ``<default_root_dir>/runs/unisent/version_N``, or the newest
    there with ``--ckpt_path last`` (``None`` with a logger), never files the next such run would replace."""
    if config.get("trainer.logger") not in (False, []):
        return None
    base = str(config.get("trainer.default_root_dir") or ".")
    root = _join(base, *LOGGERLESS_RUNS.parts)
    if config.get("ckpt_path") == "last" and not config.get("checkpoint.dirpath"):
        run = latest_run(root)
        if run is None and last_checkpoint(_join(base, "checkpoints")) is not None:
            return None  # a run written before runs got their own folder: it goes on where it is
        if run is not None and (ckpt := last_checkpoint(_join(run, "checkpoints"))) is not None:
            local = localize(str(ckpt), "checkpoint")
            refuse_finished_run(config, local)
            config["ckpt_path"] = local
            _say(f"trainer.logger is false; {_resuming_line(run, ckpt, local)}")
            _quiet_resume_warnings()
            return run
        _say(f"--ckpt_path last: no run under {root} has a checkpoint; starting a new run")
        config["ckpt_path"] = None
    versions = [int(name[len("version_") :]) for name in _versions(root) if name[len("version_") :].isdigit()]
    run = _join(root, f"version_{max(versions, default=-1) + 1}")
    _say(f"trainer.logger is false: this run writes config.yaml, checkpoints/ and encoder/ to {run}")
    return run


def _say(message: str) -> None:
    """One line on stderr from the first process (``unisent fit: ...``)."""
    if is_rank_zero():
        print(f"unisent fit: {message}", file=sys.stderr, flush=True)


def _resuming_line(run: Path | str, ckpt: Path | str, local: str | None = None) -> str:
    """``resuming RUN from checkpoints/last.ckpt (step 7, 0 epoch(s) done)`` (``local``: a URL's local copy)."""
    progress = checkpoint_progress(local or ckpt)
    where = f" (step {progress.global_step}, {progress.epochs_done} epoch(s) done)" if progress else ""
    if is_remote(str(run)):
        inside = str(ckpt).startswith(str(run).rstrip("/") + "/")
        return f"resuming {run} from {str(ckpt)[len(str(run).rstrip('/')) + 1 :] if inside else ckpt}{where}"
    ckpt, run = Path(ckpt), Path(run)
    return f"resuming {run} from {ckpt.relative_to(run) if ckpt.is_relative_to(run) else ckpt}{where}"


def _join(base: Path | str, *parts: str) -> Path | str:
    """``base/parts``: a URL stays a URL (``pathlib`` would fold its ``//``)."""
    return join(str(base), *parts) if is_remote(str(base)) else Path(base, *parts)


def _name(run: Path | str) -> str:
    return posixpath.basename(str(run).rstrip("/")) if is_remote(str(run)) else Path(run).name


def _versions(root: Path | str) -> list[str]:
    """The names of ``root``'s ``version_*`` folders (a local folder or a URL)."""
    fs, path = filesystem(str(root))
    try:
        return [posixpath.basename(p.rstrip("/")) for p in fs.glob(join(path, "version_*"))]
    except FileNotFoundError:
        return []


def localize_ckpt_path(config) -> None:
    """``--ckpt_path s3://...``: the local copy instead, so that the checks of the file and Lightning read
    the same bytes."""
    ckpt = config.get("ckpt_path")
    if isinstance(ckpt, str) and is_remote(ckpt):
        config["ckpt_path"] = localize(ckpt, "checkpoint")


def _quiet_resume_warnings() -> None:
    """Lightning's "directory not empty" warnings when resuming into the run's own: nothing is lost here,
    and a warning always wrong here would teach users to ignore it elsewhere."""
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


def refuse_finished_run(config, ckpt_path: Any) -> None:
    """``NothingToTrain`` when ``ckpt_path`` is at or past ``config``'s ``trainer.max_steps``/``max_epochs``
    (counted from the run's start, as Lightning does); an unreadable file is left to the loading checks."""
    if isinstance(ckpt_path, str) and is_remote(ckpt_path) and config.get("ckpt_path") == ckpt_path:
        localize_ckpt_path(config)  # the copy that Lightning loads, checked here and by --ckpt_path's checks
        ckpt_path = config.get("ckpt_path")
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
    localize_ckpt_path(config)  # a URL: its checked local copy is what Lightning loads
    logger, cls = _configured_logger(config)
    if logger is None or cls is None or not issubclass(cls, (CSVLogger, TensorBoardLogger)):
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


def _keep_metrics(run: Path | str) -> None:
    """Keep the interrupted attempt's metrics.csv, which CSVLogger would delete, as metrics-<k>.csv."""
    if getattr(rank_zero_only, "rank", 0) != 0:
        return
    fs, path = filesystem(str(run))  # a local folder or a URL
    if fs.isfile(join(path, "metrics.csv")):
        k = next(k for k in itertools.count() if not fs.exists(join(path, f"metrics-{k}.csv")))
        fs.mv(join(path, "metrics.csv"), join(path, f"metrics-{k}.csv"))
