"""SimCSE (Gao et al., 2021): unsupervised dropout views and supervised NLI triples."""

from __future__ import annotations

from typing import Any

import torch

from ..losses import info_nce
from .objective import EncodeFn, Objective, encode_views

__all__ = ["SimCSE"]

CITATION = (
    "Gao, Yao and Chen. SimCSE: Simple Contrastive Learning of Sentence Embeddings. EMNLP 2021. "
    "https://aclanthology.org/2021.emnlp-main.552"
)


class SimCSE(Objective):
    """Contrastive learning of sentence embeddings.

    Unsupervised (default): records ``{"text"}``, encoded twice in one pass (views differing only by
    dropout); logits ``cos(z_i, z'_j) / tau``, label ``i``. Supervised: records ``{"anchor", "positive",
    "negative"}`` (NLI premise, entailment, contradiction); each anchor's logits run over all positives
    and hard negatives of the batch.

    Args:
        supervised: train on NLI triples instead of single sentences.
        temperature: tau (0.05 in the paper).
        hard_negative_weight: log-weight of the own hard negative (supervised only; 0 = off).
        use_hard_negatives: supervised only; ``False`` trains on (anchor, positive) pairs.
        symmetric: also the positive -> anchor direction.
    """

    name = "simcse"
    citation = CITATION

    def __init__(
        self,
        supervised: bool = False,
        temperature: float = 0.05,
        hard_negative_weight: float = 0.0,
        use_hard_negatives: bool = True,
        symmetric: bool = False,
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.supervised = supervised
        self.temperature = temperature
        self.hard_negative_weight = hard_negative_weight
        self.use_hard_negatives = use_hard_negatives
        self.symmetric = symmetric
        if supervised:
            keys = ("anchor", "positive", "negative") if use_hard_negatives else ("anchor", "positive")
        else:
            keys = ("text",)
        self.batch_keys = self.text_keys = keys

    def embed(self, encode: EncodeFn, batch: dict[str, Any]) -> list[torch.Tensor]:
        """Unsupervised: the two dropout views of ``text``; supervised: one view per field of the triple."""
        return encode_views(encode, batch, self.text_keys, repeat=1 if self.supervised else 2)

    def loss(self, views: list[torch.Tensor], batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        negatives = views[2] if self.supervised and self.use_hard_negatives else None
        loss = info_nce(
            views[0],
            views[1],
            hard_negatives=negatives,
            temperature=self.temperature,
            hard_negative_weight=self.hard_negative_weight if negatives is not None else 0.0,
            symmetric=self.symmetric,
        )
        return {"contrastive": loss}
