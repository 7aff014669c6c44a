"""Encode a file of sentences to ``.npy`` or ``.parquet`` in chunks, with bounded memory.

Output row ``i`` is always input row ``i``: line ``i + 1`` of a ``.txt`` or ``.jsonl`` file, data
record ``i + 1`` of a ``.csv``/``.tsv`` file (after the header), row ``i + 1`` of a ``.parquet``
file. Nothing is skipped silently: an empty text (blank line, empty cell, null) stops the run before
any encoding, naming its line, unless ``on_empty="zero"`` writes a zero vector for it. A line that
cannot be decoded, an invalid JSON line or a missing column is an error naming the line.

The file is read twice: a first pass counts the rows and validates every one (so a problem in the
last line is reported before hours of encoding), the second encodes ``chunk_size`` rows at a time
(``Encoder.encode`` sorts each chunk by length into batches and restores the order) and appends
them to the output, written as ``<output>.partial`` and renamed when complete.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

__all__ = [
    "EncodeInputError",
    "EncodeSummary",
    "SUPPORTED_INPUTS",
    "SUPPORTED_OUTPUTS",
    "encode_file",
    "iter_texts",
    "scan_input",
]

SUPPORTED_INPUTS = (".txt", ".jsonl", ".csv", ".tsv", ".parquet")
SUPPORTED_OUTPUTS = (".npy", ".parquet")
MAX_LISTED = 10


class EncodeInputError(ValueError):
    """A row of the input cannot be encoded as it is; the message names its line (or row)."""


@dataclass
class ScanResult:
    """The first pass over an input file.

    Attributes:
        rows: number of rows (= output rows).
        empty: ``(output row, where)`` of the first :data:`MAX_LISTED` empty rows.
        n_empty: number of empty rows.
    """

    rows: int = 0
    empty: list[tuple[int, str]] = field(default_factory=list)
    n_empty: int = 0


@dataclass
class EncodeSummary:
    """What :func:`encode_file` wrote.

    Attributes:
        output: the output file.
        rows: rows written (= input rows).
        dim: embedding dimension.
        empty_rows: rows written as zero vectors (``on_empty="zero"``).
        seconds: wall time of the encoding pass.
    """

    output: Path
    rows: int
    dim: int
    empty_rows: int
    seconds: float


# ------------------------------------------------------------------------------------------ reading
def _check_input(path: Path) -> str:
    if not path.exists():
        raise FileNotFoundError(f"input file {str(path)!r} does not exist")
    if not path.is_file():
        raise EncodeInputError(f"input {str(path)!r} is not a file")
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_INPUTS:
        raise EncodeInputError(f"{path}: unsupported input format {suffix!r}; supported: {', '.join(SUPPORTED_INPUTS)}")
    return suffix


def _decoded_lines(path: Path, encoding: str, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` per line (split on ``\\n``), each line decoded on its own."""
    bom = encoding.lower().replace("_", "-") in ("utf-8", "utf8")
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and bom and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as err:
                raise EncodeInputError(
                    f"{path} line {lineno} cannot be decoded as {encoding} ({err.reason} at byte {err.start} of the "
                    f"line); fix the line or pass the file's encoding (--encoding)"
                ) from None
            yield lineno, text if keep_ends else text.rstrip("\r\n")


def _text_value(value: Any, path: Path, where: str, column: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise EncodeInputError(f"{path} {where}: {column!r} is {type(value).__name__} {value!r}, not a string")
    return value


def _iter_txt(path: Path, encoding: str) -> Iterator[tuple[str, str]]:
    for lineno, text in _decoded_lines(path, encoding):
        yield f"line {lineno}", text


def _iter_jsonl(path: Path, column: str, encoding: str) -> Iterator[tuple[str, str]]:
    for lineno, line in _decoded_lines(path, encoding):
        where = f"line {lineno}"
        if not line.strip():
            yield where, ""
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise EncodeInputError(f"{path} {where} is not valid JSON ({err.msg} at column {err.colno})") from None
        if isinstance(record, str):
            yield where, record
        elif isinstance(record, dict):
            if column not in record:
                fields = ", ".join(map(repr, record)) or "none"
                raise EncodeInputError(f"{path} {where} has no field {column!r} (fields: {fields}); choose one with --column")
            yield where, _text_value(record[column], path, where, column)
        else:
            raise EncodeInputError(f"{path} {where} is a JSON {type(record).__name__}, expected an object with {column!r}")


def _iter_delimited(path: Path, column: str, encoding: str, delimiter: str) -> Iterator[tuple[str, str]]:
    lines = (text for _, text in _decoded_lines(path, encoding, keep_ends=True))
    reader = csv.reader(lines, delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        return
    if column not in header:
        raise EncodeInputError(f"{path}: no column {column!r} in the header (columns: {', '.join(header)}); choose one with --column")
    index = header.index(column)
    last = reader.line_num
    for row in reader:
        where = f"line {last + 1}"
        last = reader.line_num
        if not row:  # a blank line
            yield where, ""
            continue
        if len(row) != len(header):
            raise EncodeInputError(f"{path} {where} has {len(row)} columns, the header has {len(header)} ({', '.join(header)})")
        yield where, row[index]


def _iter_parquet(path: Path, column: str) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    names = parquet.schema_arrow.names
    if column not in names:
        raise EncodeInputError(f"{path}: no column {column!r} (columns: {', '.join(names)}); choose one with --column")
    row = 0
    for batch in parquet.iter_batches(columns=[column], batch_size=4096):
        for value in batch.column(0).to_pylist():
            row += 1
            where = f"row {row}"
            yield where, _text_value(value, path, where, column)


def iter_texts(path: str | os.PathLike, column: str = "text", encoding: str = "utf-8") -> Iterator[tuple[str, str]]:
    """Stream ``(where, text)`` for every row of a ``.txt``/``.jsonl``/``.csv``/``.tsv``/``.parquet`` file.

    ``where`` names the row (``line 12``, ``row 12``); an empty text is returned as it is (the caller
    decides). ``.txt`` has one sentence per line; ``.jsonl`` an object with ``column`` (or a JSON
    string) per line; ``.csv``/``.tsv`` a header with ``column``; ``.parquet`` a string ``column``.

    Raises:
        FileNotFoundError: the file does not exist.
        EncodeInputError: an unsupported format, or a row that cannot be read (named).
    """
    path = Path(path).expanduser()
    suffix = _check_input(path)
    if suffix == ".txt":
        return _iter_txt(path, encoding)
    if suffix == ".jsonl":
        return _iter_jsonl(path, column, encoding)
    if suffix in (".csv", ".tsv"):
        return _iter_delimited(path, column, encoding, "," if suffix == ".csv" else "\t")
    return _iter_parquet(path, column)


def scan_input(path: str | os.PathLike, column: str = "text", encoding: str = "utf-8") -> ScanResult:
    """Count and validate the rows of ``path`` (the first pass of :func:`encode_file`)."""
    result = ScanResult()
    for row, (where, text) in enumerate(iter_texts(path, column, encoding)):
        result.rows += 1
        if not text.strip():
            result.n_empty += 1
            if len(result.empty) < MAX_LISTED:
                result.empty.append((row, where))
    return result


def _empty_error(path: Path, scan: ScanResult) -> EncodeInputError:
    listed = "; ".join(f"{where} (output row {row})" for row, where in scan.empty)
    more = f" and {scan.n_empty - len(scan.empty)} more" if scan.n_empty > len(scan.empty) else ""
    first = scan.empty[0][1]
    return EncodeInputError(
        f"{path} {first} is empty: {scan.n_empty} empty row(s) of {scan.rows}: {listed}{more}. Every row must be "
        f"a sentence so that output rows line up with input rows; remove them, or pass --on-empty zero "
        f"(on_empty='zero') to write a zero vector for each"
    )


# ------------------------------------------------------------------------------------------ writing
class _NpyWriter:
    """Appends float32 rows to a ``.npy`` with plain writes (nothing memory-mapped, RSS stays flat)."""

    def __init__(self, path: Path, rows: int) -> None:
        self.path, self.rows, self.written = path, rows, 0
        self.partial = path.with_name(path.name + ".partial")
        self.fh = self.partial.open("wb")
        self.dim: int | None = None

    def write(self, block: np.ndarray) -> None:
        if self.dim is None:
            self.dim = int(block.shape[1])
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
                      "shape": (self.rows, self.dim)}
            np.lib.format.write_array_header_1_0(self.fh, header)
        self.fh.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
        self.written += len(block)

    def close(self) -> None:
        self.fh.close()
        if self.written != self.rows:
            raise RuntimeError(f"wrote {self.written} rows, expected {self.rows} (did the input change while encoding?)")
        os.replace(self.partial, self.path)

    def abort(self) -> None:
        self.fh.close()
        self.partial.unlink(missing_ok=True)


class _ParquetWriter:
    """Appends ``row`` (input row, 0-based) and ``embedding`` (fixed-size float32 list) row groups."""

    def __init__(self, path: Path, rows: int, metadata: dict[str, str]) -> None:
        self.path, self.rows, self.written, self.metadata = path, rows, 0, metadata
        self.partial = path.with_name(path.name + ".partial")
        self.writer = None
        self.dim: int | None = None

    def write(self, block: np.ndarray) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            self.dim = int(block.shape[1])
            schema = pa.schema([("row", pa.int64()), ("embedding", pa.list_(pa.float32(), self.dim))])
            self.writer = pq.ParquetWriter(self.partial, schema.with_metadata(self.metadata))
        flat = pa.array(np.ascontiguousarray(block, dtype=np.float32).reshape(-1))
        table = pa.table({
            "row": pa.array(np.arange(self.written, self.written + len(block), dtype=np.int64)),
            "embedding": pa.FixedSizeListArray.from_arrays(flat, self.dim),
        })
        self.writer.write_table(table)
        self.written += len(block)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.written != self.rows:
            raise RuntimeError(f"wrote {self.written} rows, expected {self.rows} (did the input change while encoding?)")
        os.replace(self.partial, self.path)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.partial.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ encoding
def _as_array(embeddings: Any) -> np.ndarray:
    if isinstance(embeddings, torch.Tensor):
        return embeddings.detach().float().cpu().numpy()
    return np.asarray(embeddings, dtype=np.float32)


def _chunks(rows: Iterator[tuple[str, str]], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for _, text in rows:
        chunk.append(text)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def encode_file(
    model: str | os.PathLike | nn.Module,
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    column: str = "text",
    batch_size: int = 64,
    chunk_size: int = 8192,
    normalize: bool = False,
    bf16: bool = False,
    on_empty: Literal["error", "zero"] = "error",
    encoding: str = "utf-8",
    device: str | None = None,
    progress: bool = True,
) -> EncodeSummary:
    """Embed every row of ``input_path`` into ``output_path`` (``.npy`` or ``.parquet``), streaming.

    Args:
        model: anything ``unisent.load`` takes (preset, saved or exported directory, ``.ckpt``), or a
            loaded model with ``encode(sentences, batch_size, normalize=..., bf16=...)``.
        input_path: ``.txt`` (one sentence per line), ``.jsonl``, ``.csv``, ``.tsv`` or ``.parquet``.
        output_path: ``.npy`` (float32, shape (rows, dim); ``numpy.load(..., mmap_mode="r")`` reads
            it without loading it) or ``.parquet`` (columns ``row`` and ``embedding``).
        column: the text field of jsonl/csv/tsv/parquet input.
        batch_size: sentences per forward pass.
        chunk_size: rows read, length-sorted and encoded at a time; memory grows with it, not with
            the file.
        normalize: L2-normalise the embeddings.
        bf16: bfloat16 autocast (fast on GPUs and CPUs with AVX512-BF16/AMX only).
        on_empty: ``error`` (default): an empty row stops the run before encoding, naming it;
            ``zero``: write a zero vector for it.
        encoding: text encoding of txt/jsonl/csv/tsv input.
        device: where to run a model loaded from a name (default: CPU).
        progress: show a progress bar.

    Returns:
        An :class:`EncodeSummary`.

    Raises:
        FileNotFoundError: the input (or the model) does not exist.
        EncodeInputError: a row that cannot be encoded (named), or an unsupported format.
    """
    input_path, output_path = Path(input_path).expanduser(), Path(output_path).expanduser()
    _check_input(input_path)
    out_suffix = output_path.suffix.lower()
    if out_suffix not in SUPPORTED_OUTPUTS:
        raise EncodeInputError(f"{output_path}: unsupported output format {out_suffix!r}; supported: {', '.join(SUPPORTED_OUTPUTS)}")
    if output_path.resolve() == input_path.resolve():
        raise EncodeInputError("the output file is the input file")
    if on_empty not in ("error", "zero"):
        raise ValueError(f"on_empty must be 'error' or 'zero', got {on_empty!r}")
    if batch_size < 1 or chunk_size < 1:
        raise ValueError(f"batch_size and chunk_size must be positive, got {batch_size} and {chunk_size}")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise EncodeInputError(f"unknown text encoding {encoding!r}") from None

    scan = scan_input(input_path, column, encoding)
    if scan.n_empty and on_empty == "error":
        raise _empty_error(input_path, scan)

    if not isinstance(model, nn.Module):
        import unisent

        spec = str(model)
        model = unisent.load(spec, device=device)
    else:
        spec = type(model).__name__
        model.eval()

    output_path.parent.mkdir(parents=True, exist_ok=True)
    if out_suffix == ".npy":
        writer: _NpyWriter | _ParquetWriter = _NpyWriter(output_path, scan.rows)
    else:
        meta = {"model": spec, "input": input_path.name, "column": column, "normalize": normalize, "bf16": bf16,
                "on_empty": on_empty}
        writer = _ParquetWriter(output_path, scan.rows, {"unisent": json.dumps(meta)})

    from tqdm.auto import tqdm

    start = time.perf_counter()
    bar = tqdm(total=scan.rows, desc="encode", unit="sent", disable=not progress, smoothing=0.1)
    try:
        for chunk in _chunks(iter_texts(input_path, column, encoding), chunk_size):
            keep = [i for i, text in enumerate(chunk) if text.strip()]
            if len(keep) == len(chunk):
                block = _as_array(model.encode(chunk, batch_size, normalize=normalize, bf16=bf16))
            else:  # on_empty == "zero" (the scan stopped "error" runs)
                if on_empty != "zero":
                    raise EncodeInputError(f"{input_path}: an empty row appeared after the first pass (the file changed)")
                dim = writer.dim or _as_array(model.encode(["."], 1)).shape[1]
                block = np.zeros((len(chunk), dim), dtype=np.float32)
                if keep:
                    block[keep] = _as_array(model.encode([chunk[i] for i in keep], batch_size, normalize=normalize, bf16=bf16))
            writer.write(block)
            bar.update(len(chunk))
        if scan.rows == 0:  # an empty file: a (0, dim) array
            writer.write(np.zeros((0, _as_array(model.encode(["."], 1)).shape[1]), dtype=np.float32))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    return EncodeSummary(output=output_path, rows=scan.rows, dim=int(writer.dim or 0), empty_rows=scan.n_empty,
                         seconds=time.perf_counter() - start)
