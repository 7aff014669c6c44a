"""Dotted-path imports for what a user's recipe names (code by design). A name read from a model's files,
an exported run's ``config.yaml`` or a checkpoint never comes here: ``unisent.io.registry`` resolves
those and imports nothing. ``lazy_exports``: the PEP 562 hooks of packages that import on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["import_object", "lazy_exports"]


def import_object(path: str, what: str = "class") -> Any:
    """``"pkg.mod.Name"`` -> the object; a clear ``ValueError`` naming the path if it cannot be imported."""
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"{what} {path!r} is not a dotted path (expected 'package.module.Name')")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what} {path!r} cannot be imported: {err}") from err


def lazy_exports(
    namespace: dict[str, Any], table: dict[str, str], load: Callable[[str], ModuleType]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__, __dir__`` (PEP 562): a name of ``table`` (name -> submodule) is taken from
    ``load(submodule)`` on first use and kept in ``namespace``. ``load`` is the package's own
    ``import_module``, so the layer checks find the import beside the table."""

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        namespace[name] = value = getattr(load(table[name]), name)
        return value

    return __getattr__, lambda: sorted({*namespace, *table})
