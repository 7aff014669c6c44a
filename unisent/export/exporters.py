"""Exporters and their registry (examples: docs/export.md, docs/plugins.md).

The built-in formats are written by the model itself: every [`InferenceModel`][unisent.inference.InferenceModel]
declares its ``export_formats`` and how it writes, describes and checks each; ``formats`` adapts those declarations to
[`Exporter`][unisent.export.Exporter]. Lookup order for a model and a format: an exporter registered for the model's
exact class ([`register_exporter`][unisent.export.register_exporter]; a subclass reuses its parent's with
``register_exporter(Subclass)(ParentExporter)``), then the model's own declaration, then a format for any model
([`register_export_format`][unisent.export.register_export_format])."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from torch import nn

from ..io.registry import register_class

__all__ = [
    "PROBE_SENTENCES",
    "Exporter",
    "NoExporterError",
    "available_formats",
    "check_format",
    "exporter_for",
    "max_length_context",
    "model_format",
    "register_export_format",
    "register_exporter",
    "registered",
]

E = TypeVar("E", bound=type["Exporter"])
#: the models an exporter writes (``Exporter[InferenceModel]`` for the built-in formats)
M = TypeVar("M", bound=nn.Module)

_EXPORTERS: dict[str, dict[type, type[Exporter]]] = {}
#: format -> the exporter that writes any InferenceModel declaring that format (see formats.py)
_MODEL_FORMATS: dict[str, type[Exporter]] = {}
#: format -> the exporter that writes any model in that format (register_export_format: plugins' formats)
_ANY_MODEL_FORMATS: dict[str, type[Exporter]] = {}

#: Sentences an export is checked on: short, long (truncated at any usual max length), non-English.
PROBE_SENTENCES: tuple[str, ...] = (
    "A man is playing a guitar.",
    "Two dogs run across the grass in the park while a child throws a ball for them to catch again.",
    "ok",
    "The quick brown fox jumps over the lazy dog, " * 12,
    "Ein Mann spielt Gitarre.",
)


class NoExporterError(TypeError):
    """No exporter is registered for this model class in this format."""


class Exporter(ABC, Generic[M]):
    """Writes one model type in one format and documents how to use the result (``format``: the
    ``--format`` name; ``library_name``: the library that loads it; ``tags``: extra model card tags)."""

    format: ClassVar[str]
    library_name: ClassVar[str]
    pipeline_tag: ClassVar[str] = "feature-extraction"
    tags: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def write(self, model: M, out: Path) -> None:
        """Write ``model`` into the existing, empty directory ``out`` (the model card excluded)."""

    @abstractmethod
    def facts(self, model: M) -> list[tuple[str, str]]:
        """``(label, value)`` rows of the model card's summary table (architecture, pooling, ...)."""

    @abstractmethod
    def usage(self, model: M) -> str:
        """Markdown of the model card's usage section: how to load the files and pool the outputs."""

    def verify(self, model: M, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        """Re-load the written files as a user would and compare with ``model.encode``: ``(max absolute
        difference or None when not checked, how it was checked)``."""
        return None, "no check available for this format"

    def model_tags(self, model: M) -> tuple[str, ...]:
        """The model card's tags for ``model`` (default: ``tags``)."""
        return self.tags


def register_exporter(model_type: type) -> Callable[[E], E]:
    """Class decorator: register an [`Exporter`][unisent.export.Exporter] subclass for ``model_type`` and its
    ``format``."""

    def decorate(exporter_cls: E) -> E:
        if not (isinstance(exporter_cls, type) and issubclass(exporter_cls, Exporter)):
            raise TypeError(f"{exporter_cls!r} is not an Exporter subclass")
        _EXPORTERS.setdefault(exporter_cls.format, {})[model_type] = exporter_cls
        return exporter_cls

    return decorate


def model_format(exporter_cls: E) -> E:
    """Class decorator: ``exporter_cls`` writes its ``format`` for every
    [`InferenceModel`][unisent.inference.InferenceModel] that lists the format in ``export_formats``."""
    _MODEL_FORMATS[exporter_cls.format] = exporter_cls
    return exporter_cls


def register_export_format(exporter_cls: E) -> E:
    """Class decorator: ``exporter_cls`` writes its ``format`` for any model (``--format`` takes the name
    once its module is imported); a ``ValueError`` when another exporter or a built-in has the name."""
    return register_class(
        _ANY_MODEL_FORMATS, exporter_cls.format, exporter_cls, Exporter, "export format", also=_MODEL_FORMATS
    )


def available_formats() -> list[str]:
    """The format names, sorted."""
    return sorted(set(_EXPORTERS) | set(_MODEL_FORMATS) | set(_ANY_MODEL_FORMATS))


def max_length_context(model: Any, max_length: int | None, base_model: str | None = None) -> Any:
    """``model.export_max_length(max_length, base_model)``: the context that tokenises up to the length an export
    (or ``encode_file``) keeps; a ``ValueError`` for a length given to a model without one."""
    choose = getattr(model, "export_max_length", None)
    if choose is not None:
        return choose(max_length, base_model)
    if max_length is not None:
        raise ValueError(f"{type(model).__name__} has no maximum sequence length to set")
    return nullcontext(None)


def check_format(fmt: str) -> None:
    """Raise ``ValueError`` (one line: the registered names and the closest) for an unknown format."""
    if fmt in available_formats():
        return
    import difflib

    close = difflib.get_close_matches(str(fmt), available_formats(), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ValueError(
        f"unknown export format {fmt!r}{hint} (formats: {', '.join(available_formats())}; a plugin adds one with "
        f"unisent.export.register_export_format, see docs/plugins.md)"
    )


def registered() -> dict[str, list[str]]:
    """``{format: [model class names]}`` of registered exporters and declaring model types (for messages)."""
    from ..inference import registered_models

    table: dict[str, set[str]] = {fmt: {cls.__name__ for cls in classes} for fmt, classes in _EXPORTERS.items()}
    for cls in registered_models().values():
        for fmt in cls.export_formats:
            if fmt in _MODEL_FORMATS:
                table.setdefault(fmt, set()).add(cls.__name__)
    for fmt in _ANY_MODEL_FORMATS:
        table.setdefault(fmt, set()).add("any model")
    return {fmt: sorted(names) for fmt, names in sorted(table.items())}


def exporter_for(model: Any, fmt: str) -> Exporter:
    """An exporter instance for ``model`` and the format ``fmt``, in the module docstring's lookup order; a
    ``ValueError`` for an unknown format, a [`NoExporterError`][unisent.export.NoExporterError] when none fits the
    model."""
    from ..inference import InferenceModel

    check_format(fmt)
    exporter_cls = _EXPORTERS.get(fmt, {}).get(type(model))
    if exporter_cls is not None:
        return exporter_cls()
    if fmt in _MODEL_FORMATS and isinstance(model, InferenceModel) and fmt in type(model).export_formats:
        return _MODEL_FORMATS[fmt]()
    if fmt in _ANY_MODEL_FORMATS:
        return _ANY_MODEL_FORMATS[fmt]()
    name = type(model).__name__
    declared = (
        f"{name} declares the formats {list(type(model).export_formats)} (export_formats)"
        if isinstance(model, InferenceModel)
        else f"{name} is not a unisent InferenceModel"
    )
    raise NoExporterError(
        f"no {fmt!r} exporter is registered for {name} ({declared}; registered: "
        f"{', '.join(registered().get(fmt, [])) or 'none'}); a model type declares its formats in its "
        f"class or adds an exporter with unisent.export.register_exporter (see docs/export.md)"
    )
