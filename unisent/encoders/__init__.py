"""The encoder: backbones from a preset, a directory or a hub id (:mod:`.loading`, :mod:`.presets`),
poolers that declare their Sentence Transformers modules (:mod:`.poolers`), the whole
:class:`Encoder` (:mod:`.encoder`, its export declarations in :mod:`.model`), its settings as plain data
(:mod:`.config`) and their resolution from the preset or the model's files when it is built
(:mod:`.resolution`), a Sentence Transformers model's files (:mod:`.st_files`), modules
(:mod:`.st_pooler`) and prompts (:mod:`.prompts`), batching and truncation reporting
(:mod:`.batching`) and the unpadded forward (:mod:`.packed`).

Importing the package registers the built-in poolers, ``sentence-transformers`` included."""

from .batching import reference_batching
from .config import EncoderConfig
from .encoder import Encoder
from .loading import ModelNotAvailableError, resolve_model_location
from .poolers import POOLERS, Pooler, PoolingModeError, build_pooler, pooler_class, register_pooler
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
    "pooler_class",
    "reference_batching",
    "register_pooler",
    "resolve_encoder_config",
    "resolve_model_location",
]
