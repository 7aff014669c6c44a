"""Prompts as Sentence Transformers applies them: the text ``encode`` puts in front of every sentence,
its length in tokens, and the pooler leaving it out (``Pooling(include_prompt=False)``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .poolers import Pooler

__all__ = ["apply_prompt", "pooled_prompt", "resolve_prompt"]


def resolve_prompt(declared: dict[str, Any], prompt: str | None, prompt_name: str | None) -> str | None:
    """The prompt text ``encode`` prepends: ``prompt``, else ``prompts[prompt_name]``, else the default
    prompt, else none; ``declared``: ``EncoderConfig.sentence_transformers`` (``{}``: no prompts)."""
    prompts = declared.get("prompts") or {}
    if prompt is not None:
        return prompt
    if prompt_name is not None:
        if prompt_name not in prompts:
            raise ValueError(
                f"prompt_name {prompt_name!r} is not one of the model's prompts ({', '.join(prompts) or 'none'})"
            )
        return prompts[prompt_name]
    default = declared.get("default_prompt_name")
    return prompts.get(default) if default else None


def apply_prompt(
    tokenizer,
    declared: dict[str, Any],
    sentences: Sequence[str],
    prompt: str | None = None,
    prompt_name: str | None = None,
) -> tuple[list[str], int | None]:
    """``(sentences with the prompt in front, the prompt's length in tokens or None)``; the length, without
    a trailing special token, is what ``Pooling(include_prompt=False)`` leaves out."""
    text = resolve_prompt(declared, prompt, prompt_name)
    if not text:
        return list(sentences), None
    ids = tokenizer(text)["input_ids"]
    length = len(ids) - int(bool(ids) and ids[-1] in set(tokenizer.all_special_ids))
    return [text + s for s in sentences], length


@contextmanager
def pooled_prompt(pooler: Pooler, length: int | None) -> Iterator[None]:
    """Context: the pooler leaves out ``length`` prompt tokens (poolers without prompt support ignore it)."""
    before = pooler.prompt_length
    pooler.prompt_length = length
    try:
        yield
    finally:
        pooler.prompt_length = before
