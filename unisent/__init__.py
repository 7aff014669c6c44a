"""unisent: training and evaluating sentence embeddings in one Lightning framework."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .encoders import Encoder, EncoderConfig

from ._version import __version__

__all__ = ["Encoder", "EncoderConfig", "__version__", "load"]


def __getattr__(name: str) -> Any:
    """``unisent.Encoder``/``EncoderConfig`` are imported on first use (PEP 562), so that importing the
    package (``unisent --help``, ``unisent --version``) does not import torch."""
    if name in ("Encoder", "EncoderConfig"):  # lazy, not moved: unisent.encoders defines them
        from . import encoders

        return getattr(encoders, name)
    raise AttributeError(f"module 'unisent' has no attribute {name!r}")


def load(model: str | os.PathLike, device: str | torch.device | None = None) -> torch.nn.Module:
    """Load an inference model from a preset name, a saved directory or a checkpoint, in eval mode.

    Args:
        model: ``minilm-l6`` (or any preset), a directory written by ``save_pretrained`` / ``unisent
            fit`` (``<log dir>/encoder``) or ``unisent export``, a Hugging Face model directory or hub
            id, or a Lightning ``.ckpt`` file from ``unisent fit``.
        device: where to put it (default: CPU).

    A saved directory is loaded as the model type it records (``unisent_model.json``), through the
    registry of :mod:`unisent.inference`, which third-party packages extend with
    :func:`unisent.inference.register_model`. This imports every model type of unisent
    (:mod:`unisent.models`) and the training module (which loads ``.ckpt`` files), then calls
    :func:`unisent.inference.load`.
    """
    from . import models, module  # noqa: F401 - registers unisent's model types and the .ckpt loader
    from .inference import load as load_model

    return load_model(model, device)
