"""Pluggable training objectives; each returns named loss terms."""

from .base import Objective, encode_views
from .simcse import SimCSE

__all__ = ["Objective", "SimCSE", "encode_views"]
