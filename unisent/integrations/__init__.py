"""Bridges from unisent models to other libraries' protocols (MTEB)."""
