"""Embedding post-processors applied after encoding (principal component removal).

The model that applies one after an encoder, :class:`~unisent.models.PCREncoder`, lives with the
other inference models in :mod:`unisent.models`; it (and ``fit_pcr``) stay importable from here.
"""

from .pcr import PrincipalComponentRemoval

_MOVED = ("INNER_DIR", "PCR_FILE", "PCREncoder", "fit_pcr")


def __getattr__(name: str):
    if name in _MOVED:
        from ..models import pcr

        return getattr(pcr, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PCR_FILE", "PCREncoder", "PrincipalComponentRemoval", "fit_pcr"]
