"""Pluggable training objectives; each returns named loss terms."""

from .base import Objective, encode_views
from .ease import EASE
from .gausscse import GaussCSE, GaussianEncoder, GaussianHead
from .simcse import SimCSE

__all__ = ["EASE", "GaussCSE", "GaussianEncoder", "GaussianHead", "Objective", "SimCSE", "encode_views"]
