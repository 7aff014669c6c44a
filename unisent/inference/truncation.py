"""Embeddings cut to their first ``dim`` coordinates at inference (``--truncate-dim``), as Sentence
Transformers' ``truncate_dim``: for models trained with :class:`unisent.objectives.Matryoshka`.

:class:`TruncatedModel` wraps any model with ``encode(sentences, batch_size, normalize=..., ...)``: it
encodes the full vectors (the model's own normalisation, if it has one, included), keeps the first
``dim`` coordinates and L2-normalises *after* the cut when ``normalize=True``. Everything else (``eval``,
``parameters``, ``export_max_length``, ``config`` ...) is the wrapped model's. A Gaussian model
(``encode_gaussian``: GaussCSE, trained with ``Matryoshka`` on its means and variances together) gets its
mean and variance cut together: the first ``dim`` coordinates of a diagonal Gaussian are its marginal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["TruncatedModel", "check_truncate_dim", "embedding_dim"]


def embedding_dim(model: Any) -> int:
    """The model's embedding size, read from the vector of one probe sentence."""
    with torch.no_grad():
        vectors = model.encode(["."], 1)
    return int(np.asarray(vectors.detach().cpu() if isinstance(vectors, torch.Tensor) else vectors).shape[-1])


def check_truncate_dim(model: Any, dim: int, option: str = "--truncate-dim") -> int:
    """``dim`` if ``model`` can be cut there; a one-line :class:`ValueError` naming ``option`` if not.

    Returns the model's full embedding size."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
        raise ValueError(f"{option} must be a positive number of dimensions, got {dim}")
    full = embedding_dim(model)
    if dim > full:
        raise ValueError(f"{option} {dim} is above the model's embedding dimension {full}")
    return full


class TruncatedModel:
    """``model`` whose ``encode`` returns the first ``dim`` coordinates (normalised after the cut)."""

    def __init__(self, model: Any, dim: int, option: str = "--truncate-dim") -> None:
        self.full_dim = check_truncate_dim(model, dim, option)
        self.model = model
        self.truncate_dim = dim

    def encode(self, sentences: Sequence[str], batch_size: int = 64, *args: Any, **kwargs: Any) -> Any:
        normalize = bool(kwargs.pop("normalize", False))
        vectors = self.model.encode(sentences, batch_size, *args, normalize=False, **kwargs)
        cut = vectors[..., : self.truncate_dim]
        if isinstance(cut, torch.Tensor):
            cut = cut.contiguous()
            return torch.nn.functional.normalize(cut, dim=-1) if normalize else cut
        cut = np.ascontiguousarray(cut)
        if normalize:
            cut = cut / np.maximum(np.linalg.norm(cut, axis=-1, keepdims=True), 1e-12)
        return cut

    def _encode_gaussian(self, sentences: Sequence[str], batch_size: int = 64, *args: Any, **kwargs: Any):
        """The wrapped Gaussian model's means and variances, both cut to the first ``dim`` coordinates."""
        mu, var = self.model.encode_gaussian(sentences, batch_size, *args, **kwargs)
        return mu[..., : self.truncate_dim].contiguous(), var[..., : self.truncate_dim].contiguous()

    def __getattr__(self, name: str) -> Any:
        if name == "model" or name.startswith("__"):
            raise AttributeError(name)
        if name == "encode_gaussian":  # only where the wrapped model is Gaussian (tasks test for the method)
            getattr(self.model, name)
            return self._encode_gaussian
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"TruncatedModel({self.model!r}, dim={self.truncate_dim})"
