"""Dotted-path imports: ``"pkg.mod.Name"`` -> the object, with one clear error naming the path.

Why not a library: Lightning's ``instantiate_class`` builds an object from ``{"class_path",
"init_args"}`` but does not resolve a bare class (needed for registries and model cards);
:func:`import_object` is its four lines.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["import_object", "instantiate"]


def import_object(path: str, what: str = "class") -> Any:
    """``"pkg.mod.Name"`` -> the object; a clear ``ValueError`` naming the path if it cannot be imported."""
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"{what} {path!r} is not a dotted path (expected 'package.module.Name')")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what} {path!r} cannot be imported: {err}") from err


def instantiate(spec: dict[str, Any]) -> Any:
    """Build an object from ``{"class_path": "pkg.mod.Class", "init_args": {...}}``."""
    return import_object(spec["class_path"])(**spec.get("init_args", {}))
