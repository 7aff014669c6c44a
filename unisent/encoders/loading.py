"""Resolve a model name (preset, local directory or hub id) and load backbone and tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

from .presets import PRESETS, resolve_preset_path

__all__ = ["ModelNotAvailableError", "resolve_model_location", "load_backbone", "load_tokenizer"]


class ModelNotAvailableError(OSError):
    """A hub id could not be loaded (offline, or not in the local cache)."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes", "on"}


def resolve_model_location(model: str) -> str:
    """Map ``model`` to what ``from_pretrained`` takes: a preset's location, a directory or a hub id.

    A string that looks like a filesystem path (starts with ``/``, ``.`` or ``~``) must exist.
    """
    if model in PRESETS:
        return resolve_preset_path(PRESETS[model])
    expanded = os.path.expanduser(model)
    if os.path.isdir(expanded):
        return expanded
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        raise FileNotFoundError(
            f"model directory {model!r} does not exist; give a directory with config.json, "
            f"a preset ({', '.join(PRESETS)}) or a Hugging Face hub id"
        )
    return model


def _not_available(model: str, err: Exception) -> ModelNotAvailableError:
    why = "HF_HUB_OFFLINE is set" if _offline() else "the hub could not be reached or has no such model"
    return ModelNotAvailableError(
        f"could not load {model!r}: it is not a local directory nor a preset, and {why} ({type(err).__name__}).\n"
        f"Download it where you have internet, e.g. `huggingface-cli download {model} --local-dir DIR`, "
        f"then pass the directory (`model: DIR` in YAML, `--model DIR` on the command line), "
        f"or use a packaged preset: {', '.join(p for p in PRESETS if PRESETS[p].model.startswith('package:'))}."
    )


def load_backbone(location: str, *, attn_implementation: str = "sdpa", config_overrides: dict | None = None):
    """Load a Hugging Face ``AutoModel`` from a directory or hub id, failing clearly when offline."""
    from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(location, **(config_overrides or {}))
        return AutoModel.from_pretrained(location, config=config, attn_implementation=attn_implementation)
    except (OSError, ValueError) as err:
        if Path(location).is_dir():
            raise
        raise _not_available(location, err) from err


def load_tokenizer(location: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location)
    except (OSError, ValueError) as err:
        if Path(location).is_dir():
            raise
        raise _not_available(location, err) from err
