"""Checkpoint files checked before anything loads them, so that a truncated or foreign file is one
line, not a ``PytorchStreamReader`` traceback."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CheckpointError", "check_checkpoint"]


class CheckpointError(ValueError):
    """A checkpoint file is truncated or not a PyTorch checkpoint (checked before ``torch.load``)."""


def check_checkpoint(path: str | os.PathLike) -> Path:
    """Check that ``path`` is a complete PyTorch checkpoint file (a zip archive with its central
    directory, as ``torch.save`` writes it) before anything loads it, so that a truncated copy is
    reported in one line instead of a ``PytorchStreamReader`` traceback.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: the file is truncated or not a checkpoint.
    """
    import zipfile

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint {str(path)!r} does not exist"
            if not path.is_dir()
            else f"checkpoint {str(path)!r} is a directory; give the .ckpt file"
        )
    size = path.stat().st_size
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"checkpoint {path} ({size} bytes) is truncated or not a PyTorch checkpoint; copy it again, "
            "or pick another one (e.g. --ckpt_path last, or an earlier file in the run's checkpoints/)"
        )
    return path
