"""Where a run stands: its newest run and checkpoint, how far a checkpoint's run went, whether it met a
stopping condition, and which limit will end a run and which one did (``StoppingReport``)."""

from __future__ import annotations

import math
import posixpath
import sys
from pathlib import Path
from typing import Any, NamedTuple

from lightning.pytorch.callbacks import Callback, Timer

from .io import load_checkpoint
from .io.remote import glob, is_remote, join, localize
from .resume import settle_stopped_epoch

__all__ = [
    "Progress",
    "StoppingReport",
    "checkpoint_progress",
    "last_checkpoint",
    "latest_run",
    "limits_line",
    "stop_line",
    "stopping_point_reached",
]


def latest_run(root: str | Path) -> Path | str | None:
    """The run directory under ``root`` whose ``checkpoints/last*.ckpt`` is the newest, or ``None``; under a
    URL (``s3://...``) the run's URL, by the objects' modification time (an object is listed only once its
    upload completed), ties by the checkpoints' ``global_step``."""
    if is_remote(str(root)):
        found = _remote_last_checkpoints(join(str(root), "*", "checkpoints", "last*.ckpt"))
        return posixpath.dirname(posixpath.dirname(found[-1])) if found else None
    root = Path(root)
    if not root.is_dir():
        return None
    found = [
        (ckpt.stat().st_mtime, ckpt.parent.parent) for ckpt in root.glob("*/checkpoints/last*.ckpt") if ckpt.is_file()
    ]
    return max(found, key=lambda pair: pair[0])[1] if found else None


class Progress(NamedTuple):
    """How far a checkpoint's run went."""

    global_step: int  #: optimiser steps taken
    epochs_done: int  #: epochs fully trained


def checkpoint_progress(path: str | Path) -> Progress | None:
    """How far the run of checkpoint ``path`` went (memory-mapped, weights not loaded); ``None`` when it is
    not a readable Lightning checkpoint."""
    try:
        checkpoint = load_checkpoint(path, mmap=True)
    except Exception:  # noqa: BLE001 - the caller's own checks report what is wrong with the file
        return None
    if not isinstance(checkpoint, dict) or "global_step" not in checkpoint:
        return None
    settle_stopped_epoch(checkpoint)
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    epochs = (loop.get("epoch_progress") or {}).get("current") or {}
    batches = loop.get("epoch_loop.batch_progress") or {}
    done = int(epochs.get("processed", checkpoint.get("epoch", 0)))
    if batches.get("is_last_batch") and epochs.get("ready", 0) > done:
        done = int(epochs["ready"])  # the epoch's last batch is trained: only its validation was left
    return Progress(int(checkpoint["global_step"]), done)


def stopping_point_reached(progress: Progress, max_steps: int | None, max_epochs: int | None) -> str | None:
    """The limit (``"max_steps=N"`` or ``"max_epochs=N"``, as Lightning applies them) a checkpoint at
    ``progress`` has met already; ``None`` when there is training left."""
    steps, epochs = _limits(max_steps, max_epochs)
    if steps != -1 and progress.global_step >= steps:
        return f"max_steps={steps}"
    if epochs != -1 and progress.epochs_done >= epochs:
        return f"max_epochs={epochs}"
    return None


def _limits(max_steps: int | None, max_epochs: int | None) -> tuple[int, int]:
    """``max_steps``/``max_epochs`` as Lightning applies them: ``-1`` for none (no limit at all: 1000 epochs)."""
    steps = -1 if max_steps is None else int(max_steps)
    epochs = int(max_epochs) if max_epochs is not None else (1000 if steps == -1 else -1)
    return steps, epochs


def limits_line(
    max_steps: int | None,
    max_epochs: int | None,
    steps_per_epoch: int | None = None,
    global_step: int = 0,
    max_time: Any = None,
) -> str:
    """What will end a run, said when it starts: ``training until max_epochs=2 (about 32 steps) or
    max_steps=400, whichever comes first``, the limit expected first named first (``steps_per_epoch``:
    optimiser steps an epoch, when known)."""
    steps, epochs = _limits(max_steps, max_epochs)
    limits: list[tuple[float, str]] = []
    if steps != -1:
        limits.append((steps, f"max_steps={steps}"))
    if epochs != -1:
        about = epochs * steps_per_epoch if steps_per_epoch else None
        limits.append(
            (
                about if about is not None else float("inf"),
                f"max_epochs={epochs}" + (f" (about {about} steps)" if about is not None else ""),
            )
        )
    limits.sort(key=lambda limit: limit[0])  # (stable: max_steps first when both end at the same step)
    names = [name for _, name in limits]
    if max_time is not None:
        names.append(f"max_time={max_time}")
    start = f"training from step {global_step}" if global_step else "training"
    if not names:
        return f"{start} with no step or epoch limit (trainer.max_steps=-1, trainer.max_epochs=-1)"
    return f"{start} until {' or '.join(names)}" + (", whichever comes first" if len(names) > 1 else "")


def stop_line(
    global_step: int,
    epochs_done: int,
    max_steps: int | None,
    max_epochs: int | None,
    other: str | None = None,
) -> str:
    """Which limit ended a run: ``stopped at step 32: max_epochs=2 reached (max_steps=400 not reached)``;
    ``other``: what stopped it when no limit was reached (``max_time``, a callback)."""
    steps, epochs = _limits(max_steps, max_epochs)
    reached, not_reached = [], []
    if steps != -1:
        (reached if global_step >= steps else not_reached).append(f"max_steps={steps}")
    if epochs != -1:
        (reached if epochs_done >= epochs else not_reached).append(f"max_epochs={epochs}")
    why = f"{' and '.join(reached)} reached" if reached else other or "stopped before its limits"
    return f"stopped at step {global_step}: {why}" + (f" ({', '.join(not_reached)} not reached)" if not_reached else "")


class StoppingReport(Callback):
    """Prints ``limits_line`` when training starts and ``stop_line`` when it ends (stderr, rank 0)."""

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero or trainer.fast_dev_run:  # pyright: ignore[reportAttributeAccessIssue]  # set, not declared
            return
        batches = trainer.num_training_batches
        per_epoch = None
        if isinstance(batches, int) or (isinstance(batches, float) and math.isfinite(batches)):
            per_epoch = math.ceil(int(batches) / max(1, trainer.accumulate_grad_batches)) or None
        seconds = getattr(_timer(trainer), "_duration", None)
        max_time = _duration(seconds) if seconds is not None else None
        line = limits_line(trainer.max_steps, trainer.max_epochs, per_epoch, trainer.global_step, max_time)
        print(f"unisent fit: {line}", file=sys.stderr, flush=True)

    def on_train_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero or trainer.fast_dev_run:  # pyright: ignore[reportAttributeAccessIssue]
            return
        loop = trainer.fit_loop
        processed = loop.epoch_progress.current.processed  # pyright: ignore[reportAttributeAccessIssue]  # a _ProcessedTracker
        # an epoch cut short (max_steps, a callback) is counted as processed: only full epochs count here
        epochs_done = processed if loop.epoch_loop.batch_progress.is_last_batch else max(0, processed - 1)
        left = _timer(trainer).time_remaining("train") if _timer(trainer) is not None else None
        if left is not None and left <= 0:
            other = "max_time reached"
        elif trainer.should_stop:
            other = "a callback stopped it (trainer.should_stop, e.g. EarlyStopping)"
        else:
            other = None
        line = stop_line(trainer.global_step, epochs_done, trainer.max_steps, trainer.max_epochs, other)
        print(f"unisent fit: {line}", file=sys.stderr, flush=True)


def _timer(trainer) -> Any:
    """Lightning's ``Timer`` callback (``trainer.max_time``), or ``None``."""
    return next((c for c in trainer.callbacks if isinstance(c, Timer)), None)


def _duration(seconds: float) -> str:
    """``max_time`` as the user writes it: ``DD:HH:MM:SS``."""
    total = int(seconds)
    return f"{total // 86400:02d}:{total % 86400 // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def last_checkpoint(directory: str | Path) -> Path | str | None:
    """The newest ``last*.ckpt`` in ``directory`` (what ``ckpt_path="last"`` picks), or ``None``; in a URL
    its URL (see ``latest_run``)."""
    if is_remote(str(directory)):
        found = _remote_last_checkpoints(join(str(directory), "last*.ckpt"))
        return found[-1] if found else None
    found = [p for p in Path(directory).glob("last*.ckpt") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _remote_last_checkpoints(pattern: str) -> list[str]:
    """The URLs matching ``pattern``, oldest first: by modification time (S3's has one-second steps), ties
    by the checkpoint's ``global_step`` (read from a local copy), then by name."""
    found = [
        (info.get("LastModified") or info.get("mtime") or info.get("updated") or "", url) for url, info in glob(pattern)
    ]
    if not found:
        return []
    newest = max(modified for modified, _ in found)
    tied = [url for modified, url in found if modified == newest]
    if len(tied) > 1:
        steps = {url: (checkpoint_progress(localize(url, "checkpoint")) or Progress(-1, 0)).global_step for url in tied}
        tied.sort(key=lambda url: (steps[url], url))
    return [url for modified, url in sorted(found) if url not in tied] + tied
