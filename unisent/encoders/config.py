"""What an encoder is built from: [`EncoderConfig`][unisent.encoders.EncoderConfig] and the names of the files an
encoder saves beside its backbone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .poolers import PoolerName, PoolerPath, RegisteredPoolerName, pooler_class

__all__ = ["POOLER_WEIGHTS", "UNISENT_CONFIG", "EncoderConfig"]

#: unisent's settings of a saved encoder (``EncoderConfig`` as JSON)
UNISENT_CONFIG = "unisent_encoder.json"
#: the pooler's weights (poolers with parameters)
POOLER_WEIGHTS = "pooler.pt"


@dataclass
class EncoderConfig:
    """Which backbone to load and how to pool it.

    Plain data: building one checks the values and reads nothing; a field left unset (``None``, ``0``)
    is filled in when the encoder is built ([`resolve_encoder_config`][unisent.encoders.resolve_encoder_config];
    ``Encoder.config`` is the resolved copy).

    Attributes:
        model: a preset name (``minilm-l6``, ``bert-base-uncased``, ...), a local model directory or a
            Hugging Face hub id.
        pooler: ``cls``, ``cls_mlp``, ``cls_mlp_train_only``, ``mean``, ``max``, ``avg_first_last``, a
            pooler's dotted class path, or any name registered with ``register_pooler`` (docs/plugins.md);
            unset for the preset's default (``cls`` for a plain directory or hub id).
        max_length: maximum tokens per sentence in training; 0 for the preset's default (32 otherwise).
        inference_max_length: maximum tokens per sentence of the model a run leaves (``<run>/encoder``,
            its ``.ckpt``, ``evaluate``/``encode``, exports); unset: the backbone's own limit (256 for
            ``minilm-l6``, 512 for BERT: ``EncoderModel.native_max_length``), not ``max_length``, which
            only truncates the training data.
        attn_implementation: attention kernel passed to ``from_pretrained`` (``sdpa`` or ``eager``);
            ``sdpa``, the default, falls back to the model's own (eager) for an architecture without
            SDPA support (MPNet), saying so once; any other value is used as given or fails clearly.
        dropout: if set, overrides the backbone's hidden and attention dropout probabilities.
        unpad: skip padding tokens inside BERT-family backbones (``unisent.encoders.packed``; same result).
        normalize: L2-normalise the embeddings of ``encode`` as the model's last step (an exported
            ``Normalize``); unset for the preset's setting (true for ``minilm-l6``), false otherwise.
            Inference only: training losses and heads see the pooler's vectors (``encode_pooled``).
        similarity: Sentence Transformers' ``similarity_fn_name``, what an export declares and MTEB
            uses; unset: the Sentence Transformers model's own, else ``cosine``.
        sentence_transformers: what a Sentence Transformers ``model`` declares beyond its backbone
            (``unisent.encoders.st_files.read_sentence_transformers``); read when unset and no pooler
            is given, and recorded with the encoder. ``{}`` for a plain Hugging Face model.
    """

    model: str = "minilm-l6"
    pooler: PoolerName | PoolerPath | RegisteredPoolerName | None = None
    max_length: int = 0
    inference_max_length: int | None = None
    attn_implementation: str = "sdpa"
    dropout: float | None = None
    unpad: bool = True
    normalize: bool | None = None
    similarity: Literal["cosine", "dot", "euclidean", "manhattan"] | None = None
    sentence_transformers: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Check the values given; unset ones stay unset."""
        if self.normalize is not None and not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be true or false, got {self.normalize!r}")
        if self.pooler:
            self.pooler = str(self.pooler)  # a plain string (the parser may give a str subclass)
            pooler_class(self.pooler)  # a clear error for an unknown pooler (it lists the registered ones)
        if (self.max_length or 0) < 0:
            raise ValueError(f"max_length must be positive, got {self.max_length}")
        if self.inference_max_length is not None and (
            isinstance(self.inference_max_length, bool)
            or not isinstance(self.inference_max_length, int)
            or self.inference_max_length < 1
        ):
            raise ValueError(
                f"inference_max_length must be a positive number of tokens (or unset for the backbone's "
                f"own limit), got {self.inference_max_length!r}"
            )
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
