"""Embeddings cut to their first ``dim`` coordinates at inference (``--truncate-dim``), as Sentence Transformers'
``truncate_dim`` (models trained with [`unisent.objectives.Matryoshka`][unisent.objectives.Matryoshka]).

``TruncatedModel`` (an [`InferenceModel`][unisent.inference.InferenceModel] holding ``model``) encodes the full vectors
(the model's own normalisation included), keeps the first ``dim`` coordinates and L2-normalises *after* the cut
when ``normalize=True``; ``config``, ``backend``, ``similarity_fn_name`` and ``export_max_length`` are the wrapped
model's. A Gaussian model (GaussCSE) gets ``encode_gaussian`` too, mean and variance cut together (the first ``dim``
coordinates of a diagonal Gaussian are its marginal). ``unisent.load`` cuts a directory
that records ``truncate_dim`` (``truncated_as_recorded``), as ``SentenceTransformer(DIR)`` does.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..io.model_files import ModelFileError, read_model_json
from .base import InferenceModel

__all__ = ["TruncatedModel", "check_truncate_dim", "embedding_dim", "truncated_as_recorded"]


def embedding_dim(model: Any) -> int:
    """The model's embedding size, read from the vector of one probe sentence."""
    with torch.no_grad():
        vectors = model.encode(["."], 1)
    return int(np.asarray(vectors.detach().cpu() if isinstance(vectors, torch.Tensor) else vectors).shape[-1])


def check_truncate_dim(model: Any, dim: int, option: str = "--truncate-dim") -> int:
    """``dim`` if ``model`` can be cut there; a one-line ``ValueError`` naming ``option`` if not.

    Returns the model's full embedding size."""
    if isinstance(dim, bool) or not isinstance(cast(object, dim), int) or dim <= 0:  # checked for untyped callers
        raise ValueError(f"{option} must be a positive number of dimensions, got {dim}")
    full = embedding_dim(model)
    if dim > full:
        raise ValueError(f"{option} {dim} is above the model's embedding dimension {full}")
    return full


def truncated_as_recorded(model: Any, directory: str | os.PathLike[str]) -> Any:
    """``model`` cut at the ``truncate_dim`` that ``directory``'s ``config_sentence_transformers.json`` records
    (``unisent export --truncate-dim``), in eval mode; ``model`` itself where none is recorded.

    Raises:
        ValueError: the file is malformed, or its ``truncate_dim`` is no positive integer or above the model's
            dimension (one line naming the file).
    """
    path = Path(directory).expanduser() / "config_sentence_transformers.json"
    dim = read_model_json(path, dict).get("truncate_dim") if path.is_file() else None
    if dim is None:
        return model
    if type(dim) is not int or dim <= 0:
        raise ModelFileError(f"{path}: truncate_dim must be a positive number of dimensions, got {dim!r:.40}")
    return TruncatedModel(model, dim, f"{path}: truncate_dim").eval()


class TruncatedModel(InferenceModel):
    """``model`` whose ``encode`` returns the first ``dim`` coordinates; ``dim`` not positive or above the model's
    dimension: a ``ValueError`` naming ``option``."""

    def __init__(self, model: Any, dim: int, option: str = "--truncate-dim") -> None:
        super().__init__()
        self.full_dim = check_truncate_dim(model, dim, option)
        self.model = model
        self.truncate_dim = dim
        if callable(getattr(model, "encode_gaussian", None)):  # only where the wrapped model is Gaussian
            self.encode_gaussian = self._encode_gaussian

    def encode(self, sentences: Sequence[str], batch_size: int = 64, *, normalize: bool = False, **options: Any) -> Any:
        """The wrapped model's ``encode`` (``options`` as given: ``precision``, ``show_progress_bar``, its own
        keywords) cut to ``truncate_dim`` coordinates, L2-normalised after the cut with ``normalize``."""
        cut = self.model.encode(sentences, batch_size, normalize=False, **options)[..., : self.truncate_dim]
        if isinstance(cut, torch.Tensor):
            cut = cut.contiguous()
            return torch.nn.functional.normalize(cut, dim=-1) if normalize else cut
        cut = np.ascontiguousarray(cut)
        if normalize:
            cut = cut / np.maximum(np.linalg.norm(cut, axis=-1, keepdims=True), 1e-12)
        return cut

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def backend(self) -> str:
        return getattr(self.model, "backend", "torch")

    @property
    def similarity_fn_name(self) -> str:
        return getattr(self.model, "similarity_fn_name", "cosine")

    @contextmanager
    def export_max_length(
        self, max_length: int | None = None, base_model: str | None = None
    ) -> Generator[tuple[int, int] | None, None, None]:
        """The wrapped model's (its maximum length while encoding; see
        [`InferenceModel.export_max_length`][unisent.inference.InferenceModel.export_max_length])."""
        inner = getattr(self.model, "export_max_length", None)
        with (inner or super().export_max_length)(max_length, base_model) as lengths:
            yield lengths

    def _encode_gaussian(self, sentences: Sequence[str], batch_size: int = 64, **options: Any):
        """The wrapped model's means and variances, both cut to the first ``truncate_dim`` coordinates."""
        mu, var = self.model.encode_gaussian(sentences, batch_size, **options)
        return mu[..., : self.truncate_dim].contiguous(), var[..., : self.truncate_dim].contiguous()

    def __repr__(self) -> str:
        return f"TruncatedModel({self.model!r}, dim={self.truncate_dim})"
