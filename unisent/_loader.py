"""The one loader behind ``unisent.load``: every kind of model from one call, nothing to import first.

=====================================  ==============================================================
given                                  loaded as
=====================================  ==============================================================
a ``.ckpt`` of ``unisent fit``         ``UnisentModule.from_checkpoint(path).inference_model()``
                                       (``unisent.lightning_module``): the
                                       run's objectives rebuilt from the checkpoint's record, at the
                                       inference length (``encoder.inference_max_length``, else the
                                       backbone's own limit), as the run's saved ``encoder/``
a directory                            the model type it records (``unisent_model.json``) or whose
                                       marker files it holds, among every type of ``unisent.models``
                                       (imported here) and any registered from outside; else the plain
                                       ``Encoder`` (a saved unisent encoder, a
                                       Sentence Transformers directory, a Hugging Face model directory)
a URL (``s3://bucket/run/encoder``)     downloaded once into ``$UNISENT_CACHE/remote`` by
                                       ``unisent.io.remote.localize``, then loaded as the above
anything else                          a preset name (``minilm-l6``) or a Hugging Face hub id
``backend="onnx"``                     a directory of ``unisent export --format onnx`` run by onnxruntime
                                       (``OnnxEncoder``)
=====================================  ==============================================================

A directory that records ``truncate_dim`` (``unisent export --truncate-dim``) is loaded cut there, as
``SentenceTransformer(DIR)`` loads it (``truncated_as_recorded``).

Users call ``unisent.load`` (the package root, which imports nothing heavy until called); the modules of
unisent below the root (``unisent encode``'s file encoder, the export source, the panel, MTEB) call
``load`` here, the same function. This module sits in the tools layer: the lowest that may import
both the model types and the training module (for ``.ckpt``) and the ONNX runner. Every import it needs
is its own, so ``unisent.load(...)`` works first thing in a fresh interpreter.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["load"]


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
    (``unisent._loader``, which the package's own modules call, and ``unisent.load``, the same function), imported by
    the package root as it is, so that ``import unisent`` stays light: it imports nothing heavy until called.

    Raises:
        FileNotFoundError: a ``.ckpt`` that does not exist.
        unisent.io.remote.RemoteError: a URL that is missing, unreachable or refused (one line naming it).
        unisent.io.CheckpointError: a ``.ckpt`` that is truncated, not a checkpoint, or not one of ``unisent fit``.
        ValueError: an unknown ``backend``, or ``onnx_file`` without ``backend="onnx"``.
    """
    from .inference.truncation import truncated_as_recorded
    from .io.remote import is_remote, localize

    if is_remote(str(model)):  # s3://...: a local copy, then the local loaders and their checks run on it
        model = localize(str(model))
    if backend == "onnx":
        from .models.onnx_encoder import OnnxEncoder

        return truncated_as_recorded(OnnxEncoder(model, onnx_file).to(device), model)
    if backend != "torch":
        raise ValueError(f"backend must be 'torch' or 'onnx', got {backend!r}")
    if onnx_file is not None:
        raise ValueError("onnx_file applies to backend='onnx'")
    from . import encoders, models  # registers unisent's model types  # noqa: F401  # pyright: ignore[reportUnusedImport]
    from .inference.model_types import load_saved
    from .io import check_checkpoint

    path = Path(model).expanduser()
    if path.suffix == ".ckpt":
        check_checkpoint(path)  # missing or truncated: one-line FileNotFoundError / CheckpointError
        from .inference.base import set_inference_length
        from .lightning_module import UnisentModule  # Lightning only for a checkpoint

        loaded = UnisentModule.from_checkpoint(path).inference_model().eval()
        set_inference_length(loaded)  # as <run>/encoder: inference_max_length, else the backbone's own limit
    else:  # a saved directory as its registered type; a preset name or hub id as the plain Encoder
        loaded = load_saved(model)
    return truncated_as_recorded(loaded.to(device) if device else loaded, model)
