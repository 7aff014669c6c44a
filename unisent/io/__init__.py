"""The foundation's file layer: dotted-path imports (:mod:`.imports`), atomic writes (:mod:`.files`),
checkpoint checks (:mod:`.checkpoints`), model directories read as data (:mod:`.model_files`: paths inside,
regular files only, sizes against the weights, malformed files in one line) and the "did you mean" of errors
about names (:mod:`.suggestions`).
Records (training, evaluation and encode input) are read by :mod:`unisent.data.records`."""

from .checkpoints import (
    CheckpointError,
    UnsafeCheckpointError,
    check_checkpoint,
    convert_checkpoint,
    load_checkpoint,
    unsafe_globals,
)
from .files import atomic_write, fsync_directory, remove_stale_temporaries, temporary_name
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
    "fsync_directory",
    "import_object",
    "load_checkpoint",
    "remove_stale_temporaries",
    "temporary_name",
    "unknown_name",
    "unknown_objectives",
    "unsafe_globals",
]
