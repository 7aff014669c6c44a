"""Principal component removal (PCR), fitted per language (Yang et al. 2021, CMLM, Sec. 5.1).

"Removing the first principal component of each monolingual space from sentence representations
effectively eliminate[s] the self language bias" and "the first principal components in each
monolingual space primarily encode language identification information". Within one language the
language identity is constant, so a direction that carries it cannot be a direction of variance
around that language's mean: it is the direction of the mean itself. The default therefore follows
the common-component removal of Arora et al. (2017): the components are the top right-singular
vectors of the *uncentred* embedding matrix of a language (its first one is, up to sign, close to
the normalised language mean when the mean is large), and ``x -> x - C^T C x``.

``center=True`` is classical PCA instead: the language mean ``mu`` is subtracted, the components
are those of the centred matrix, and ``x -> (x - mu) - C^T C (x - mu)`` (the language mean is
removed too, which also removes language identity; the mean is not added back).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..io import atomic_write
from ..io.model_files import read_model_json

__all__ = ["PrincipalComponentRemoval"]

_FORMAT = "unisent-pcr/1"


def _matrix(x: Any) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).detach().cpu()
    if t.ndim != 2:
        raise ValueError(f"embeddings must be a (n, dim) matrix, got shape {tuple(t.shape)}")
    return t


class PrincipalComponentRemoval:
    """Remove the top ``k`` principal components of each language's embeddings.

    Args:
        k: number of components to remove (the paper: 1).
        center: ``False`` (default): components of the uncentred embeddings, the mean is kept;
            ``True``: PCA on centred embeddings, the language mean is removed as well (see the
            module docstring for why the default is uncentred).
    """

    def __init__(self, k: int = 1, center: bool = False) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.center = bool(center)
        self.components: dict[str, torch.Tensor] = {}  # language -> (k, dim) float32, orthonormal rows
        self.means: dict[str, torch.Tensor] = {}  # language -> (dim,) float32 (zeros unless center)

    @property
    def languages(self) -> list[str]:
        return sorted(self.components)

    @property
    def dim(self) -> int | None:
        return next(iter(self.components.values())).shape[1] if self.components else None

    def fit(self, embeddings_by_language: Mapping[str, Any]) -> PrincipalComponentRemoval:
        """Fit the components of every language from its (n, dim) embeddings (tensor or array).

        Languages fitted before and not named here are kept. Returns ``self``.
        """
        if not embeddings_by_language:
            raise ValueError("fit needs embeddings of at least one language")
        for language, embeddings in embeddings_by_language.items():
            x = _matrix(embeddings).double()
            n, dim = x.shape
            if self.dim is not None and dim != self.dim and language not in self.components:
                raise ValueError(f"language {language!r} has {dim}-dimensional embeddings, the others {self.dim}")
            if n < self.k or self.k >= dim:
                raise ValueError(
                    f"language {language!r}: need more than k={self.k} sentences and dimensions, got {n} x {dim}"
                )
            mean = x.mean(0) if self.center else torch.zeros(dim, dtype=x.dtype)
            _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
            self.components[language] = vh[: self.k].float().contiguous()
            self.means[language] = mean.float()
        return self

    def transform(self, x: Any, language: str | Sequence[str]) -> torch.Tensor:
        """Remove ``language``'s components from ``x`` (n, dim): a float32 tensor (n, dim).

        ``language`` is one language for all rows or one per row.
        """
        x = _matrix(x).float()
        if isinstance(language, str):
            comps, mean = self._fitted(language)
            centred = x - mean
            return centred - (centred @ comps.T) @ comps
        if len(language) != len(x):
            raise ValueError(f"got {len(language)} languages for {len(x)} embeddings")
        out = torch.empty_like(x)
        for lang in dict.fromkeys(language):
            rows = torch.tensor([i for i, value in enumerate(language) if value == lang], dtype=torch.long)
            out[rows] = self.transform(x[rows], lang)
        return out

    def _fitted(self, language: str) -> tuple[torch.Tensor, torch.Tensor]:
        if language not in self.components:
            raise KeyError(
                f"PCR was not fitted for language {language!r}; fitted: {', '.join(self.languages) or 'none'}"
            )
        return self.components[language], self.means[language]

    # ------------------------------------------------------------------------------------ save/load
    def state(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "k": self.k,
            "center": self.center,
            "languages": {
                lang: {"components": self.components[lang].tolist(), "mean": self.means[lang].tolist()}
                for lang in self.languages
            },
        }

    def save(self, path: str | os.PathLike, **extra: Any) -> Path:
        """Write the fitted components as JSON (float32 values round-trip exactly); ``extra``: more fields (a
        ``PCREncoder``'s default language)."""
        path = Path(path)
        with atomic_write(path) as fh:
            fh.write(json.dumps(self.state() | extra) + "\n")
        return path

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> PrincipalComponentRemoval:
        if state.get("format") != _FORMAT:
            raise ValueError(f"not a unisent PCR file (format {state.get('format')!r}, want {_FORMAT!r})")
        pcr = cls(k=state["k"], center=state["center"])
        for lang, entry in state["languages"].items():
            pcr.components[lang] = torch.tensor(entry["components"], dtype=torch.float32)
            pcr.means[lang] = torch.tensor(entry["mean"], dtype=torch.float32)
        return pcr

    @classmethod
    def load(cls, path: str | os.PathLike) -> PrincipalComponentRemoval:
        return cls.from_state(read_model_json(path, dict))

    def __repr__(self) -> str:
        return f"PrincipalComponentRemoval(k={self.k}, center={self.center}, languages={self.languages})"
