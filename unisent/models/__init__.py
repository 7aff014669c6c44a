"""One home for trained models: every inference model, its saving, loading and export, and ``load``.

| model | what ``encode`` gives | saved as |
|---|---|---|
| :class:`~unisent.encoders.Encoder` (type ``encoder``) | pooled backbone states | backbone, tokenizer, ``unisent_encoder.json``, ``pooler.pt`` |
| :class:`GaussianEncoder` (``gaussian``) | GaussCSE means (``encode_gaussian``: and variances) | + ``gaussian_head.pt/.json`` |
| :class:`ProjectionEncoder` (``cmlm-projection``) | mean of CMLM's projections | + ``cmlm_projection.pt/.json`` |
| :class:`PCREncoder` (``pcr``) | any model's vectors minus a language's principal components | ``pcr.json`` + ``model/`` |
| :class:`RetrofittedEncoder` (``retrofitted``) | text vector combined with its AMR graph's | ``retrofit.json`` + ``text/`` + ``amr/`` |

Each class declares how it saves, loads and exports itself (:class:`InferenceModel`), and every saved
directory records its type (``unisent_model.json``), which :func:`load` dispatches on through the
registry (:func:`register_model`); a third-party package registers its own types the same way.

The model classes are imported on first use (``unisent.models.GaussianEncoder``), so that the encoder
layer can build on the contract (:mod:`unisent.models.base`) without import cycles.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .base import MODEL_RECORD, InferenceModel, NotExportableError, STModule
from .registry import load, load_pretrained, model_class, register_model, registered_models, saved_model_class

if TYPE_CHECKING:
    from .encoder import EncoderModel, hf_usage_code
    from .gaussian import GaussianEncoder, GaussianHead
    from .pcr import PCREncoder, fit_pcr
    from .projection import ProjectionEncoder, SentenceProjection
    from .retrofit import RetrofittedEncoder
    from .wrapper import EncoderWrapper

_LAZY = {
    "EncoderModel": "encoder",
    "hf_usage_code": "encoder",
    "EncoderWrapper": "wrapper",
    "GaussianEncoder": "gaussian",
    "GaussianHead": "gaussian",
    "PCREncoder": "pcr",
    "fit_pcr": "pcr",
    "ProjectionEncoder": "projection",
    "SentenceProjection": "projection",
    "RetrofittedEncoder": "retrofit",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MODEL_RECORD",
    "EncoderModel",
    "EncoderWrapper",
    "GaussianEncoder",
    "GaussianHead",
    "InferenceModel",
    "NotExportableError",
    "PCREncoder",
    "ProjectionEncoder",
    "RetrofittedEncoder",
    "STModule",
    "SentenceProjection",
    "fit_pcr",
    "hf_usage_code",
    "load",
    "load_pretrained",
    "model_class",
    "register_model",
    "registered_models",
    "saved_model_class",
]
