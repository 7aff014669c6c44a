"""The registry of inference model types: which class reads a saved directory.

A saved directory names its type in ``unisent_model.json`` (``{"type": "gaussian", "class_path":
"unisent.models.gaussian.GaussianEncoder"}``). ``saved_model_class`` looks the type up in the
registry, or its class path among the registered classes (``unisent.io.registry``): a class path
is never imported, so a third-party type loads when its module was imported first (an entry point of
``unisent.plugins``, ``--import MODULE``, or the user's own ``import``). Directories written before the
record existed are recognised by each registered type's ``is_saved_in`` (their marker files); anything
else loads as the default type ``encoder`` (the plain [`Encoder`][unisent.encoders.Encoder]: a unisent encoder
directory, a Hugging Face model, a Sentence Transformers export).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from ..io.model_files import check_model_directory, read_model_json
from ..io.registry import RegistryError, qualified_name, register_class, resolve, subclasses
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
    """Class decorator: register an [`InferenceModel`][unisent.inference.InferenceModel] subclass as the model type
    ``name``.

    ``name`` is written to every directory the class saves and is what ``unisent.load`` dispatches on,
    so it must stay the same when the class moves between modules.

    Raises:
        TypeError: the class is not an [`InferenceModel`][unisent.inference.InferenceModel] subclass.
        ValueError: another class is registered under ``name``.
    """
    if not name or not isinstance(cast(object, name), str):  # checked for untyped callers (a bare @register_model)
        raise ValueError(f"a model type needs a non-empty name, got {name!r}")

    def decorate(cls: M) -> M:
        register_class(_MODELS, name, cls, InferenceModel, "model type").model_type = name
        return cls

    return decorate


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
    record = read_model_json(record_file)  # size and depth bounded; malformed: one line naming the file
    if not isinstance(record, dict):
        raise ValueError(f"{record_file}: expected a JSON object with 'type' and 'class_path'")
    fields = cast("dict[str, Any]", record)  # JSON values
    name, class_path = fields.get("type"), fields.get("class_path")
    if isinstance(name, str) and name in _MODELS:
        return _MODELS[name]
    if class_path is None:
        raise RegistryError(
            f"{record_file}: type {name!r} is not a registered model type (registered: "
            f"{', '.join(sorted(_MODELS))}) and the record names no class_path; nothing was imported"
        )
    # through the closed registry: a class path is found among the registered types, never imported
    table = {qualified_name(cls): cls for cls in _MODELS.values()}
    table.update({k: v for k, v in subclasses(InferenceModel).items() if k not in table})
    return resolve(class_path, table, source=str(record_file), field="class_path", what="model type")


def saved_model_class(directory: str | os.PathLike[str]) -> type[InferenceModel]:
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
    [`Encoder`][unisent.encoders.Encoder], registered when [`unisent.encoders`][unisent.encoders] is imported)."""
    try:
        return _MODELS[DEFAULT_TYPE]
    except KeyError:
        raise RuntimeError(
            f"no model type {DEFAULT_TYPE!r} is registered: import unisent.encoders (unisent.load does)"
        ) from None


def load_saved(model: str | os.PathLike[str]) -> InferenceModel:
    """A saved directory as the registered type ``saved_model_class`` finds, or a preset name or hub id
    as the default type; in eval mode. Training checkpoints are refused: reading one rebuilds the run's
    objectives, which only ``unisent.load`` (above the training layer) does.

    A directory is checked first ([`check_model_directory`][unisent.io.check_model_directory]: regular files
    only, no link out of it, its JSON and safetensors headers well-formed), before any file of it is read.

    Raises:
        ValueError: ``model`` is a ``.ckpt`` file.
        unisent.io.model_files.ModelFileError: a file of the directory is refused (one line naming it).
    """
    path = Path(model).expanduser()
    if path.suffix == ".ckpt":
        raise ValueError(
            f"{model}: a training checkpoint; load it with unisent.load({str(model)!r}) and pass the loaded model"
        )
    if path.is_dir():
        check_model_directory(path)
    loaded = (
        saved_model_class(path).from_pretrained(path) if path.is_dir() else default_model_class().from_name(str(model))
    )
    return loaded.eval()
