"""Read training records from jsonl, csv/tsv, txt, parquet or a saved Hugging Face dataset.

Every record is checked against the fields an objective needs. A problem is reported with the file,
the line (or record number) and the field; by default all problems are collected and raised
together, nothing is silently dropped. With ``on_error="skip"`` bad records are skipped, counted and
reported in a warning.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["DataSource", "RecordError", "read_records", "SUPPORTED_FORMATS"]

SUPPORTED_FORMATS = (".jsonl", ".json", ".csv", ".tsv", ".txt", ".parquet", "a saved datasets directory")
MAX_LISTED = 20


class RecordError(ValueError):
    """One or more records are malformed; the message lists them with file, line and field."""


@dataclass
class DataSource:
    """A training file for one objective.

    Attributes:
        path: a .jsonl, .csv, .tsv, .txt (one sentence per line, field ``text``), .parquet file, or a
            directory written by ``datasets.Dataset.save_to_disk``.
        columns: renames ``{column in the file: field the objective expects}``, e.g.
            ``{sent0: anchor, sent1: positive, hard_neg: negative}`` for SimCSE's NLI csv.
        max_records: read only the first N records (0 = all).
        on_error: ``raise`` (default) lists every bad record and stops; ``skip`` drops them, counts
            them and reports them in a warning.
    """

    path: str
    columns: dict[str, str] = field(default_factory=dict)
    max_records: int = 0
    on_error: Literal["raise", "skip"] = "raise"

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                yield f"line {lineno}", ValueError("blank line (expected a JSON object)")
                continue
            try:
                yield f"line {lineno}", json.loads(line)
            except json.JSONDecodeError as err:
                yield f"line {lineno}", ValueError(f"not valid JSON ({err.msg} at column {err.colno})")


def _iter_delimited(path: Path, delimiter: str) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            return
        for row in reader:
            where = f"line {reader.line_num}"
            if len(row) != len(header):
                yield where, ValueError(f"has {len(row)} columns, the header has {len(header)} ({', '.join(header)})")
            else:
                yield where, dict(zip(header, row))


def _iter_txt(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            yield f"line {lineno}", {"text": line.rstrip("\r\n")}


def _iter_table(rows: Iterator[Mapping[str, Any]]) -> Iterator[tuple[str, Any]]:
    for i, row in enumerate(rows, 1):
        yield f"record {i}", dict(row)


def _iter_source(path: Path) -> Iterator[tuple[str, Any]]:
    if path.is_dir():
        from datasets import load_from_disk

        return _iter_table(iter(load_from_disk(str(path))))
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return _iter_jsonl(path)
    if suffix in (".csv", ".tsv"):
        return _iter_delimited(path, "," if suffix == ".csv" else "\t")
    if suffix == ".txt":
        return _iter_txt(path)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return _iter_table(row for batch in pq.ParquetFile(path).iter_batches() for row in batch.to_pylist())
    raise ValueError(f"{path}: unsupported format {suffix!r}; supported: {', '.join(SUPPORTED_FORMATS)}")


def _check(record: Any, required: Sequence[str], text_keys: Sequence[str]) -> str | None:
    if isinstance(record, Exception):
        return str(record)
    if not isinstance(record, dict):
        return f"expected an object with fields {', '.join(required)}, got {type(record).__name__}"
    for key in required:
        if key not in record or record[key] is None:
            return f"field {key!r} is missing (record has: {', '.join(map(str, record)) or 'no fields'})"
        if key in text_keys:
            value = record[key]
            if not isinstance(value, str):
                return f"field {key!r} must be a string, got {type(value).__name__}"
            if not value.strip():
                return f"field {key!r} is an empty sentence"
    return None


def read_records(
    source: DataSource | str,
    required: Sequence[str],
    text_keys: Sequence[str] = (),
    optional: Sequence[str] = (),
) -> dict[str, list[Any]]:
    """Read and validate a file into columns ``{field: [values]}`` holding only ``required`` fields.

    Fields in ``optional`` (a subset of ``required``) may be missing or null; they read as ``None``.

    Raises:
        FileNotFoundError: the path does not exist.
        RecordError: a record is malformed (listed with its line and field), unless ``on_error="skip"``.
    """
    if isinstance(source, str):
        source = DataSource(path=source)
    path = Path(source.path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"training data file {str(path)!r} does not exist")
    columns: dict[str, list[Any]] = {key: [] for key in required}
    problems: list[str] = []
    n_problems = 0
    kept = 0
    for where, record in _iter_source(path):
        if source.columns and isinstance(record, dict):
            record = {source.columns.get(k, k): v for k, v in record.items()}
        if optional and isinstance(record, dict):
            record = {**{k: None for k in optional}, **record}
        problem = _check(record, [k for k in required if k not in optional], text_keys)
        if problem is not None:
            n_problems += 1
            if len(problems) < MAX_LISTED:
                problems.append(f"{path}:{where}: {problem}")
            continue
        for key in required:
            columns[key].append(record[key])
        kept += 1
        if source.max_records and kept >= source.max_records:
            break
    if n_problems:
        more = f"\n... and {n_problems - len(problems)} more" if n_problems > len(problems) else ""
        listing = "\n".join(problems) + more
        if source.on_error == "raise":
            raise RecordError(
                f"{n_problems} malformed record(s) in {path} (fields needed: {', '.join(required)}):\n{listing}\n"
                "Fix them, rename columns with `columns:`, or set `on_error: skip` to drop and count them."
            )
        warnings.warn(f"skipped {n_problems} malformed record(s) of {path}, kept {kept}:\n{listing}", stacklevel=2)
    if kept == 0:
        raise RecordError(f"{path}: no usable records (fields needed: {', '.join(required)})")
    return columns
