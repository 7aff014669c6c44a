"""The registry of inference model types: which class reads a saved directory.

A saved directory names its type in ``unisent_model.json`` (``{"type": "gaussian", "class_path":
"unisent.models.gaussian.GaussianEncoder"}``). :func:`saved_model_class` looks the type up in the
registry; a type that is not registered yet is imported from its class path (importing the module of a
third-party package registers it), so ``unisent.load`` reads a user's own model type without any edit
of unisent. Directories written before the record existed are recognised by each registered type's
``is_saved_in`` (their marker files); anything else loads as the default type ``encoder`` (the plain
:class:`~unisent.encoders.Encoder`: a unisent encoder directory, a Hugging Face model, a Sentence
Transformers export).

A type registers when its module is imported: this layer imports no model class, so that every layer
above can build on it. Loading is not done here: ``unisent.load`` (:mod:`unisent._loader`) imports every
type of unisent, and reads training checkpoints too; :func:`load_saved` is the part of it that the model
layer itself uses (a model made of other saved models), over the types registered so far.

A third-party package registers its type once, next to the class::

    from unisent.models import EncoderWrapper, register_model

    @register_model("my-head")
    class MyHeadEncoder(EncoderWrapper):
        ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from torch import nn

from ..io import import_object
from .base import MODEL_RECORD, InferenceModel

__all__ = [
    "DEFAULT_TYPE",
    "default_model_class",
    "load_saved",
    "model_class",
    "register_model",
    "registered_models",
    "saved_model_class",
]

M = TypeVar("M", bound=type)

_MODELS: dict[str, type[InferenceModel]] = {}
#: The type a directory without a record or marker is loaded as.
DEFAULT_TYPE = "encoder"


def register_model(name: str) -> Callable[[M], M]:
    """Class decorator: register an :class:`InferenceModel` subclass as the model type ``name``.

    ``name`` is written to every directory the class saves and is what ``unisent.load`` dispatches on,
    so it must stay the same when the class moves between modules.

    Raises:
        TypeError: the class is not an :class:`InferenceModel` subclass.
        ValueError: another class is registered under ``name``.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"a model type needs a non-empty name, got {name!r}")

    def decorate(cls: M) -> M:
        if not (isinstance(cls, type) and issubclass(cls, InferenceModel)):
            raise TypeError(f"{cls!r} is not an InferenceModel subclass; only inference models can be registered")
        previous = _MODELS.get(name)
        if previous is not None and _qualified(previous) != _qualified(cls):
            raise ValueError(f"model type {name!r} is already registered for {_qualified(previous)}")
        cls.model_type = name
        _MODELS[name] = cls
        return cls

    return decorate


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def registered_models() -> dict[str, type[InferenceModel]]:
    """``{type name: class}`` of every registered model type (unisent's own included)."""
    return dict(_MODELS)


def model_class(name: str) -> type[InferenceModel]:
    """The class registered as ``name``.

    Raises:
        KeyError: no such type (the message lists the registered ones).
    """
    try:
        return _MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model type {name!r}; registered: {', '.join(sorted(_MODELS))}") from None


def _from_record(record_file: Path) -> type[InferenceModel]:
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{record_file}: not a readable model record ({err})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{record_file}: expected a JSON object with 'type' and 'class_path'")
    name, class_path = record.get("type"), record.get("class_path")
    if name in _MODELS:
        return _MODELS[name]
    if not class_path:
        raise ValueError(
            f"{record_file}: model type {name!r} is not registered (registered: "
            f"{', '.join(sorted(_MODELS))}) and the record names no class_path"
        )
    try:
        cls = import_object(class_path, "model class")  # importing its module registers it
    except ValueError as err:
        raise ValueError(f"{record_file}: model type {name!r}: {err}") from None
    if name in _MODELS:
        return _MODELS[name]
    if not (isinstance(cls, type) and issubclass(cls, InferenceModel)):
        raise ValueError(f"{record_file}: class_path {class_path!r} is not an unisent InferenceModel")
    return cls


def saved_model_class(directory: str | os.PathLike) -> type[InferenceModel]:
    """The model type saved in ``directory``: from its ``unisent_model.json``, else the first registered
    type whose ``is_saved_in`` recognises the files, else the plain encoder."""
    directory = Path(directory)
    record = directory / MODEL_RECORD
    if record.is_file():
        return _from_record(record)
    for name, cls in _MODELS.items():
        if name != DEFAULT_TYPE and cls.is_saved_in(directory):
            return cls
    return default_model_class()


def default_model_class() -> type[InferenceModel]:
    """The class a directory without a record or marker, a preset name or a hub id is loaded as (the plain
    :class:`~unisent.encoders.Encoder`, registered when :mod:`unisent.encoders` is imported)."""
    try:
        return _MODELS[DEFAULT_TYPE]
    except KeyError:
        raise RuntimeError(
            f"no model type {DEFAULT_TYPE!r} is registered: import unisent.encoders (unisent.load does)"
        ) from None


def load_saved(model: str | os.PathLike) -> nn.Module:
    """A saved directory as the registered type :func:`saved_model_class` finds, or a preset name or hub id
    as the default type; in eval mode. Training checkpoints are refused: reading one rebuilds the run's
    objectives, which only ``unisent.load`` (above the training layer) does.

    Raises:
        ValueError: ``model`` is a ``.ckpt`` file.
    """
    path = Path(model).expanduser()
    if path.suffix == ".ckpt":
        raise ValueError(
            f"{model}: a training checkpoint; load it with unisent.load({str(model)!r}) and pass the loaded model"
        )
    loaded = (
        saved_model_class(path).from_pretrained(path) if path.is_dir() else default_model_class().from_name(str(model))
    )
    return loaded.eval()
