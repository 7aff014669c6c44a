"""Encoder registry: backbones from a preset, a directory or a hub id, with poolers."""

from .encoder import Encoder, EncoderConfig, pad_batch, reference_batching
from .loading import ModelNotAvailableError, resolve_model_location
from .poolers import POOLERS, Pooler, build_pooler, pooler_class, register_pooler
from .presets import PRESETS, Preset


def __getattr__(name: str):
    if name == "EncoderWrapper":  # moved to unisent.models; kept importable from here
        from ..models.wrapper import EncoderWrapper

        return EncoderWrapper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Encoder",
    "EncoderConfig",
    "ModelNotAvailableError",
    "POOLERS",
    "PRESETS",
    "Pooler",
    "Preset",
    "build_pooler",
    "pad_batch",
    "pooler_class",
    "reference_batching",
    "register_pooler",
    "resolve_model_location",
]
