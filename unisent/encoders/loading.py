"""Resolve a model name (preset, local directory or hub id) and load backbone and tokenizer."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from ..io.model_files import ModelFileError, check_fits, check_model_directory, directory_weight_shapes, looks_like_path
from .presets import PRESETS, resolve_preset_path

__all__ = ["ModelNotAvailableError", "load_backbone", "load_tokenizer", "resolve_model_location"]


class ModelNotAvailableError(OSError):
    """A hub id could not be loaded (offline, or not in the local cache)."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "true", "yes", "on"}


def resolve_model_location(model: str) -> str:
    """Map ``model`` to what ``from_pretrained`` takes: a preset's location, a directory (checked by
    [`check_model_directory`][unisent.io.check_model_directory] first) or a hub id. A path must exist."""
    if model in PRESETS:
        location = resolve_preset_path(PRESETS[model])
        if os.path.isdir(location):
            check_model_directory(location)
        return location
    expanded = os.path.expanduser(model)
    if os.path.isdir(expanded):
        check_model_directory(expanded)
        return expanded
    if looks_like_path(model):
        raise FileNotFoundError(
            f"model {model!r} does not exist (it looks like a local path, so the hub is not asked); "
            f"give a directory with config.json, a .ckpt file, a preset ({', '.join(PRESETS)}) or a Hugging Face hub id"
        )
    return model


_REACHABLE: dict[str, bool] = {}


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection to ``HF_ENDPOINT`` per process (at most ``timeout`` s; assumed reachable behind
    a proxy): unreachable means the local cache only, instead of huggingface_hub's ~23 s of retries."""
    from urllib.parse import urlparse

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if endpoint not in _REACHABLE:
        import socket

        url = urlparse(endpoint)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout).close()
            _REACHABLE[endpoint] = True
        except OSError:
            _REACHABLE[endpoint] = False
    return _REACHABLE[endpoint]


def _hub_kwargs(location: str) -> dict:
    """``trust_remote_code=False`` (a model's own code is never run, nor asked about on stdin), and
    ``local_files_only=True`` for a hub id when the hub cannot be reached (no retries)."""
    if Path(location).is_dir() or _offline() or _hub_reachable():
        return {"trust_remote_code": False}
    return {"trust_remote_code": False, "local_files_only": True}


def _not_available(model: str, err: Exception) -> ModelNotAvailableError:
    """What to raise for ``err`` of loading ``model``: for a local directory ``err`` itself (raised here: its own
    message names the file), else that the hub could not give it."""
    if Path(model).is_dir():
        raise err
    if _offline():
        why = "HF_HUB_OFFLINE is set"
    elif _REACHABLE.get(os.environ.get("HF_ENDPOINT", "https://huggingface.co")) is False:
        why = "the hub could not be reached and it is not in the local cache"
    else:
        why = "the hub could not be reached or has no such model"
    return ModelNotAvailableError(
        f"could not load {model!r}: it is not a local directory nor a preset, and {why} ({type(err).__name__}).\n"
        f"Download it where you have internet, e.g. `huggingface-cli download {model} --local-dir DIR`, "
        f"then pass the directory (`model: DIR` in YAML, `--model DIR` on the command line), "
        f"or use a packaged preset: {', '.join(p for p in PRESETS if PRESETS[p].model.startswith('package:'))}."
    )


#: the default attention kernel: SDPA where the architecture supports it, else the model's own default
DEFAULT_ATTENTION = "sdpa"


def _sdpa_unsupported(err: Exception) -> bool:
    return isinstance(err, ValueError) and "scaled_dot_product_attention" in str(err)


def _about_attention(err: Exception) -> bool:
    """transformers' refusal of an attention implementation (or of its missing package, flash-attn)."""
    text = str(err).lower()
    return isinstance(err, ImportError) or "attn" in text or "attention" in text


def load_backbone(location: str, *, attn_implementation: str = DEFAULT_ATTENTION, config_overrides: dict | None = None):
    """Load a Hugging Face ``AutoModel`` from a directory or hub id, failing clearly when offline.
    ``attn_implementation``: as ``EncoderConfig.attn_implementation``."""
    from transformers import AutoConfig, AutoModel

    try:
        hub = _hub_kwargs(location)
        config = AutoConfig.from_pretrained(location, **hub, **(config_overrides or {}))
    except (OSError, ValueError) as err:
        raise _not_available(location, err) from err
    if Path(location).is_dir():
        check_backbone_sizes(location, config)
    try:
        return AutoModel.from_pretrained(location, config=config, attn_implementation=attn_implementation, **hub)
    except (ImportError, ValueError) as err:
        if attn_implementation == DEFAULT_ATTENTION and _sdpa_unsupported(err):
            _fallback_note(location, getattr(config, "model_type", "?"))
            return AutoModel.from_pretrained(location, config=config, attn_implementation=None, **hub)
        if attn_implementation != DEFAULT_ATTENTION and _about_attention(err):
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"encoder.attn_implementation={attn_implementation!r} cannot be used with {location} "
                f"({getattr(config, 'model_type', '?')}): {first} Use 'sdpa' (the default: the model's own "
                f"attention where SDPA is not supported) or 'eager'."
            ) from err
        if isinstance(err, ImportError):
            raise
        raise _not_available(location, err) from err
    except OSError as err:
        raise _not_available(location, err) from err


def check_backbone_sizes(location: str, config) -> None:
    """The sizes a directory's ``config.json`` declares against its weights' shapes, before allocation
    (``check_fits``; a quantised model is not checked)."""
    from transformers import AutoModel

    found = directory_weight_shapes(location)
    if found is None or getattr(config, "quantization_config", None):
        return
    weights_file, shapes = found
    check_fits(
        lambda: AutoModel.from_config(config, attn_implementation="eager", trust_remote_code=False),
        shapes,
        config_file=Path(location, "config.json"),
        settings=config.to_dict(),
        weights_file=weights_file,
    )


@functools.cache
def _fallback_note(location: str, model_type: str) -> None:
    """Say once per model that it runs with its own default attention, not SDPA."""
    print(
        f"unisent: {model_type} ({location}) does not support SDPA attention in this transformers version: "
        f"using the model's own default (eager); set encoder.attn_implementation to choose",
        file=sys.stderr,
    )


def load_tokenizer(location: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location, **_hub_kwargs(location))
    except (OSError, ValueError) as err:
        raise _not_available(location, err) from err
    except Exception as err:  # tokenizers' own errors (a tokenizer.json it cannot read) are plain Exceptions
        if not Path(location).is_dir():
            raise
        files = ", ".join(n for n in ("tokenizer.json", "tokenizer_config.json") if Path(location, n).exists())
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        message = f"{location}: its tokenizer files ({files or 'none'}) cannot be read: {first:.300}"
        raise ModelFileError(message) from None
