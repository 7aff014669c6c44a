"""Shared fixtures of the evaluation tests: the tiny data directory and deterministic fake models."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


class HashingModel:
    """A deterministic bag-of-words encoder: each lower-cased word adds +-1 to a hashed dimension.

    Records every ``encode`` call so that tests can check deduplication and caching.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []

    def _vector(self, sentence: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        vector[0] = 0.1  # keeps an empty sentence away from the zero vector
        for word in re.findall(r"\w+", sentence.lower()):
            code = zlib.crc32(word.encode("utf-8"))
            vector[code % self.dim] += 1.0 if (code >> 16) & 1 else -1.0
        return vector

    def encode(self, sentences: list[str], batch_size: int = 64, **kwargs) -> np.ndarray:
        self.calls.append(list(sentences))
        return np.stack([self._vector(s) for s in sentences])


class GaussianHashingModel(HashingModel):
    """Adds ``encode_gaussian``: mean from the hashing encoder, variance growing with sentence length."""

    def encode_gaussian(self, sentences: list[str], batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        mu = torch.as_tensor(self.encode(sentences, batch_size))
        lengths = torch.tensor([len(s.split()) for s in sentences], dtype=torch.float32)
        var = (0.5 + 0.1 * lengths)[:, None].expand(-1, self.dim).clone()
        return mu, var


@pytest.fixture
def data_dir() -> Path:
    return FIXTURE_DATA


@pytest.fixture
def model() -> HashingModel:
    return HashingModel()


@pytest.fixture
def gaussian_model() -> GaussianHashingModel:
    return GaussianHashingModel()
