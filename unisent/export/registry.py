"""Exporters and their registry: one exporter class per (format, model class).

A model type that needs its own export (a Gaussian model with a variance head, a retrofitted model
with an extra projection) adds an :class:`Exporter` subclass and registers it for its class::

    @register_exporter(MyModel)
    class MyModelHuggingFaceExporter(Exporter):
        format = "huggingface"
        ...

Lookup is by the model's exact class, so a subclass that changes what ``encode`` returns is never
exported silently as its parent; a subclass that does not can reuse the parent's exporter with
``register_exporter(Subclass)(ParentExporter)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from torch import nn

__all__ = ["PROBE_SENTENCES", "Exporter", "NoExporterError", "available_formats", "exporter_for", "register_exporter", "registered"]

E = TypeVar("E", bound=type["Exporter"])

_EXPORTERS: dict[str, dict[type, type[Exporter]]] = {}

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


class Exporter(ABC):
    """Writes one model type in one format and documents how to use the result.

    Class attributes:
        format: the format name users pass to ``unisent export --format``.
        library_name: the library that loads the result (the model card's ``library_name``).
        pipeline_tag: the Hugging Face Hub pipeline tag of the result.
        tags: extra model card tags.
    """

    format: ClassVar[str]
    library_name: ClassVar[str]
    pipeline_tag: ClassVar[str] = "feature-extraction"
    tags: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def write(self, model: nn.Module, out: Path) -> None:
        """Write ``model`` into the existing, empty directory ``out`` (the model card excluded)."""

    @abstractmethod
    def facts(self, model: nn.Module) -> list[tuple[str, str]]:
        """``(label, value)`` rows of the model card's summary table (architecture, pooling, ...)."""

    @abstractmethod
    def usage(self, model: nn.Module) -> str:
        """Markdown of the model card's usage section: how to load the files and pool the outputs."""

    def verify(self, model: nn.Module, out: Path, sentences: Sequence[str]) -> tuple[float | None, str]:
        """Re-load the written files the way a user would and compare with ``model.encode``.

        Returns:
            ``(max absolute difference or None when not checked, how it was checked)``.
        """
        return None, "no check available for this format"


def register_exporter(model_type: type) -> Callable[[E], E]:
    """Class decorator: register an :class:`Exporter` subclass for ``model_type`` and its ``format``."""

    def decorate(exporter_cls: E) -> E:
        if not (isinstance(exporter_cls, type) and issubclass(exporter_cls, Exporter)):
            raise TypeError(f"{exporter_cls!r} is not an Exporter subclass")
        _EXPORTERS.setdefault(exporter_cls.format, {})[model_type] = exporter_cls
        return exporter_cls

    return decorate


def available_formats() -> list[str]:
    """The registered format names, sorted."""
    return sorted(_EXPORTERS)


def registered() -> dict[str, list[str]]:
    """``{format: [model class names]}`` (for error messages and docs)."""
    return {fmt: sorted(cls.__name__ for cls in table) for fmt, table in sorted(_EXPORTERS.items())}


def exporter_for(model: Any, fmt: str) -> Exporter:
    """An exporter instance for ``model``'s exact class and the format ``fmt``.

    Raises:
        ValueError: ``fmt`` is not a registered format.
        NoExporterError: no exporter is registered for this model class in this format.
    """
    if fmt not in _EXPORTERS:
        raise ValueError(f"unknown export format {fmt!r}; formats: {', '.join(available_formats())}")
    table = _EXPORTERS[fmt]
    exporter_cls = table.get(type(model))
    if exporter_cls is None:
        raise NoExporterError(
            f"no {fmt!r} exporter is registered for {type(model).__name__} (registered: "
            f"{', '.join(cls.__name__ for cls in table) or 'none'}); a model type adds one with "
            f"unisent.export.register_exporter (see docs/export.md)"
        )
    return exporter_cls()
