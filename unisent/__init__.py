"""unisent: training and evaluating sentence embeddings in one Lightning framework."""

from __future__ import annotations

from pathlib import Path

import torch

from .encoders import Encoder, EncoderConfig

__version__ = "0.1.0"
__all__ = ["Encoder", "EncoderConfig", "__version__", "load"]


def load(model: str, device: str | None = None) -> torch.nn.Module:
    """Load an encoder for inference from a preset name, a saved encoder directory or a checkpoint.

    Args:
        model: ``minilm-l6`` (or any preset), a directory written by ``Encoder.save_pretrained`` /
            ``unisent fit`` (``<log dir>/encoder``), a Hugging Face model directory or hub id, or a
            Lightning ``.ckpt`` file from ``unisent fit``.
        device: where to put it (default: CPU).
    """
    path = Path(model).expanduser()
    if path.suffix == ".ckpt":
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
        from .module import UnisentModule

        encoder = UnisentModule.from_checkpoint(path).inference_model()
    elif path.is_dir():
        from .amr.retrofit import RetrofittedEncoder
        from .objectives.cmlm import ProjectionEncoder
        from .objectives.gausscse import GaussianEncoder
        from .postprocess import PCREncoder

        # PCR first: it wraps the others; a retrofitted model holds two encoders in sub-directories
        wrappers = (PCREncoder, RetrofittedEncoder, GaussianEncoder, ProjectionEncoder)
        saved = next((w for w in wrappers if w.is_saved_in(path)), Encoder)
        encoder = saved.from_pretrained(path)
    else:
        encoder = Encoder(EncoderConfig(model=model))
    encoder.eval()
    return encoder.to(device) if device else encoder
