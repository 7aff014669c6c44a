"""unisent: training and evaluating sentence embeddings in one Lightning framework."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .encoders import Encoder, EncoderConfig

from ._loader import load
from ._version import __version__
from .io.imports import lazy_exports

__all__ = ["Encoder", "EncoderConfig", "__version__", "load"]

# imported on first use (PEP 562), so that `import unisent` (`unisent --help`, `--version`) imports no torch
_LAZY = {"Encoder": "encoders", "EncoderConfig": "encoders"}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda _: import_module(".encoders", __name__))
