"""Builders that turn public data layouts into training records."""

from .nli_records import nli_triples, read_nli_pairs, write_jsonl

__all__ = ["nli_triples", "read_nli_pairs", "write_jsonl"]
