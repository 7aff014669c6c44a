"""The encoder: backbones from a preset, a directory or a hub id (:mod:`.loading`, :mod:`.presets`),
poolers that declare their Sentence Transformers modules (:mod:`.poolers`), the whole
:class:`Encoder` (:mod:`.encoder`, its export declarations in :mod:`.model`), its settings
(:mod:`.config`), batching and truncation reporting (:mod:`.batching`) and the unpadded forward
(:mod:`.packed`)."""

from .batching import reference_batching
from .config import EncoderConfig
from .encoder import Encoder
from .loading import ModelNotAvailableError, resolve_model_location
from .poolers import POOLERS, Pooler, build_pooler, pooler_class, register_pooler
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
    "pooler_class",
    "reference_batching",
    "register_pooler",
    "resolve_model_location",
]
