"""Builders that turn public data layouts into training records."""

from .nli_records import nli_triples

__all__ = ["nli_triples"]
