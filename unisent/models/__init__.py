"""Trained models on an encoder: heads, post-processors and composed models.

Each model (its registered type; what ``encode`` gives; what it saves):

- [`Encoder`][unisent.encoders.Encoder] (``encoder``): pooled backbone states; backbone, tokenizer,
  ``unisent_encoder.json``, ``pooler.pt``.
- [`GaussianEncoder`][unisent.models.GaussianEncoder] (``gaussian``): GaussCSE means (``encode_gaussian``: and
  variances); + ``gaussian_head.pt/.json``.
- [`ProjectionEncoder`][unisent.models.ProjectionEncoder] (``cmlm-projection``): mean of CMLM's projections; +
  ``cmlm_projection.pt/.json``.
- [`PCREncoder`][unisent.models.PCREncoder] (``pcr``): any model's vectors minus a language's principal components;
  ``pcr.json`` + ``model/``.
- [`RetrofittedEncoder`][unisent.models.RetrofittedEncoder] (``retrofitted``): text vector combined with its AMR
  graph's; ``retrofit.json`` + ``text/`` + ``amr/``.

Each class declares how it saves, loads and exports itself (the contract,
[`unisent.inference.InferenceModel`][unisent.inference.InferenceModel]) and registers its type
([`unisent.inference.register_model`][unisent.inference.register_model]); importing this package registers all of them,
so that ``unisent.load`` finds every type.
"""

from .gaussian import GaussianEncoder, GaussianHead
from .pcr import PCREncoder, PrincipalComponentRemoval, fit_pcr
from .projection import ProjectionEncoder, SentenceProjection
from .retrofitted_encoder import RetrofittedEncoder
from .wrapper import EncoderWrapper

__all__ = [
    "EncoderWrapper",
    "GaussianEncoder",
    "GaussianHead",
    "PCREncoder",
    "PrincipalComponentRemoval",
    "ProjectionEncoder",
    "RetrofittedEncoder",
    "SentenceProjection",
    "fit_pcr",
]
