"""The training data layer (its modules: docs/architecture.md). Names are imported on first use (PEP 562)
from the submodule ``_LAZY`` names, so that readers of records (the builders, ``unisent data
--help``) do not pay for torch and Lightning."""

from importlib import import_module
from typing import TYPE_CHECKING

from ..io.imports import lazy_exports

#: exported name -> the submodule of this package that defines it
_LAZY = {
    "DataConfigError": "record_errors",
    "RecordError": "record_errors",
    "iter_records": "records",
    "BatchSchema": "schema",
    "UnisentDataModule": "datamodule",
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
    from .schema import BatchSchema
    from .sources import DataSource, load_source

__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda sub: import_module(f".{sub}", __name__))


__all__ = [
    "BatchSchema",
    "DataConfigError",
    "DataSource",
    "LengthGroupedSampler",
    "RecordError",
    "ResumableSampler",
    "UnisentDataModule",
    "iter_records",
    "load_source",
    "read_records",
]
