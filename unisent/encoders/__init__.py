"""Encoder registry: backbones from a preset, a directory or a hub id, with poolers."""

from .encoder import Encoder, EncoderConfig, pad_batch
from .loading import ModelNotAvailableError, resolve_model_location
from .poolers import POOLERS, Pooler, build_pooler
from .presets import PRESETS, Preset

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
    "resolve_model_location",
]
