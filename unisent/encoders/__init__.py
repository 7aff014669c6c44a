"""The encoder: backbones from a preset, a directory or a hub id (``loading``, ``presets``),
poolers that declare their Sentence Transformers modules (``poolers``), the [`Encoder`][unisent.encoders.Encoder]
(``encoder``; its export declarations in ``export_declarations``), its settings (``config``,
resolved by ``resolution``), a Sentence Transformers model's files and modules (``st_files``),
prompts (``encoder``), batching (``batching``) and the unpadded forward (``packed``).

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
