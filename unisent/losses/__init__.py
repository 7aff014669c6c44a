"""Losses on tensors only: they never take the model as an argument."""

from .distributed import gather_no_grad, gather_with_grad, rank_and_world
from .gaussian_kl import (
    gauss_cse_loss,
    gaussian_similarity_matrix,
    kl_diagonal,
    kl_matrix,
    symmetric_gaussian_similarity,
)
from .info_nce import info_nce
from .margin import additive_margin_softmax

__all__ = [
    "additive_margin_softmax",
    "gather_no_grad",
    "gather_with_grad",
    "gauss_cse_loss",
    "gaussian_similarity_matrix",
    "info_nce",
    "kl_diagonal",
    "kl_matrix",
    "rank_and_world",
    "symmetric_gaussian_similarity",
]
