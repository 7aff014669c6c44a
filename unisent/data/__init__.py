"""Readers, the DataModule, collation helpers and samplers.

The names below are imported on first use (PEP 562), so that ``unisent data <builder> --help`` and
the builders do not pay for Lightning and torch when they only need ``SAMPLE_DIR`` or a reader.
"""

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

#: Bundled sample data (STS-B sentences, SNLI triples); see its LICENSE.md.
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"

_LAZY = {
    "UnisentDataModule": "datamodule",
    "default_cache_dir": "datamodule",
    "DataSource": "readers",
    "RecordError": "readers",
    "read_records": "readers",
    "LengthGroupedSampler": "sampling",
    "ResumableSampler": "sampling",
}

if TYPE_CHECKING:
    from .datamodule import UnisentDataModule, default_cache_dir
    from .readers import DataSource, RecordError, read_records
    from .sampling import LengthGroupedSampler, ResumableSampler


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SAMPLE_DIR", "DataSource", "LengthGroupedSampler", "RecordError", "ResumableSampler", "UnisentDataModule", "default_cache_dir", "read_records"]
