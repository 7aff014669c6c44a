"""NLI fine-tuning with a softmax classifier on ``[u, v, |u - v|, u * v]`` (SBERT; CMLM Sec. 4.3)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..encoders.encoder import Encoder
from .objective import Objective, ObjectiveOutput, encode_views

if TYPE_CHECKING:
    from datasets import Dataset  # pyright: ignore[reportMissingTypeStubs]  # datasets ships no stubs

__all__ = ["NLIClassifier", "NLI_LABELS", "label_id"]

#: Label ids, in the order of MNLI/XNLI on the Hugging Face hub.
NLI_LABELS = ("entailment", "neutral", "contradiction")
_ALIASES = {"contradictory": "contradiction"}

CITATION = (
    "Yang et al. Universal Sentence Representation Learning with Conditional Masked Language Model. EMNLP 2021 "
    "(cross-lingual NLI fine-tuning, Sec. 4.3); Reimers and Gurevych. Sentence-BERT. EMNLP 2019."
)


def label_id(value: Any, where: str = "") -> int:
    """Map an NLI label (a name in any case, XNLI's ``contradictory``, 0-2 or its string) to 0 (entailment), 1
    (neutral) or 2 (contradiction).

    Raises:
        ValueError: anything else; the message names ``where`` (the record) and the value.
    """
    if isinstance(value, bool):
        value = None  # True/False are ints in Python, never a valid label
    elif isinstance(value, numbers.Integral) and 0 <= int(value) < len(NLI_LABELS):
        return int(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        text = _ALIASES.get(text, text)
        if text in NLI_LABELS:
            return NLI_LABELS.index(text)
        if text in ("0", "1", "2"):
            return int(text)
    place = f"{where}: " if where else ""
    raise ValueError(f"{place}field 'label' is {value!r}; expected one of {', '.join(NLI_LABELS)} or 0-2")


class NLIClassifier(Objective):
    """3-way NLI classification with the encoder updated (cross-lingual in the paper).

    Records ``{"premise", "hypothesis", "label"}`` (``unisent data nli-pairs``; labels as ``label_id``
    reads them, all checked when ``fit`` starts). ``Linear(4d -> 3)`` on ``[u, v, |u - v|, u * v]``,
    cross-entropy. Loss term ``classification``; metric ``accuracy``.

    Args:
        hidden_size: size of the pooled vector; 0 = taken from the encoder in
            [`setup_for`][unisent.objectives.NLIClassifier.setup_for].
    """

    name = "nli"
    batch_keys = ("premise", "hypothesis", "label")
    text_keys = ("premise", "hypothesis")
    citation = CITATION

    def __init__(
        self, hidden_size: int = 0, weight: float = 1.0, name: str | None = None, max_length: int | None = None
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        self.classifier = nn.Linear(4 * hidden_size, len(NLI_LABELS)) if hidden_size else None

    def setup_for(self, encoder: Encoder) -> None:
        """Create the classifier for ``encoder``."""
        if self.classifier is None:
            self.classifier = nn.Linear(4 * encoder.hidden_size, len(NLI_LABELS)).to(encoder.backbone.device)
            self._init_args["hidden_size"] = encoder.hidden_size

    def setup_data(self, dataset: Dataset) -> None:
        labels = cast(Iterable[object], dataset["label"])
        for i, value in enumerate(labels, 1):
            label_id(value, f"training record {i}")
        return None

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        batch = super().collate(features, pad_id)
        batch["label"] = self.labels(batch["label"])
        return batch

    @staticmethod
    def labels(values: Sequence[Any] | torch.Tensor) -> torch.Tensor:
        """Label names or ids -> a (batch,) long tensor of ids."""
        if isinstance(values, torch.Tensor):
            values = cast(list[Any], values.tolist())  # pyright: ignore[reportUnknownMemberType]  # torch: a bare list
        return torch.tensor([label_id(v, f"batch row {i}") for i, v in enumerate(values)], dtype=torch.long)

    def logits(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """(batch, d) premise and hypothesis vectors -> (batch, 3) logits."""
        if self.classifier is None:
            raise RuntimeError("NLIClassifier.logits needs the classifier: call setup_for(encoder) first")
        return self.classifier(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))

    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> ObjectiveOutput:
        self.setup_for(encoder)
        u, v = encode_views(encoder, batch, self.text_keys)
        labels = batch["label"]
        labels = (
            labels if isinstance(labels, torch.Tensor) and labels.dtype == torch.long else self.labels(labels)
        ).to(u.device)
        logits = self.logits(u, v).float()
        return ObjectiveOutput(
            terms={"classification": F.cross_entropy(logits, labels)},
            metrics={"accuracy": (logits.detach().argmax(-1) == labels).float().mean()},
        )
