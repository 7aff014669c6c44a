"""The training data layer: records (:mod:`.records`), the batch schema objectives declare
(:mod:`.schema`), sources (:mod:`.sources`, read by ``datasets.load_dataset``), streams
(:mod:`.tokenized_stream`), records checked against an objective's fields (:mod:`.checked_records`), the DataModule
(:mod:`.datamodule`), samplers (:mod:`.sampling`) and entity tables (:mod:`.entities`).

Names are imported on first use (PEP 562) from the submodule :data:`_LAZY` names, so that readers of
records (the builders, ``unisent data --help``) do not pay for torch and Lightning.
"""

from importlib import import_module
from typing import TYPE_CHECKING

#: exported name -> the submodule of this package that defines it
_LAZY = {
    "DataConfigError": "record_errors",
    "RecordError": "record_errors",
    "iter_records": "records",
    "BatchSchema": "schema",
    "PREDICT_SCHEMA": "schema",
    "UnisentDataModule": "datamodule",
    "default_cache_dir": "token_cache",
    "DataSource": "sources",
    "load_source": "sources",
    "read_records": "checked_records",
    "LengthGroupedSampler": "sampling",
    "ResumableSampler": "sampling",
}

if TYPE_CHECKING:
    from .checked_records import read_records
    from .datamodule import UnisentDataModule
    from .record_errors import DataConfigError, RecordError
    from .records import iter_records
    from .sampling import LengthGroupedSampler, ResumableSampler
    from .schema import PREDICT_SCHEMA, BatchSchema
    from .sources import DataSource, load_source
    from .token_cache import default_cache_dir


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BatchSchema",
    "DataConfigError",
    "DataSource",
    "LengthGroupedSampler",
    "PREDICT_SCHEMA",
    "RecordError",
    "ResumableSampler",
    "UnisentDataModule",
    "default_cache_dir",
    "iter_records",
    "load_source",
    "read_records",
]
