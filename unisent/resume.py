"""Fault-tolerant training: atomic checkpoints, resume points every N steps, random states.

A checkpoint of ``UnisentCheckpoint`` holds what an exact resumption needs (weights, objective
states, optimiser, scheduler, loop counters, the loaders' position, every process's random states):
``unisent fit ... --ckpt_path last`` ends with the same weights as an uninterrupted run (see
docs/operations.md)."""

from __future__ import annotations

import io
import os
import random
import re
import signal
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.plugins.environments.slurm import SLURMEnvironment
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .io import atomic_write, remove_stale_temporaries
from .lightning_compat import cluster_environment, data_fetcher, should_accumulate
from .testing import fault_point

__all__ = [
    "RNG_KEY",
    "AtomicCheckpointIO",
    "Interrupt",
    "InterruptRequest",
    "UnisentCheckpoint",
    "is_rank_zero",
    "requeue_slurm_job",
    "settle_stopped_epoch",
    "slurm_job_id",
]

#: where the random states of all processes are stored in a checkpoint
RNG_KEY = "unisent_rng_states"


def rng_states() -> dict[str, Any]:
    """This process's Python, NumPy, torch CPU and (in use) CUDA random states, as tensors and plain
    values (a checkpoint must load with ``weights_only=True``)."""
    name, keys, pos, has_gauss, cached = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["torch.cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what ``rng_states`` returned."""
    random.setstate(states["python"])
    n = states["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(states["torch"])
    if "torch.cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch.cuda"])


def _all_processes(trainer, obj: Any) -> list[Any]:
    """``obj`` of every process, by global rank (collective: every process must call it)."""
    dist = torch.distributed
    if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out
    return [obj]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in its own directory, fsync it, then rename it: a reader
    sees the previous complete checkpoint or the new one. (Lightning's fsspec save writes it in the system
    temp directory: on another file system, a local ``/tmp``, its "rename" is a copy a kill can cut short.)
    Remote paths (``s3://``, ``gs://`` ...) are written in one upload that the store commits when it
    completes (S3 shows an object only then): a killed writer leaves the previous object."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        fs = get_filesystem(path)
        if storage_options is not None:
            return super().save_checkpoint(checkpoint, path, storage_options=storage_options)
        if not isinstance(fs, LocalFileSystem):
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            fs.makedirs(os.path.dirname(str(path)), exist_ok=True)
            with fs.open(str(path), "wb") as f:
                f.write(buffer.getbuffer())  # pyright: ignore[reportArgumentType]  # fsspec's open is unannotated: "wb" is binary
                fault_point("checkpoint_write")  # a kill before close: the upload is never completed
            return None
        with atomic_write(path, "wb", durable=True) as f:
            torch.save(checkpoint, f)
            fault_point("checkpoint_write")  # benchmarks/soak.py: a kill before the rename


@dataclass(frozen=True)
class Interrupt:
    """What an interrupted fit left, for the message on how to go on: the signal (``None``: a bare
    ``KeyboardInterrupt``), the step, the checkpoint that continues it (``None``: none saved), whether a
    second signal stopped it at once without saving (``now``), and the logger version to pin."""

    signal: str | None = None
    step: int | None = None
    checkpoint: str | None = None
    now: bool = False
    version: str | None = None


class InterruptRequest:
    """SIGINT, SIGTERM and SIGUSR1 during training: the first is remembered, the step finishes, and the
    callback saves ``last.ckpt`` there and stops. A second one stops at once, without saving.

    SIGTERM is how SLURM preempts a job and how Kubernetes evicts a pod; SIGUSR1 is SLURM's warning before
    the time limit (``#SBATCH --signal=SIGUSR1@120``). Lightning's own SLURM handler, which saves in the
    middle of a step and is not read by ``--ckpt_path last``, is switched off (``UnisentCheckpoint``)."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")

    def __init__(self) -> None:
        self.signum: int | None = None
        self.now = False  # a second signal stopped the run at once
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for name in self.SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue  # no SIGUSR1 on Windows
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # ignored on purpose (nohup; a shell's background job ignores SIGINT): keep it so
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # the second signal: stop now
            self.restore()
            self.now = True
            raise KeyboardInterrupt
        self.signum = signum
        if is_rank_zero():
            print(
                f"\nunisent fit: {self.name} received: finishing this step, then saving last.ckpt and stopping"
                f"{' (and requeueing the SLURM job)' if slurm_job_id() and self.name != 'SIGINT' else ''} "
                f"({'Ctrl-C' if self.name == 'SIGINT' else self.name} again stops at once, without saving)",
                file=sys.stderr,
                flush=True,
            )


def is_rank_zero() -> bool:
    """Whether this is the first process (by the launcher's variables: torchrun, Lightning, SLURM)."""
    return all(os.environ.get(key, "0") == "0" for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


def slurm_job_id() -> str | None:
    """The SLURM job this process runs in, as ``scontrol requeue`` names it (``<array job>_<task>`` for an
    array task); ``None`` outside a batch job (no ``SLURM_JOB_ID``, or an interactive ``srun`` whose job name
    is ``bash``/``interactive``, as Lightning treats it)."""
    if os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")
    return job if job and re.fullmatch(r"[0-9]+(_[0-9]+)?", job) else None


def requeue_slurm_job(job: str) -> str | None:
    """``scontrol requeue JOB`` (rank 0 calls it once every process has saved and stopped); ``None`` when it
    worked, else one line on why not. SLURM then ends this job and starts it again from its script."""
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "scontrol is not on PATH"
    except subprocess.TimeoutExpired:
        return "scontrol requeue did not answer within 60 s"
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        return f"scontrol requeue {job} exited with status {done.returncode}" + (f": {reason[-1]}" if reason else "")
    return None


class UnisentCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` with what exact, fault-tolerant resumption needs.

    ``every_n_train_steps`` writes **resume points**: ``last.ckpt`` every N optimiser steps (needs
    ``save_last: true``), while the top-k is still ranked on fresh scores when validation ends (Lightning's
    own option ranks by an earlier validation's). It also writes files atomically, restores every
    process's random states before a resumed run's first step, and restarts the iterator at the restored
    data position under strategies that load the checkpoint after the loaders (FSDP, DeepSpeed)."""

    def __init__(self, *, every_n_train_steps: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        n = every_n_train_steps or 0
        if n < 0:
            raise ValueError(f"every_n_train_steps must be >= 0, got {n}")
        if n and self.save_last is not True:
            raise ValueError(
                "checkpoint.every_n_train_steps writes resume points as last.ckpt: it needs "
                f"checkpoint.save_last: true (got {self.save_last!r})"
            )
        if n and self.save_weights_only:
            raise ValueError(
                "checkpoint.every_n_train_steps writes resume points, which need the optimiser and "
                "loop states: it cannot be combined with save_weights_only"
            )
        self.every_n_train_steps = n
        self._resume_step_saved = -1
        self._last_saved_step = -1
        self._rng_to_restore: list[dict[str, Any]] | None = None
        self._interrupt = InterruptRequest()
        self._stop_pending = False
        self._stopped: Interrupt | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        strategy = trainer.strategy
        environment = cluster_environment(trainer)
        if isinstance(environment, SLURMEnvironment):
            environment.auto_requeue = False  # SIGUSR1 is ours: finish the step, save last.ckpt, stop, requeue
        if type(strategy.checkpoint_io) is TorchCheckpointIO:
            strategy.checkpoint_io = AtomicCheckpointIO()
        if trainer.is_global_zero and self.dirpath and os.path.isdir(self.dirpath):
            remove_stale_temporaries(self.dirpath)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._save_resume_point(trainer)
        self._save_if_interrupted(trainer)

    def _save_resume_point(self, trainer) -> None:
        n, step = self.every_n_train_steps, trainer.global_step
        if not n or step == 0 or step % n or step == self._resume_step_saved:
            return  # gradient accumulation: several batches end at the same step
        if trainer.fast_dev_run or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._resume_step_saved = step
        # not a top-k save: else this step's validation would skip ranking its fresh score
        before = self._last_global_step_saved
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._last_global_step_saved = before

    def _save_last_checkpoint(self, trainer, monitor_candidates) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._last_saved_step = trainer.global_step

    def on_train_start(self, trainer, pl_module) -> None:
        self._restart_iterator(trainer)
        self._stop_pending = False
        self._interrupt = InterruptRequest()
        self._stopped = None
        if trainer.state.fn == "fit" and not trainer.fast_dev_run:  # pyright: ignore[reportAttributeAccessIssue]  # set, not declared
            self._interrupt.install()

    def _interrupted(self, trainer) -> bool:
        """Whether a signal asked any process to stop (collective under DDP: all stop at the same step, and a
        process that got none records the signal another got, so that every one exits as that signal says)."""
        signum = self._interrupt.signum or 0
        dist = torch.distributed
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            flag = torch.tensor([float(signum)], device=trainer.strategy.root_device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            signum = int(flag.item())
            if signum and self._interrupt.signum is None:
                self._interrupt.signum = signum
        return bool(signum)

    def _save_if_interrupted(self, trainer) -> None:
        """After SIGINT/SIGTERM, at a step boundary: save ``last.ckpt``; the next hook stops the run."""
        if self._stop_pending or not self._interrupted(trainer):
            return
        if should_accumulate(trainer):
            return  # in the middle of an accumulated step: the boundary is the optimiser step
        if self.save_last and trainer.global_step > 0 and trainer.global_step != self._last_saved_step:
            before = self._last_global_step_saved
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            self._last_global_step_saved = before
        self._stop_pending = True

    def _stop_if_pending(self, trainer) -> None:
        if not self._stop_pending:
            return
        self._stop_pending = False
        self._interrupt.restore()
        last = (
            f"{str(self.dirpath).rstrip('/')}/{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"
            if self.dirpath
            else None
        )
        self._stopped = Interrupt(
            signal=self._interrupt.name,
            step=trainer.global_step,
            checkpoint=last if last is not None and self._fs.isfile(last) else None,  # a local path or a URL
        )
        raise KeyboardInterrupt  # Lightning's shutdown; `unisent fit` then prints how to continue

    @property
    def interrupt(self) -> Interrupt | None:
        """What a SIGINT/SIGTERM during this fit left, ``None`` without one; the command says how to go on."""
        if self._stopped is not None:
            return self._stopped
        if self._interrupt.signum is not None:
            return Interrupt(signal=self._interrupt.name, now=self._interrupt.now)
        return None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._stop_if_pending(trainer)
        self._restore_rng(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._save_if_interrupted(trainer)  # a signal during validation: saved after it

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._stop_if_pending(trainer)  # before an end-of-epoch save would count the epoch as done
        super().on_train_epoch_end(trainer, pl_module)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._interrupt.restore()
        super().on_exception(trainer, pl_module, exception)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._interrupt.restore()
        super().teardown(trainer, pl_module, stage)

    def on_train_end(self, trainer, pl_module) -> None:
        self._stop_pending = False  # the run has finished: nothing to stop
        self._interrupt.restore()
        # Lightning saves last.ckpt at the end only when this run saved none yet: it could lag the final weights
        super().on_train_end(trainer, pl_module)
        if (
            self.save_last
            and trainer.state.fn == "fit"
            and trainer.global_step > 0
            and not trainer.fast_dev_run  # pyright: ignore[reportAttributeAccessIssue]
            and trainer.global_step != self._last_saved_step
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint[RNG_KEY] = _all_processes(trainer, rng_states())
        settle_stopped_epoch(checkpoint)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get(RNG_KEY)
        settle_stopped_epoch(checkpoint)  # older checkpoints; the DataModule reads the same dict later
        settle_epoch_boundary(checkpoint)  # written at an epoch's last batch: resume into the next epoch

    def _restart_iterator(self, trainer) -> None:
        restart = getattr(trainer.datamodule, "restart_position", None)
        if restart is not None and restart():
            iter(data_fetcher(trainer))  # the checkpoint was read after the iterator was made

    def _restore_rng(self, trainer) -> None:
        # as late as possible: what ran before the first step used the new process's state, as before
        if self._rng_to_restore is None:
            return
        states, self._rng_to_restore = self._rng_to_restore, None
        if len(states) != trainer.world_size:
            warnings.warn(
                f"the checkpoint holds the random states of {len(states)} processes, this run has "
                f"{trainer.world_size}: dropout will not continue exactly as before",
                stacklevel=2,
            )
        set_rng_states(states[trainer.global_rank % len(states)])


def settle_stopped_epoch(checkpoint: dict[str, Any]) -> bool:
    """Make a checkpoint written after a run stopped mid-epoch resume that epoch; whether it changed it.

    When ``max_steps`` (or an early stop) ends a run mid-epoch, Lightning counts the epoch as done before
    ``last.ckpt`` is written, so a longer resumed run would skip the rest of it. The loop state becomes
    that of a resume point at the same step (``checkpoint["epoch"]`` and the DataModule's epoch too)."""
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    epochs, batches = loop.get("epoch_progress"), loop.get("epoch_loop.batch_progress")
    if not epochs or not batches:
        return False
    current, done = epochs["current"], batches["current"]
    if batches.get("is_last_batch", True) or not done.get("processed") or not current.get("ready"):
        return False
    if current["processed"] != current["ready"]:
        return False  # a resume point: the epoch is not counted as done
    for part in ("current", "total"):
        progress = epochs.get(part)
        if progress and progress.get("ready"):
            progress["processed"] = progress["ready"] - 1
            progress["completed"] = min(progress["completed"], progress["ready"] - 1)
    epoch = current["completed"]
    checkpoint["epoch"] = epoch
    for state in checkpoint.values():  # the DataModule's data position (UnisentDataModule.state_dict)
        if isinstance(state, dict) and "positions" in state and "epoch" in state and "batches" in state:
            state["epoch"] = epoch
    return True


def settle_epoch_boundary(checkpoint: dict[str, Any]) -> bool:
    """Make a checkpoint written at an epoch's last batch resume into the next epoch as an uninterrupted
    run does; whether it changed it.

    Lightning mis-resumes both states such a checkpoint can be in (``tests/test_resume.py`` pins them):
    written after the last batch, the epoch is processed, not completed, and counted again (``set_epoch``
    one too high); written inside it (its validation), the batch is processed, not completed, and the next
    epoch trains uncounted (later checkpoints record the epoch one behind). Both become: last batch
    completed, epoch not yet processed, so the resumed loop completes the epoch (its hooks run) and
    starts the next one with the uninterrupted run's number."""
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    epochs, batches = loop.get("epoch_progress"), loop.get("epoch_loop.batch_progress")
    if not epochs or not batches or not batches.get("is_last_batch"):
        return False
    changed = False
    for part in ("current", "total"):
        progress = epochs.get(part)
        if (
            progress
            and progress.get("ready")
            and progress["processed"] == progress["ready"]
            and progress["completed"] == progress["ready"] - 1
        ):
            progress["processed"] -= 1  # written after the last batch
            changed = True
        done = batches.get(part)
        if done and done.get("processed") and done["completed"] == done["processed"] - 1:
            done["completed"] = done["processed"]  # written inside the last batch
            changed = True
    return changed
