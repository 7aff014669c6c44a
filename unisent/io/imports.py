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


def instantiate(spec: dict[str, Any], base: type | None = None) -> Any:
    """Build an object from ``{"class_path": "pkg.mod.Class", "init_args": {...}}``.

    With ``base``, the class must be a subclass of it, checked before anything is called: a spec read
    from a file (a checkpoint's record) cannot name a function such as ``os.system``.

    Raises:
        ValueError: the class cannot be imported, or is not a subclass of ``base``.
    """
    cls = import_object(spec["class_path"])
    if base is not None and not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(
            f"{spec['class_path']!r} is not a {base.__module__}.{base.__qualname__} subclass; refusing to call it"
        )
    return cls(**spec.get("init_args", {}))
