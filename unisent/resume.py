"""Fault-tolerant training: atomic checkpoints, resume points every N steps, random states.

``unisent fit`` uses :class:`UnisentCheckpoint` for its ``checkpoint:`` section. A checkpoint holds
what an exact resumption needs: the weights and every objective's state (EASE's entity vocabulary
is in the state dict), the optimiser and LR scheduler, Lightning's loop counters, the position of
every training loader (:meth:`unisent.data.UnisentDataModule.state_dict`) and the random states of
every process (this module). ``unisent fit ... --ckpt_path last`` continues a killed run and ends
with the same weights as an uninterrupted one (``tests/test_resume.py``; see docs/operations.md).
"""

from __future__ import annotations

import os
import random
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .io import atomic_write, remove_stale_temporaries
from .testing import fault_point

__all__ = [
    "RNG_KEY",
    "AtomicCheckpointIO",
    "Interrupt",
    "InterruptRequest",
    "UnisentCheckpoint",
    "rng_states",
    "set_rng_states",
    "settle_epoch_boundary",
    "settle_stopped_epoch",
]

#: where the random states of all processes are stored in a checkpoint
RNG_KEY = "unisent_rng_states"


# ---------------------------------------------------------------------------------------- random states
def rng_states() -> dict[str, Any]:
    """This process's random states: Python, NumPy, torch CPU and (when in use) every CUDA device,
    as tensors and plain values (a checkpoint must load with ``torch.load(weights_only=True)``)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
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
    """Restore what :func:`rng_states` returned."""
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


def _in_signal_handler() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_slurm_sigusr_handler_fn":
            return True
        frame = frame.f_back
    return False


# ---------------------------------------------------------------------------------------- atomic files
class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in its own directory, fsync it, then rename it.

    A reader (or a resumed run) sees the previous complete checkpoint or the new complete one, never
    a partial file, whatever kills the writer. Lightning's own save already writes through a
    temporary file, but fsspec creates that file with ``tempfile.mkstemp()`` in the system temp
    directory: when that is another file system than the checkpoints (a local ``/tmp``, checkpoints
    on a shared disk, the usual cluster layout) the final "rename" is a copy into the destination,
    which a kill can interrupt half-way. Here the file is written by :func:`unisent.io.atomic_write`
    (``durable=True``: the file and its directory are fsynced), next to its target, so the rename
    never crosses file systems. Remote paths (``s3://``, ``gs://`` ...) go through Lightning's
    implementation.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        from fsspec.implementations.local import LocalFileSystem

        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            return super().save_checkpoint(checkpoint, path, storage_options=storage_options)
        with atomic_write(path, "wb", durable=True) as f:
            torch.save(checkpoint, f)
            fault_point("checkpoint_write")  # (benchmarks/soak.py: a kill before the rename; no-op otherwise)

    @staticmethod
    def remove_stale_temporaries(directory: str | Path) -> list[Path]:
        """Delete temporary files that killed writers of this host left in ``directory``
        (:func:`unisent.io.remove_stale_temporaries`)."""
        return remove_stale_temporaries(directory)


# ---------------------------------------------------------------------------------------- interrupts
@dataclass(frozen=True)
class Interrupt:
    """What an interrupted fit left, for the message that says how to go on: the signal's name (``None``:
    a ``KeyboardInterrupt`` that no signal handler saw), the step it stopped at and the checkpoint that
    continues it (``None``: none saved), whether a second signal stopped it at once (``now``: no save at
    that step), and the run's logger version to pin when continuing (``None``: not known)."""

    signal: str | None = None
    step: int | None = None
    checkpoint: str | None = None
    now: bool = False
    version: str | None = None


class InterruptRequest:
    """SIGINT (Ctrl-C) and SIGTERM (what schedulers send before they kill) during training: the first one
    is remembered and the current step finishes; the checkpoint callback then saves ``last.ckpt`` at that
    step boundary and stops the run. A second signal stops at once, without saving (the previous complete
    checkpoint stays: every write is atomic)."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        self.signum: int | None = None
        self.now = False  # a second signal stopped the run at once, without saving
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str | None:
        import signal

        return None if self.signum is None else signal.Signals(self.signum).name

    def install(self) -> None:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for name in self.SIGNALS:
            signum = getattr(signal, name)
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # ignored on purpose (nohup; a shell's background job ignores SIGINT): keep it so
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        import signal

        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # the second signal: stop now
            self.restore()
            self.now = True
            raise KeyboardInterrupt
        self.signum = signum
        if _is_rank_zero():
            print(
                f"\nunisent fit: {self.name} received: finishing this step, then saving last.ckpt and stopping "
                f"({'Ctrl-C' if self.name == 'SIGINT' else self.name} again stops at once, without saving)",
                file=sys.stderr,
                flush=True,
            )


def _is_rank_zero() -> bool:
    return all(os.environ.get(key, "0") == "0" for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


# ---------------------------------------------------------------------------------------- the callback
class UnisentCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` with what exact, fault-tolerant resumption needs.

    Every argument is ``ModelCheckpoint``'s, except that ``every_n_train_steps`` writes **resume
    points**: ``last.ckpt`` every N optimiser steps whatever the monitored metric, while the top-k
    (``best.ckpt`` by ``val/score``) is still chosen when validation ends, on fresh scores. (Lightning's
    own ``every_n_train_steps`` would rank checkpoints at those steps by the score of an earlier
    validation, or postpone them to the next validation, ``last.ckpt`` included.) It needs
    ``save_last: true``.

    It also

    * writes every file atomically (:class:`AtomicCheckpointIO`, installed when the strategy uses
      Lightning's default ``TorchCheckpointIO``);
    * stores the random states of every process in each checkpoint and restores them just before
      the first training step of a resumed run (dropout masks continue as if uninterrupted);
    * restarts the training iterator at the restored data position under strategies that load the
      checkpoint after building the loaders (FSDP, DeepSpeed).

    Args:
        every_n_train_steps: write ``last.ckpt`` every N optimiser steps (0 or ``None``: only when
            Lightning's rules save, i.e. after validation or at the end of an epoch).
        **kwargs: the arguments of ``lightning.pytorch.callbacks.ModelCheckpoint``.
    """

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
        self._stopped: Interrupt | None = None  # the stop after a signal: its step and checkpoint

    # ---------------------------------------------------------------- files
    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        strategy = trainer.strategy
        if type(strategy.checkpoint_io) is TorchCheckpointIO:
            strategy.checkpoint_io = AtomicCheckpointIO()
        if trainer.is_global_zero and self.dirpath and os.path.isdir(self.dirpath):
            AtomicCheckpointIO.remove_stale_temporaries(self.dirpath)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._save_resume_point(trainer)
        self._save_if_interrupted(trainer)

    def _save_resume_point(self, trainer) -> None:
        n, step = self.every_n_train_steps, trainer.global_step
        if not n or step == 0 or step % n or step == self._resume_step_saved:
            return  # (with gradient accumulation, several batches end at the same step: save once)
        if trainer.fast_dev_run or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._resume_step_saved = step
        # not a top-k save: keep Lightning's bookkeeping of the last top-k step as it was, or the
        # validation of this same step would skip ranking its fresh score
        before = self._last_global_step_saved
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._last_global_step_saved = before

    def _save_last_checkpoint(self, trainer, monitor_candidates) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._last_saved_step = trainer.global_step

    # ---------------------------------------------------------------- SIGINT / SIGTERM
    def on_train_start(self, trainer, pl_module) -> None:
        self._restart_iterator(trainer)
        self._stop_pending = False
        self._interrupt = InterruptRequest()
        self._stopped = None
        if trainer.state.fn == "fit" and not trainer.fast_dev_run:
            self._interrupt.install()

    def _interrupted(self, trainer) -> bool:
        """Whether a signal asked to stop, on any process (collective under DDP: every process stops at
        the same step and takes part in the save)."""
        requested = self._interrupt.signum is not None
        dist = torch.distributed
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            flag = torch.tensor([float(requested)], device=trainer.strategy.root_device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            requested = bool(flag.item())
        return requested

    def _save_if_interrupted(self, trainer) -> None:
        """At a step boundary after SIGINT/SIGTERM: save ``last.ckpt`` (unless this step is saved already);
        the run stops at the next hook, once this step's metrics are logged (:meth:`_stop_if_pending`)."""
        if self._stop_pending or not self._interrupted(trainer):
            return
        loop = trainer.fit_loop.epoch_loop
        if getattr(loop, "_should_accumulate", lambda: False)():
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
        last = Path(self.dirpath) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}" if self.dirpath else None
        self._stopped = Interrupt(
            signal=self._interrupt.name,
            step=trainer.global_step,
            checkpoint=str(last) if last is not None and last.is_file() else None,
        )
        raise KeyboardInterrupt  # Lightning's shutdown; `unisent fit` then prints how to continue

    @property
    def interrupt(self) -> Interrupt | None:
        """What a SIGINT/SIGTERM during this fit left (the stop at a step boundary with its checkpoint, or a
        second signal's stop at once), ``None`` when no signal reached this callback; read by the command that
        ran the fit, to say how to continue it."""
        if self._stopped is not None:
            return self._stopped
        if self._interrupt.signum is not None:
            return Interrupt(signal=self._interrupt.name, now=self._interrupt.now)
        return None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._stop_if_pending(trainer)
        self._restore_rng(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._stop_if_pending(trainer)  # (a resumed run validates this step: Lightning restarts there)
        super().on_validation_start(trainer, pl_module)

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
        # a signal with the last step: the run has finished, nothing to stop (the final step is saved below)
        self._stop_pending = False
        self._interrupt.restore()
        # Lightning saves last.ckpt at the end only when this run has saved none yet: a run that wrote a
        # resume point or validated, then stopped (max_steps, early stop) before the next save, would
        # leave a last.ckpt some steps behind its final weights. Save the final state.
        super().on_train_end(trainer, pl_module)
        if (
            self.save_last
            and trainer.state.fn == "fit"
            and trainer.global_step > 0
            and not trainer.fast_dev_run
            and trainer.global_step != self._last_saved_step
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    # ---------------------------------------------------------------- random states
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if _in_signal_handler():
            # Lightning's SLURM requeue handler saves at an arbitrary point of a step, on each process
            # at its own moment: a collective here could pair with another one and hang
            checkpoint[RNG_KEY] = [rng_states()]
            return
        checkpoint[RNG_KEY] = _all_processes(trainer, rng_states())
        settle_stopped_epoch(checkpoint)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get(RNG_KEY)
        # (checkpoints written at the end of a run cut short before this fix; the DataModule keeps
        # the same state dict until its loaders are built, so the settled epoch reaches it too)
        settle_stopped_epoch(checkpoint)
        settle_epoch_boundary(checkpoint)  # written at an epoch's last batch: resume into the next epoch

    def _restart_iterator(self, trainer) -> None:
        restart = getattr(trainer.datamodule, "restart_position", None)
        if restart is not None and restart():
            # the strategy read the checkpoint after the loaders' iterator was made: make a new one
            # (now at the restored position) before the first batch is taken from it
            iter(trainer.fit_loop._data_fetcher)

    def _restore_rng(self, trainer) -> None:
        # restored here, as late as possible: anything that ran between reading the checkpoint and
        # the first step (building the model and loaders, the fetch of this batch) used the random
        # state of the new process, as the interrupted run did before its step
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


# ---------------------------------------------------------------------------------------- stopping points
def settle_stopped_epoch(checkpoint: dict[str, Any]) -> bool:
    """Make a checkpoint written after a run stopped in the middle of an epoch resume that epoch.

    When ``max_steps`` (or an early stop) ends a run mid-epoch, Lightning counts the epoch as done
    before ``on_train_end`` writes ``last.ckpt``; resumed with a longer schedule, the run would start
    the *next* epoch at the same batch index, skipping the rest of this one (and the data position
    would follow). Here the loop state becomes that of a resume point at the same step: the epoch is
    started, not finished (``checkpoint["epoch"]`` and the DataModule's epoch with it). Returns whether
    it changed anything; a checkpoint of a finished epoch or of a resume point is left as it is."""
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    epochs, batches = loop.get("epoch_progress"), loop.get("epoch_loop.batch_progress")
    if not epochs or not batches:
        return False
    current, done = epochs["current"], batches["current"]
    if batches.get("is_last_batch", True) or not done.get("processed") or not current.get("ready"):
        return False
    if current["processed"] != current["ready"]:
        return False  # the epoch is not counted as done: a resume point, nothing to settle
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
    run goes on.

    Such a checkpoint is written before the epoch's end, in one of two states, and Lightning resumes
    neither as an uninterrupted run goes on (``benchmarks/soak.py`` found both; ``tests/test_resume.py``
    pins them):

    * written after the last batch (``on_train_batch_end``): the epoch is processed and not completed;
      the resumed loop counts it as processed a second time, so the next epoch reaches the samplers
      (``set_epoch``) one higher than in the uninterrupted run: other batches;
    * written inside the last batch (the validation it ends with): the batch is processed and not
      completed; the resumed loop trains the next epoch's batches without counting a new epoch, so the
      checkpoints after it record the epoch one behind and a later resume draws an earlier epoch.

    Both become one state: the last batch completed, the epoch not yet processed. The resumed loop
    finds no batch left, processes and completes the epoch (its end-of-epoch hooks run, as they would
    have) and starts the next one with the uninterrupted run's number. Returns whether it changed
    anything."""
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
            progress["processed"] -= 1  # written after the last batch (on_train_batch_end)
            changed = True
        done = batches.get(part)
        if done and done.get("processed") and done["completed"] == done["processed"] - 1:
            done["completed"] = done["processed"]  # written inside the last batch (its validation): it is done
            changed = True
    return changed
