"""Merging runs that share a starting model into one (``unisent merge``; docs/merging.md): the arithmetic of
each method (``methods``) and the runs' checks, heads and files (``runs``)."""

from .methods import METHODS, merge_tensors
from .runs import DEFAULT_DENSITY, MergeError, merge_runs

__all__ = ["DEFAULT_DENSITY", "METHODS", "MergeError", "merge_runs", "merge_tensors"]
