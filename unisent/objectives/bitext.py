"""Bitext retrieval (BR): translation pairs ranked with a bidirectional additive margin softmax."""

from __future__ import annotations

from typing import Any

import torch

from ..losses.margin import additive_margin_softmax
from .objective import EncodeFn, Objective, encode_views

__all__ = ["BitextRetrieval"]

CITATION = (
    "Yang, Zhang, Cer, Darve and Kurzweil. Universal Sentence Representation Learning with Conditional Masked "
    "Language Model. EMNLP 2021 (bitext retrieval, Sec. 4.2); Yang et al. Improving Multilingual Sentence "
    "Embedding using Bi-directional Dual Encoder with Additive Margin Softmax. IJCAI 2019."
)


class BitextRetrieval(Objective):
    """Each source must retrieve its translation among the batch's targets, and vice versa.

    Records ``{"source", "target"}`` (``unisent data bitext``), pooled as CMLM's ``v``; the loss is
    [`additive_margin_softmax`][unisent.losses.additive_margin_softmax] (``L_s + L_t``) against the global batch. CMLM's
    multitask total ``L_cmlm + 0.2 L_br``: set ``weight: 0.2`` (stages: ``model.weight_schedule``).

    Args:
        margin: additive margin m (0.3 in the paper).
        scale: multiplies the logits (1 = the paper's inner products).
        normalize: compare L2-normalised vectors (AM-softmax's cosine form) instead of inner products.
        bidirectional: ``L_s + L_t`` (the paper) or ``L_s`` only.
    """

    name = "bitext"
    batch_keys = text_keys = ("source", "target")
    citation = CITATION

    def __init__(
        self,
        margin: float = 0.3,
        scale: float = 1.0,
        normalize: bool = False,
        bidirectional: bool = True,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        if margin < 0 or scale <= 0:
            raise ValueError(f"need margin >= 0 and scale > 0, got margin={margin}, scale={scale}")
        self.margin, self.scale, self.normalize, self.bidirectional = margin, scale, normalize, bidirectional

    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        return encode_views(encode, batch, self.text_keys)

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        source, target = views
        loss = additive_margin_softmax(
            source,
            target,
            margin=self.margin,
            scale=self.scale,
            normalize=self.normalize,
            bidirectional=self.bidirectional,
        )
        return {"retrieval": loss}
