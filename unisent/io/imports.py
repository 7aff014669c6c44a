"""Dotted-path imports for what a user's recipe names (code by design: layer classes of a strategy, the
objectives of a recipe that ``unisent ablate`` plans): ``"pkg.mod.Name"`` -> the object, one clear error
naming the path. A name read from a model's files, a run's ``config.yaml`` read by export, or a
checkpoint is never given to it: those go through :mod:`unisent.io.registry`, which imports nothing.

Why not a library: Lightning's ``instantiate_class`` builds an object from ``{"class_path",
"init_args"}`` but does not resolve a bare class; :func:`import_object` is its four lines.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["import_object"]


def import_object(path: str, what: str = "class") -> Any:
    """``"pkg.mod.Name"`` -> the object; a clear ``ValueError`` naming the path if it cannot be imported."""
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"{what} {path!r} is not a dotted path (expected 'package.module.Name')")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what} {path!r} cannot be imported: {err}") from err
