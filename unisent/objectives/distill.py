"""Embedding distillation to a frozen teacher (held by [`Frozen`][unisent.objectives.Frozen]): learning
without forgetting (Li and Hoiem, 2016), or another model's vectors as targets (Reimers and Gurevych, 2020)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F

from ..encoders.encoder import Encoder
from ..inference.base import InferenceModel, to_tensor
from .frozen import Frozen
from .objective import Objective, encode_views

__all__ = ["Distill"]

CITATION = (
    "Li and Hoiem. Learning without Forgetting. ECCV 2016, arXiv:1606.09282; Reimers and Gurevych. Making "
    "Monolingual Sentence Embeddings Multilingual using Knowledge Distillation. EMNLP 2020, arXiv:2004.09813"
)


class Distill(Objective):
    """The student's vector of each sentence regressed onto a frozen teacher's.

    Args:
        teacher: ``None`` (default): the starting encoder, frozen when the model is built (it holds the encoder
            near where it started); or anything ``unisent.load`` reads but a ``.ckpt``. A teacher with another
            vocabulary gets the sentences decoded from the student's ids.
        loss: ``mse`` (Reimers and Gurevych) or ``cosine`` (direction only, e.g. for a teacher of another scale).
        fields: the text fields of a record to distil (e.g. ``[anchor, positive]`` of a triple file).
    """

    name = "distill"
    citation = CITATION

    def __init__(
        self,
        teacher: str | None = None,
        loss: Literal["mse", "cosine"] = "mse",
        fields: Sequence[str] = ("text",),
        weight: float = 1.0,
        name: str | None = None,
        max_length: int | None = None,
    ) -> None:
        super().__init__(weight=weight, name=name, max_length=max_length)
        if loss not in ("mse", "cosine"):
            raise ValueError(f"Distill: loss must be 'mse' or 'cosine', got {loss!r}")
        fields = (fields,) if isinstance(fields, str) else tuple(fields)
        if not fields:
            raise ValueError("Distill: fields names no text field to distil")
        if teacher is not None and str(teacher).endswith(".ckpt"):
            raise ValueError(
                f"Distill: teacher {teacher!r} is a training checkpoint; export it first "
                "(unisent export RUN.ckpt --out DIR) or give the run's encoder/ folder"
            )
        self.teacher = teacher
        self.loss_kind = loss  # not `loss`: that is the in-batch hook's name
        self.batch_keys = self.text_keys = fields
        self._teacher: Frozen | None = None
        self._same_vocabulary = True

    # ------------------------------------------------------------------------------------ teacher
    def setup_for(self, encoder: Encoder) -> None:
        """Build the teacher once: a frozen copy of the encoder as it is now (no ``teacher``), or the
        model ``teacher`` names. This runs before a checkpoint's weights are loaded, so a resumed run
        gets the same teacher."""
        if self._teacher is not None:
            return
        if self.teacher is None:
            model = copy.deepcopy(encoder)
        else:
            from .. import models  # noqa: F401  # pyright: ignore[reportUnusedImport]  # registers every model type
            from ..inference.model_types import load_saved

            model = load_saved(self.teacher)
        student_dim = encoder.hidden_size
        teacher_dim = _dimension(model)
        if teacher_dim is not None and teacher_dim != student_dim and self.loss_kind == "mse":
            raise ValueError(
                f"Distill: the teacher {self.teacher!r} gives {teacher_dim}-dimensional vectors and the student "
                f"{student_dim}; MSE needs the same size (choose a teacher of size {student_dim})"
            )
        tokenizer = getattr(model, "tokenizer", None)
        self._same_vocabulary = (
            self.teacher is None
            or isinstance(model, Encoder)
            and tokenizer is not None
            and tokenizer.get_vocab() == encoder.tokenizer.get_vocab()
        )
        self._teacher = Frozen(model)
        self._student_tokenizer = encoder.tokenizer

    def targets(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The teacher's vectors (float32, no graph) of a batch of the student's token ids."""
        if self._teacher is None:
            raise RuntimeError("Distill.setup_for(encoder) was not called: the teacher is not built")
        if self._same_vocabulary:
            return self._teacher(ids, mask).float()
        # another vocabulary: the sentences themselves, as the student's tokenizer read them
        texts = self._student_tokenizer.batch_decode(ids, skip_special_tokens=True)  # pyright: ignore[reportUnknownMemberType]  # transformers: **kwargs untyped
        self._teacher.to(ids.device)
        with torch.no_grad():
            vectors = cast(InferenceModel, self._teacher.module).encode(texts, batch_size=len(texts))  # load_saved's
        return to_tensor(vectors, len(texts), "the teacher's encode").to(ids.device)

    # ------------------------------------------------------------------------------------ loss
    def forward(self, encoder: Encoder, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        keys = self.text_keys
        student = torch.cat(encode_views(encoder, batch, keys)).float()
        ids = torch.cat([batch[k]["input_ids"] for k in keys])
        mask = torch.cat([batch[k]["attention_mask"] for k in keys])
        target = self.targets(ids, mask)
        if self.loss_kind == "mse":
            return {"mse": F.mse_loss(student, target)}
        return {"cosine": (1 - F.cosine_similarity(student, target, dim=-1)).mean()}


def _dimension(model: torch.nn.Module) -> int | None:
    """The size of a model's vectors where it says, else None."""
    for attribute in ("embedding_dim", "hidden_size"):
        value = getattr(model, attribute, None)
        if isinstance(value, int):
            return value
    return None
