"""The encoder: backbones from a preset, a directory or a hub id (:mod:`.loading`, :mod:`.presets`),
poolers that declare their Sentence Transformers modules (:mod:`.poolers`), the :class:`Encoder`
(:mod:`.encoder`; its export declarations in :mod:`.export_declarations`), its settings (:mod:`.config`,
resolved by :mod:`.resolution`), a Sentence Transformers model's files and modules (:mod:`.st_files`),
prompts (:mod:`.prompts`), batching (:mod:`.batching`) and the unpadded forward (:mod:`.packed`).

Importing the package registers the built-in poolers, ``sentence-transformers`` included."""

from .batching import reference_batching
from .config import EncoderConfig
from .encoder import Encoder
from .loading import ModelNotAvailableError
from .poolers import POOLERS, Pooler, PoolingModeError, build_pooler, register_pooler
from .presets import PRESETS, Preset
from .resolution import resolve_encoder_config
from .st_files import SentenceTransformersModuleError

__all__ = [
    "Encoder",
    "EncoderConfig",
    "ModelNotAvailableError",
    "POOLERS",
    "PRESETS",
    "Pooler",
    "PoolingModeError",
    "Preset",
    "SentenceTransformersModuleError",
    "build_pooler",
    "reference_batching",
    "register_pooler",
    "resolve_encoder_config",
]
