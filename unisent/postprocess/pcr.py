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
import torch.nn.functional as F
from torch import nn

from ..encoders.encoder import EncoderWrapper

__all__ = ["INNER_DIR", "PCR_FILE", "PCREncoder", "PrincipalComponentRemoval", "fit_pcr"]

PCR_FILE = "pcr.json"
INNER_DIR = "model"  # the wrapped model, saved by its own save_pretrained
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
                raise ValueError(f"language {language!r}: need more than k={self.k} sentences and dimensions, got {n} x {dim}")
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
            raise KeyError(f"PCR was not fitted for language {language!r}; fitted: {', '.join(self.languages) or 'none'}")
        return self.components[language], self.means[language]

    # ------------------------------------------------------------------------------------ save/load
    def state(self) -> dict[str, Any]:
        return {
            "format": _FORMAT, "k": self.k, "center": self.center,
            "languages": {lang: {"components": self.components[lang].tolist(), "mean": self.means[lang].tolist()}
                          for lang in self.languages},
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted components as JSON (float32 values round-trip exactly)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.state()) + "\n", encoding="utf-8")
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
        return cls.from_state(json.loads(Path(path).read_text(encoding="utf-8")))

    def __repr__(self) -> str:
        return f"PrincipalComponentRemoval(k={self.k}, center={self.center}, languages={self.languages})"


class PCREncoder(EncoderWrapper):
    """A sentence encoder whose embeddings go through a per-language :class:`PrincipalComponentRemoval`.

    ``encode(sentences, language="de")`` embeds with the wrapped model, then removes German's
    components. ``language`` may also be a list (one per sentence); when it is omitted,
    ``default_language`` is used, or the only fitted language; otherwise it is an error.
    ``unisent.load(DIR)`` returns this model for a directory written by :meth:`save_pretrained`.

    Args:
        encoder: any model with ``encode(sentences, batch_size, ...)`` and ``save_pretrained``
            (an :class:`~unisent.Encoder` or an objective's inference model).
        pcr: the fitted post-processor.
        default_language: language used when ``encode`` is called without one (e.g. by ``unisent
            evaluate``).
    """

    def __init__(self, encoder: nn.Module, pcr: PrincipalComponentRemoval, default_language: str | None = None) -> None:
        super().__init__()
        if default_language is not None and default_language not in pcr.components:
            raise ValueError(f"default_language {default_language!r} is not fitted; fitted: {', '.join(pcr.languages)}")
        self.encoder = encoder
        self.pcr = pcr
        self.default_language = default_language

    def _language(self, language: str | Sequence[str] | None) -> str | Sequence[str]:
        if language is not None:
            return language
        if self.default_language is not None:
            return self.default_language
        if len(self.pcr.languages) == 1:
            return self.pcr.languages[0]
        raise ValueError(f"encode needs language=... (fitted: {', '.join(self.pcr.languages)}) or a default_language")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, language: str | None = None) -> torch.Tensor:
        """Token ids (batch, seq) -> post-processed embeddings (batch, dim)."""
        comps, mean = self.pcr._fitted(self._language(language))
        x = self.encoder(input_ids, attention_mask).float() - mean.to(input_ids.device)
        comps = comps.to(x.device)
        return x - (x @ comps.T) @ comps

    def encode(self, sentences: Sequence[str], batch_size: int = 64, *, language: str | Sequence[str] | None = None,
               normalize: bool = False, **kw) -> torch.Tensor:
        """Embed, remove the language's components, then (optionally) L2-normalise: float32 (n, dim)."""
        language = self._language(language)
        out = self.pcr.transform(self.encoder.encode(sentences, batch_size, **kw), language)
        return F.normalize(out, dim=-1) if normalize else out

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """``pcr.json`` (components and the default language) and the wrapped model in ``model/``
        (written by its own ``save_pretrained``, so any model ``unisent.load`` reads can be wrapped)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(directory / INNER_DIR)
        state = self.pcr.state() | {"default_language": self.default_language}
        (directory / PCR_FILE).write_text(json.dumps(state) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> PCREncoder:
        from .. import load

        directory = Path(directory)
        state = json.loads((directory / PCR_FILE).read_text(encoding="utf-8"))
        if state.get("inner") == ".":  # a sentence-transformers export: the encoder's files sit beside pcr.json
            from ..encoders import Encoder

            inner = Encoder.from_pretrained(directory)
        else:
            inner = load(str(directory / INNER_DIR))
        return cls(inner, PrincipalComponentRemoval.from_state(state), state.get("default_language"))

    @staticmethod
    def is_saved_in(directory: str | os.PathLike) -> bool:
        return Path(directory, PCR_FILE).is_file()


def fit_pcr(
    model: nn.Module,
    sentences_by_language: Mapping[str, Sequence[str]],
    k: int = 1,
    *,
    center: bool = False,
    batch_size: int = 64,
    default_language: str | None = None,
) -> PCREncoder:
    """Embed each language's sentences with ``model`` and fit PCR on them.

    Args:
        model: any model with ``encode`` (e.g. ``unisent.load(DIR)``).
        sentences_by_language: ``{language: [sentences]}``, a few hundred or more per language.
        k: components removed per language (the paper: 1).
        center: see :class:`PrincipalComponentRemoval`.
        batch_size: encoding batch size.
        default_language: see :class:`PCREncoder`.

    Returns:
        A :class:`PCREncoder`; ``save_pretrained(DIR)`` it and load it back with ``unisent.load(DIR)``.
    """
    embeddings = {lang: model.encode(list(sents), batch_size) for lang, sents in sentences_by_language.items()}
    pcr = PrincipalComponentRemoval(k=k, center=center).fit(embeddings)
    return PCREncoder(model, pcr, default_language)
