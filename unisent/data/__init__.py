"""Readers, the DataModule, collation helpers and samplers."""

from pathlib import Path

from .datamodule import UnisentDataModule, default_cache_dir
from .readers import DataSource, RecordError, read_records
from .sampling import LengthGroupedSampler, ResumableSampler

#: Bundled sample data (STS-B sentences, SNLI triples); see its LICENSE.md.
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"

__all__ = ["SAMPLE_DIR", "DataSource", "LengthGroupedSampler", "RecordError", "ResumableSampler", "UnisentDataModule", "default_cache_dir", "read_records"]
