"""The seam between data and objectives: the DataModule handles records by a [`BatchSchema`][unisent.data.BatchSchema]
without knowing any objective class."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["PREDICT_SCHEMA", "BatchSchema", "pad_batch"]


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, length: int | None = None):
    """Right-pad token id lists into ``(input_ids, attention_mask)`` of shape (batch, length)."""
    length = length or max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        attention_mask[row, : len(seq)] = 1
    return input_ids, attention_mask


@dataclass(frozen=True)
class BatchSchema:
    """The record fields a batch is built from, and how they are batched.

    Every [`Objective`][unisent.objectives.Objective] has one
    ([`Objective.schema`][unisent.objectives.Objective.schema], from its class attributes); ``unisent
    predict`` uses ``PREDICT_SCHEMA``.

    Attributes:
        batch_keys: record fields a batch needs (each record is checked for them).
        text_keys: the subset that is text: tokenised, and padded to one length per batch.
        optional_keys: fields that may be null in a record.
        max_length: token limit of the text fields; ``None``: the encoder's.
        needs_all_records: the objective builds state from all its training records before training
            (``Objective.setup_data``: EASE's entity vocabulary): its source cannot be streamed.
    """

    batch_keys: tuple[str, ...]
    text_keys: tuple[str, ...] = ()
    optional_keys: tuple[str, ...] = ()
    max_length: int | None = None
    needs_all_records: bool = False

    def __post_init__(self) -> None:
        for attr in ("text_keys", "optional_keys"):
            extra = sorted(set(getattr(self, attr)) - set(self.batch_keys))
            if extra:
                raise ValueError(f"BatchSchema.{attr} {extra} are not in batch_keys {list(self.batch_keys)}")

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Any]:
        """Batch tokenised records: text fields become ``{"input_ids", "attention_mask"}`` (batch, seq),
        all padded to one length so that an objective can stack several views into one forward pass;
        numeric fields become tensors and anything else a list."""
        batch: dict[str, Any] = {}
        if self.text_keys:
            length = max(len(f[k]) for f in features for k in self.text_keys)
            for key in self.text_keys:
                ids, mask = pad_batch([f[key] for f in features], pad_id, length)
                batch[key] = {"input_ids": ids, "attention_mask": mask}
        for key in [key for key in self.batch_keys if key not in self.text_keys]:
            values = [f[key] for f in features]
            batch[key] = torch.as_tensor(values) if isinstance(values[0], (int, float, bool)) else values
        return batch


#: The record schema of ``unisent predict``: one text field, tokenised and padded like training data.
PREDICT_SCHEMA = BatchSchema(batch_keys=("text",), text_keys=("text",))
