"""What a trained model is: the :class:`InferenceModel` contract (saving, loading, its export
declarations) and the registry of model types that :func:`load` dispatches on.

This layer imports no model class; each type registers itself when its module is imported
(:func:`register_model`), and ``import unisent.models`` registers all of unisent's own.
"""

from .base import MODEL_RECORD, InferenceModel, NotExportableError, STModule
from .registry import (
    load,
    load_pretrained,
    model_class,
    register_checkpoint_loader,
    register_model,
    registered_models,
    saved_model_class,
)

__all__ = [
    "MODEL_RECORD",
    "InferenceModel",
    "NotExportableError",
    "STModule",
    "load",
    "load_pretrained",
    "model_class",
    "register_checkpoint_loader",
    "register_model",
    "registered_models",
    "saved_model_class",
]
