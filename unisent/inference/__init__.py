"""What a trained model is: the [`InferenceModel`][unisent.inference.InferenceModel] contract (saving, loading, its
export declarations) and the registry of model types (``model_types``).

This layer imports no model class; each type registers itself when its module is imported
([`register_model`][unisent.inference.register_model]), and ``import unisent.models`` registers all of unisent's own.
Loading a model of any kind is ``unisent.load`` (which registers every type first); nothing here needs importing in an
order.
"""

from .base import MODEL_RECORD, InferenceModel, NotExportableError, STModule
from .model_types import model_class, register_model, registered_models

__all__ = [
    "MODEL_RECORD",
    "InferenceModel",
    "NotExportableError",
    "STModule",
    "model_class",
    "register_model",
    "registered_models",
]
