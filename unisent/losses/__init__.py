"""Losses on tensors only: they never take the model as an argument."""

from .distributed import gather_with_grad, label_offset, rank_and_world
from .info_nce import cosine_logits, info_nce

__all__ = ["cosine_logits", "gather_with_grad", "info_nce", "label_offset", "rank_and_world"]
