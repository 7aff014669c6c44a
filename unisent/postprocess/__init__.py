"""Embedding post-processors applied after encoding (principal component removal)."""

from .pcr import PCR_FILE, PCREncoder, PrincipalComponentRemoval, fit_pcr

__all__ = ["PCR_FILE", "PCREncoder", "PrincipalComponentRemoval", "fit_pcr"]
