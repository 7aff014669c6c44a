"""The optional dependencies of the EASE builders (the ``ease`` extra), imported where used."""

from __future__ import annotations

from types import ModuleType

INSTALL_HINT = "the EASE data builders need pysbd, mwparserfromhell and mwxml: pip install 'unisent[ease]'"


def require(module: str) -> ModuleType:
    """Import ``module``; an ``ImportError`` that says which extra to install if it is missing."""
    try:
        return __import__(module)
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(INSTALL_HINT) from err
