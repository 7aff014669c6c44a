"""The record reader ([`iter_records`][unisent.data.iter_records]): one streaming iterator for training, evaluation,
encode and builder inputs. It is thin glue over the parsers of each format (``json``, ``csv``, ``pyarrow.parquet``,
``datasets``), adding what none of them gives: the same line numbers, field checks and
[`RecordError`][unisent.data.RecordError] messages for all formats."""

from __future__ import annotations

import codecs
import csv
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from .file_checks import check_data_folder, line_too_long, max_line_bytes, require_file
from .record_errors import RecordError, no_column

__all__ = ["FORMATS", "SUPPORTED_FORMATS", "Record", "iter_records"]

#: file suffix -> format name of ``iter_records`` (a directory is ``"dataset"``)
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv", ".txt": "txt", ".parquet": "parquet"}
SUPPORTED_FORMATS = (*FORMATS, "a saved datasets directory")
_FORMAT_NAMES = ("jsonl", "csv", "tsv", "txt", "parquet", "dataset")
#: the JSON names of the values ``json.loads`` gives; the others (int, float) are numbers
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
_BATCH_ROWS = 4096


@dataclass(slots=True)
class Record:
    """One record of a data file: ``line`` is the 1-based line where it starts (a csv record may span
    lines) or its row (``unit="row"``) in a parquet file or dataset; ``data`` a dict of fields, a list of
    strings (csv/tsv without a header), any JSON value (jsonl without ``fields``) or ``None`` (a kept
    blank line)."""

    path: Path
    line: int
    data: Any
    unit: str = "line"

    @property
    def where(self) -> str:
        """``"line 12"`` or ``"row 12"``."""
        return f"{self.unit} {self.line}"

    def error(self, message: str, field: str | None = None) -> RecordError:
        """A [`RecordError`][unisent.data.RecordError] about this record (the caller raises it)."""
        return RecordError(self.path, self.line, message, field=field, unit=self.unit)


@dataclass(frozen=True)
class _Options:
    path: Path
    fields: tuple[str, ...] | None
    wanted: tuple[str, ...]
    allow_null: bool
    rename: Mapping[str, str]
    text_field: str
    header: bool
    quoting: bool
    blank_lines: str
    encoding: str
    on_error: Callable[[RecordError], None] | None

    def report(self, error: RecordError) -> None:
        if self.on_error is None:
            raise error
        self.on_error(error)

    def select(self, data: dict[str, Any], line: int, unit: str = "line") -> dict[str, Any] | None:
        """Check the required fields of ``data`` and keep the wanted ones (``None``: reported)."""
        if self.fields is None:
            return data
        for key in self.fields:
            if key not in data:
                present = ", ".join(map(str, data)) or "no fields"
                self.report(
                    RecordError(
                        self.path, line, f"field {key!r} is missing (record has: {present})", field=key, unit=unit
                    )
                )
                return None
            if data[key] is None and not self.allow_null:
                self.report(RecordError(self.path, line, f"field {key!r} is missing (null)", field=key, unit=unit))
                return None
        return {key: data.get(key) for key in self.wanted}

    def renamed(self, data: dict[str, Any]) -> dict[str, Any]:
        return {self.rename.get(k, k): v for k, v in data.items()} if self.rename else data


def iter_records(
    path: str | os.PathLike,
    format: Literal["jsonl", "csv", "tsv", "txt", "parquet", "dataset"] | None = None,
    *,
    fields: Sequence[str] | None = None,
    optional: Sequence[str] = (),
    allow_null: bool = False,
    rename: Mapping[str, str] | None = None,
    text_field: str = "text",
    header: bool = True,
    quoting: bool = True,
    blank_lines: Literal["error", "skip", "keep"] = "error",
    encoding: str = "utf-8",
    on_error: Callable[[RecordError], None] | None = None,
) -> Iterator[Record]:
    """Stream the records of a data file, one ``Record`` at a time (never the whole file).

    Formats: ``jsonl`` (one JSON value per line; also ``.json``), ``csv`` and ``tsv`` (a header row,
    quoted fields may span lines), ``txt`` (each line a record ``{text_field: line}``, blank lines
    included), ``parquet`` (in batches of rows) and ``dataset`` (a ``Dataset.save_to_disk`` directory,
    read lazily); default: from the suffix. Text is decoded line by line, split on ``\\n`` only (a
    ``\\r\\n`` ending is dropped; a Latin-1 byte ``0x85`` stays inside its line), a UTF-8 byte-order
    mark dropped; encodings must be ASCII-compatible (utf-8, latin-1, cp1252 ...).

    Args:
        fields: the fields the caller needs. Each must be present and (unless ``allow_null``) not
            null, or the record is an error naming the field; a csv/tsv header or parquet/dataset
            schema without one is an error of the whole file. Records are reduced to ``fields`` +
            ``optional``. A jsonl line that is a bare JSON string reads as ``{text_field: string}``.
            ``None``: every record as it is.
        optional: fields that may be absent or null; they read as ``None``.
        rename: ``{name in the file: field}``, applied before the checks.
        header: csv/tsv: ``False`` yields lists of strings (``fields`` cannot be used).
        quoting: csv/tsv: ``False`` reads ``"`` as text.
        blank_lines: a blank line of a jsonl/csv/tsv file is an ``error``, ``skip``-ped, or ``keep``-t
            as a record with ``data=None`` (to keep rows aligned with lines).
        on_error: called with the [`RecordError`][unisent.data.RecordError] of each malformed record, which is then
            skipped; ``None``: raise it. Problems of the whole file always raise.

    The file is opened when iteration starts; a missing path (``FileNotFoundError``) and bad
    arguments (``ValueError``) raise at the call, malformed records while iterating."""
    path = Path(path).expanduser()
    if format is None:  # from the suffix (a directory is "dataset"); an unknown suffix is a ValueError
        if not path.exists():
            raise FileNotFoundError(f"data file {str(path)!r} does not exist")
        suffix = path.suffix.lower()
        if not path.is_dir() and suffix not in FORMATS:
            raise ValueError(
                f"{path}: unsupported format {suffix!r}; supported: {', '.join(SUPPORTED_FORMATS)} "
                "(or name one with format=)"
            )
        format = "dataset" if path.is_dir() else FORMATS[suffix]  # type: ignore[assignment]
    if format not in _FORMAT_NAMES:
        raise ValueError(f"unknown record format {format!r}; one of {', '.join(_FORMAT_NAMES)}")
    if format == "dataset":
        if not path.is_dir():
            raise FileNotFoundError(f"dataset directory {str(path)!r} does not exist")
        check_data_folder(path)  # regular files only, no link out, state.json's files inside it
    else:
        require_file(path)
    if blank_lines not in ("error", "skip", "keep"):
        raise ValueError(f"blank_lines must be 'error', 'skip' or 'keep', got {blank_lines!r}")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r}") from None
    if fields is not None and format in ("csv", "tsv") and not header:
        raise ValueError("fields need named columns: a csv/tsv file read with header=False has none")
    wanted = tuple(dict.fromkeys([*(fields or ()), *optional]))
    options = _Options(
        path=path,
        fields=None if fields is None and not optional else tuple(k for k in fields or () if k not in optional),
        wanted=wanted,
        allow_null=allow_null,
        rename=dict(rename or {}),
        text_field=text_field,
        header=header,
        quoting=quoting,
        blank_lines=blank_lines,
        encoding=encoding,
        on_error=on_error,
    )
    if format == "jsonl":
        return _iter_jsonl(options)
    if format in ("csv", "tsv"):
        return _iter_delimited(options, "," if format == "csv" else "\t")
    if format == "txt":
        return _iter_txt(options)
    if format == "parquet":
        return _iter_parquet(options)
    return _iter_dataset(options)


def _lines(options: _Options, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line, split on ``\\n`` and decoded on its own; a line that
    cannot be decoded is reported (named) and skipped."""
    encoding = options.encoding
    utf8 = codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")
    if utf8:
        encoding = "utf-8"  # the BOM is dropped here, and only at the start of the file
    limit = max_line_bytes()
    with options.path.open("rb") as fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(limit + 1), b""), 1):
            if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
                raise line_too_long(options.path, lineno, limit)  # the rest of the line is not read
            if lineno == 1 and utf8 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            nul = raw.find(b"\0")
            if nul != -1:
                options.report(
                    RecordError(
                        options.path,
                        lineno,
                        f"holds a NUL byte (byte {nul} of the line), which text never does: a binary file, or "
                        "text in UTF-16/UTF-32 (convert it to UTF-8)",
                    )
                )
                continue
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as err:
                options.report(
                    RecordError(
                        options.path,
                        lineno,
                        f"cannot be decoded as {options.encoding} ({err.reason} at byte {err.start} "
                        "of the line); fix the line or pass the file's encoding (encoding=..., --encoding)",
                    )
                )
                continue
            if not keep_ends:
                text = text[:-1] if text.endswith("\n") else text
                text = text[:-1] if text.endswith("\r") else text
            yield lineno, text


def _iter_jsonl(options: _Options) -> Iterator[Record]:
    path = options.path
    for lineno, line in _lines(options):
        if not line.strip():
            if options.blank_lines == "error":
                options.report(RecordError(path, lineno, "blank line (expected a JSON object)"))
            elif options.blank_lines == "keep":
                yield Record(path, lineno, None)
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            reason = err.msg.removesuffix(" at")  # "Invalid control character at"
            options.report(RecordError(path, lineno, f"not valid JSON ({reason} at column {err.colno})"))
            continue
        except RecursionError:
            options.report(RecordError(path, lineno, "not valid JSON here: nested too deeply (thousands of [ or {)"))
            continue
        if options.fields is None:
            yield Record(path, lineno, value)
            continue
        if isinstance(value, str):
            value = {options.text_field: value}
        elif not isinstance(value, dict):
            options.report(
                RecordError(
                    path,
                    lineno,
                    f"is a JSON {_JSON_TYPES.get(type(value), 'number')}, expected an object with "
                    f"field(s) {', '.join(map(repr, options.wanted))}",
                )
            )
            continue
        data = options.select(options.renamed(value), lineno)
        if data is not None:
            yield Record(path, lineno, data)


def _iter_txt(options: _Options) -> Iterator[Record]:
    name = options.rename.get(options.text_field, options.text_field)
    others = [key for key in options.fields or () if key != name]
    if others:
        raise RecordError(
            options.path,
            0,
            f"a .txt file has one field per line, {name!r}; field(s) "
            f"{', '.join(map(repr, others))} need a jsonl, csv, tsv or parquet file",
        )
    for lineno, text in _lines(options):
        data = options.select({name: text}, lineno)
        if data is not None:
            yield Record(options.path, lineno, data)


def _iter_delimited(options: _Options, delimiter: str) -> Iterator[Record]:
    path = options.path
    last = 0  # the last physical line read

    def feed() -> Iterator[str]:
        nonlocal last
        for lineno, text in _lines(options, keep_ends=True):
            last = lineno
            yield text

    # a field may be as long as a line (csv's default limit is 128 KiB)
    csv.field_size_limit(max(csv.field_size_limit(), max_line_bytes()))
    reader = csv.reader(feed(), delimiter=delimiter, quoting=csv.QUOTE_MINIMAL if options.quoting else csv.QUOTE_NONE)
    end = 0  # the last line of the previous record
    names: list[str] | None = None
    header: list[str] = []
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise RecordError(
                path, end + 1, f"cannot be parsed as {'csv' if delimiter == ',' else 'tsv'}: {err}"
            ) from None
        start, end = end + 1, last
        if options.header and names is None:
            header, names = row, [options.rename.get(h, h) for h in row]
            missing = [key for key in options.fields or () if key not in names]
            if missing:
                raise no_column(path, missing, header, names if options.rename else None, " in the header")
            continue
        if not row:
            if options.blank_lines == "error":
                expected = f"{len(header)} columns: {', '.join(header)}" if options.header else "a row"
                options.report(RecordError(path, start, f"blank line (expected {expected})"))
            elif options.blank_lines == "keep":
                yield Record(path, start, None)
            continue
        if names is None:
            yield Record(path, start, row)
            continue
        if len(row) != len(names):
            options.report(
                RecordError(path, start, f"has {len(row)} columns, the header has {len(header)} ({', '.join(header)})")
            )
            continue
        data = options.select(dict(zip(names, row)), start)
        if data is not None:
            yield Record(path, start, data)


def _columns(options: _Options, names: Sequence[str]) -> list[str] | None:
    """The columns of a table to read (``None``: all); a required one that is absent is an error."""
    if options.fields is None:
        return None
    by_field = {options.rename.get(n, n): n for n in names}
    missing = [key for key in options.fields if key not in by_field]
    if missing:
        raise no_column(options.path, missing, names, by_field if options.rename else None)
    return [by_field[key] for key in options.wanted if key in by_field]


def _iter_parquet(options: _Options) -> Iterator[Record]:
    import pyarrow.parquet as pq

    with pq.ParquetFile(options.path) as parquet:
        columns = _columns(options, parquet.schema_arrow.names)
        batches = parquet.iter_batches(batch_size=_BATCH_ROWS, columns=columns)
        yield from _rows(options, (value for batch in batches for value in batch.to_pylist()))


def _iter_dataset(options: _Options) -> Iterator[Record]:
    from datasets import Dataset, load_from_disk

    dataset = load_from_disk(str(options.path))
    if not isinstance(dataset, Dataset):
        raise RecordError(
            options.path,
            0,
            f"holds a dataset dictionary (splits: {', '.join(map(str, dataset))}); point at the directory of one split",
        )
    columns = _columns(options, dataset.column_names)
    if columns is not None:
        dataset = dataset.select_columns(columns)
    yield from _rows(options, cast("Iterator[dict[str, Any]]", iter(dataset)))


def _rows(options: _Options, values: Iterator[dict[str, Any]]) -> Iterator[Record]:
    """The records of a table's rows (parquet, dataset), checked and named by their row."""
    for row, value in enumerate(values, 1):
        data = options.select(options.renamed(value), row, "row")
        if data is not None:
            yield Record(options.path, row, data, "row")
