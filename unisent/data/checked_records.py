"""Training records of one file checked line by line against an objective's fields: what
[`unisent.data.sources.load_source`][unisent.data.load_source] falls back on to name the line of a problem. Files are
read by [`unisent.data.records.iter_records`][unisent.data.iter_records]; this module adds the objective's checks
(non-empty sentences), collects all problems (or skips and counts them) and the columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from .record_errors import MAX_LISTED, RecordError, report_malformed
from .records import SUPPORTED_FORMATS, Record, iter_records

__all__ = ["SUPPORTED_FORMATS", "RecordError", "RecordFile", "read_records"]


class RecordFile(Protocol):
    """What this reader uses of a source, e.g. a [`DataSource`][unisent.data.DataSource] (not imported:
    ``sources`` imports this module)."""

    @property
    def path(self) -> str: ...
    @property
    def columns(self) -> Mapping[str, str]: ...
    @property
    def max_records(self) -> int: ...
    @property
    def on_error(self) -> str: ...


def _check_text(record: Record, keys: Sequence[str]) -> RecordError | None:
    """A text field must be a non-blank string."""
    for key in keys:
        value = record.data[key]
        if not isinstance(value, str):
            return record.error(f"field {key!r} must be a string, got {type(value).__name__}", field=key)
        if not value.strip():
            return record.error(f"field {key!r} is an empty sentence", field=key)
    return None


def read_records(
    source: RecordFile | str,
    required: Sequence[str],
    text_keys: Sequence[str] = (),
    optional: Sequence[str] = (),
    source_key: str | None = None,
) -> dict[str, list[Any]]:
    """Read and validate a file into columns ``{field: [values]}`` of the ``required`` fields.

    Fields in ``optional`` (a subset of ``required``) may be missing or null; they read as ``None``.
    ``source_key``: the source's key in the recipe (``data.train.simcse``), named by the hints. Malformed
    records raise one [`RecordError`][unisent.data.RecordError] listing them, unless ``on_error="skip"``."""
    if isinstance(source, str):  # a bare path: its columns as they are, all its records, malformed ones raise
        raw, rename, max_records, on_error = source, {}, 0, "raise"
    else:
        raw, rename, max_records, on_error = source.path, source.columns, source.max_records, source.on_error
    path = Path(raw).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"training data file {str(path)!r} does not exist")
    columns: dict[str, list[Any]] = {key: [] for key in required}
    needed = [key for key in required if key not in optional]
    checked = [key for key in needed if key in text_keys]
    problems: list[str] = []
    n_problems = 0

    def problem(error: RecordError) -> None:
        nonlocal n_problems
        n_problems += 1
        if len(problems) < MAX_LISTED:
            problems.append(str(error))

    kept = 0
    records = iter_records(
        path,
        fields=needed,
        optional=[key for key in required if key in optional],
        rename=rename,
        on_error=problem,
    )
    for record in records:
        error = _check_text(record, checked)
        if error is not None:
            problem(error)
            continue
        for key in required:
            columns[key].append(record.data[key])
        kept += 1
        if max_records and kept >= max_records:
            break
    if n_problems:
        report_malformed(str(path), problems, n_problems, required, on_error, kept, source_key)
    if kept == 0:
        raise RecordError(path, 0, f"no usable records (fields needed: {', '.join(required)})")
    return columns
