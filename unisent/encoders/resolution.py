"""An [`EncoderConfig`][unisent.encoders.EncoderConfig] with every unset field filled in from the preset or the model's
own Sentence Transformers files: the step that reads, taken when the [`Encoder`][unisent.encoders.Encoder] is built (its
``config``, what ``save_pretrained`` and a checkpoint record). Resolving a resolved config changes nothing.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace

from .config import EncoderConfig
from .presets import PRESETS, Preset
from .st_files import SentenceTransformersPooler, read_sentence_transformers, split_normalize

__all__ = ["resolve_encoder_config"]

log = logging.getLogger(__name__)


def resolve_encoder_config(config: EncoderConfig) -> EncoderConfig:
    """A copy of ``config`` with every unset field filled in: from a non-preset model's Sentence
    Transformers files when no pooler is named (``sentence_transformers_defaults``), then the preset,
    then ``cls``, no normalisation, 32 tokens, ``cosine``. ``ValueError`` for a bad setting or pooler."""
    preset = PRESETS.get(config.model)
    config = replace(config)  # __post_init__ checks what was given
    sentence_transformers_defaults(config, preset)
    if config.similarity is None:
        config.similarity = "cosine"
    if not config.pooler:
        config.pooler = preset.pooler if preset else "cls"
    if config.normalize is None:
        config.normalize = preset.normalize if preset else False
    if not config.max_length:
        config.max_length = preset.max_length if preset else 32
    if config.max_length < 1:
        raise ValueError(f"max_length must be positive, got {config.max_length}")
    return config


def sentence_transformers_defaults(config: EncoderConfig, preset: Preset | None) -> None:
    """For a model that is no preset and has no pooler: fill ``config`` in place from its Sentence
    Transformers files (read unless recorded); a plain model says once that it is pooled with ``cls``."""
    if preset is not None or config.pooler:
        return
    if config.sentence_transformers is None:
        config.sentence_transformers = read_sentence_transformers(config.model)
    spec = config.sentence_transformers
    if not spec:
        plain_model_note(config.model)
        return
    chain, normalize = split_normalize(spec)
    config.sentence_transformers = spec = {**spec, "modules": chain}  # the pooler's; a last Normalize is normalize
    config.pooler = SentenceTransformersPooler.name
    if config.normalize is None:
        config.normalize = normalize
    if not config.max_length and spec.get("max_seq_length"):
        config.max_length = int(spec["max_seq_length"])
    if config.similarity is None:
        config.similarity = spec.get("similarity_fn_name") or "cosine"


@functools.cache
def plain_model_note(model: str) -> None:
    """Say once per model that a plain Hugging Face model (no ``modules.json``) is pooled with ``cls``."""
    log.warning(
        "unisent: %s has no modules.json (not a Sentence Transformers model): pooled with cls, the first "
        "token's state, at 32 tokens; set encoder.pooler (e.g. mean) and max_length to change",
        model,
    )
