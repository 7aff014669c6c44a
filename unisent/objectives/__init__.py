"""Pluggable training objectives; each returns named loss terms."""

from .base import Objective, encode_views
from .gausscse import GaussCSE, GaussianEncoder, GaussianHead
from .simcse import SimCSE

__all__ = ["GaussCSE", "GaussianEncoder", "GaussianHead", "Objective", "SimCSE", "encode_views"]
