"""unisent: training and evaluating sentence embeddings in one Lightning framework."""

from __future__ import annotations

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .encoders import Encoder, EncoderConfig

from ._version import __version__
from .io.imports import lazy_exports

__all__ = ["Encoder", "EncoderConfig", "__version__", "load"]

# imported on first use (PEP 562), so that `import unisent` (`unisent --help`, `--version`) imports no torch
_LAZY = {"Encoder": "encoders", "EncoderConfig": "encoders"}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda _: import_module(".encoders", __name__))


def load(
    model: str | os.PathLike[str],
    device: str | torch.device | None = None,
    *,
    backend: str = "torch",
    onnx_file: str | None = None,
) -> Any:
    """Load an inference model from a preset name, a saved directory or a checkpoint, in eval mode.

    Args:
        model: ``minilm-l6`` (or any preset), a directory written by ``save_pretrained`` / ``unisent
            fit`` (``<log dir>/encoder``) or ``unisent export``, a Hugging Face model directory or hub
            id, or a Lightning ``.ckpt`` file from ``unisent fit``.
        device: where to put it (default: CPU).
        backend: ``torch`` (default) or ``onnx``: a directory of ``unisent export --format onnx`` run by onnxruntime
            ([`unisent.export.OnnxEncoder`][unisent.export.OnnxEncoder], same ``encode``;
            ``pip install 'unisent[onnx]'``).
        onnx_file: with ``backend="onnx"``: ``int8``, ``fp32`` or a file name in ``onnx/`` (default: the
            int8 file where the export has one, else fp32).

    ``encode`` follows one precision rule (``unisent.hardware``): ``precision="auto"`` unless told,
    bf16 where the device computes fast in bf16, fp32 elsewhere; the onnx backend runs its file's own.

    A saved directory is loaded as the model type it records (``unisent_model.json``) or whose marker files it holds,
    among every model type of unisent ([`unisent.models`][unisent.models]) and those registered from outside
    ([`unisent.inference.register_model`][unisent.inference.register_model]); a ``.ckpt`` is rebuilt with its objectives
    (``unisent.lightning_module.UnisentModule.from_checkpoint``). Nothing needs importing first: this is the one loader
    (``unisent._loader``, which the package's own modules call), imported on first call so that ``import unisent`` stays
    light.

    Raises:
        FileNotFoundError: a ``.ckpt`` that does not exist.
        unisent.io.CheckpointError: a ``.ckpt`` that is truncated, not a checkpoint, or not one of ``unisent fit``.
    """
    from ._loader import load as _load

    return _load(model, device, backend=backend, onnx_file=onnx_file)
