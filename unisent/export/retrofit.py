"""The retrofitted model's export moved into its class (:mod:`unisent.models.retrofit`); the names that
were public here stay importable."""

from ..models.retrofit import PROBE_GRAPHS, RetrofittedEncoder, retrofit_usage_code

__all__ = ["PROBE_GRAPHS", "RetrofittedEncoder", "retrofit_usage_code"]
