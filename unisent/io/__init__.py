"""The foundation's file layer: dotted-path imports, atomic writes, checkpoints and model directories
read as data, and the "did you mean" of errors about names. Records are read by ``unisent.data.records``."""

from .checkpoints import (
    CheckpointError,
    UnsafeCheckpointError,
    check_checkpoint,
    convert_checkpoint,
    load_checkpoint,
    unsafe_globals,
)
from .files import atomic_write, remove_stale_temporaries, write_json
from .imports import import_object
from .model_files import ModelFileError, check_model_directory
from .suggestions import closest_hint, unknown_name, unknown_objectives

__all__ = [
    "CheckpointError",
    "ModelFileError",
    "UnsafeCheckpointError",
    "atomic_write",
    "check_checkpoint",
    "check_model_directory",
    "closest_hint",
    "convert_checkpoint",
    "import_object",
    "load_checkpoint",
    "remove_stale_temporaries",
    "unknown_name",
    "unknown_objectives",
    "unsafe_globals",
    "write_json",
]
