"""Encode a file of sentences to ``.npy`` or ``.parquet`` in chunks, with bounded memory.

Output row ``i`` is always input row ``i``: line ``i + 1`` of a ``.txt`` or ``.jsonl`` file, data
record ``i + 1`` of a ``.csv``/``.tsv`` file (after the header), row ``i + 1`` of a ``.parquet``
file. Nothing is skipped silently: an empty text (blank line, empty cell, null) stops the run before
any encoding, naming its line, unless ``on_empty="zero"`` writes a zero vector for it. A line that
cannot be decoded, an invalid JSON line or a missing column is an error naming the line.

An input without any row is an error ([`EmptyInputError`][unisent.export.EmptyInputError]), and an existing output is
replaced only with ``overwrite=True`` (``--overwrite``; [`OutputExistsError`][unisent.export.OutputExistsError]
otherwise). Inputs longer than the model's maximum length are truncated, as by ``encode``, and counted: one
``TruncationWarning`` per file says how many (``max_length`` changes the length).

The file is read twice: a first pass counts the rows and validates every one (so a problem in the
last line is reported before hours of encoding), the second encodes ``chunk_size`` rows at a time
(``Encoder.encode`` sorts each chunk by length into batches and restores the order) and appends
them to the output, written through [`unisent.io.atomic_write`][unisent.io.atomic_write] (a hidden temporary sibling,
renamed when complete, removed on any error: never a half-written output). The input is read by
[`unisent.data.records.iter_records`][unisent.data.iter_records].
"""

from __future__ import annotations

import codecs
import json
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import nn

from ..data.file_checks import require_file
from ..data.record_errors import RecordError
from ..data.records import iter_records
from ..io import atomic_write
from .exporters import max_length_context

if TYPE_CHECKING:
    from ..models.onnx_encoder import OnnxEncoder

__all__ = [
    "EmptyInputError",
    "EncodeInputError",
    "EncodeSummary",
    "OutputExistsError",
    "SUPPORTED_INPUTS",
    "SUPPORTED_OUTPUTS",
    "encode_file",
    "iter_texts",
]

SUPPORTED_INPUTS = (".txt", ".jsonl", ".csv", ".tsv", ".parquet")
SUPPORTED_OUTPUTS = (".npy", ".parquet")
MAX_LISTED = 10


class EncodeInputError(RecordError):
    """A row of the input cannot be encoded as it is; the message names the file and its line (or row). A
    [`unisent.data.records.RecordError`][unisent.data.RecordError] (``path``, ``line``, ``field`` attributes)."""


class EmptyInputError(EncodeInputError):
    """The input file has no row to encode."""


class OutputExistsError(FileExistsError):
    """The output file exists and ``overwrite`` is off."""


@dataclass
class EncodeSummary:
    """What [`encode_file`][unisent.export.encode_file] wrote.

    Attributes:
        output: the output file.
        rows: rows written (= input rows).
        dim: embedding dimension.
        empty_rows: rows written as zero vectors (``on_empty="zero"``).
        seconds: wall time of the encoding pass.
        truncated: rows longer than the model's maximum length, truncated (warned about once).
        max_length: that maximum length in tokens (None for a model that reports none).
    """

    output: Path
    rows: int
    dim: int
    empty_rows: int
    seconds: float
    truncated: int = 0
    max_length: int | None = None


# ------------------------------------------------------------------------------------------ reading
def _check_input(path: Path) -> None:
    require_file(path, "input file")
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_INPUTS:
        raise EncodeInputError(
            path, 0, f"unsupported input format {suffix!r}; supported: {', '.join(SUPPORTED_INPUTS)}"
        )


def _texts(path: Path, column: str, encoding: str) -> Iterator[tuple[str, str]]:
    try:
        for record in iter_records(
            path, fields=[column], allow_null=True, text_field=column, blank_lines="keep", encoding=encoding
        ):
            value = None if record.data is None else record.data[column]
            if value is not None and not isinstance(value, str):
                raise record.error(f"{column!r} is {type(value).__name__} {value!r}, not a string", field=column)
            yield record.where, value or ""
    except RecordError as err:
        if isinstance(err, EncodeInputError):
            raise
        hint = "; choose one with --column" if err.field == column else ""
        raise EncodeInputError(err.path, err.line, err.reason + hint, field=err.field, unit=err.unit) from None


def iter_texts(path: str | os.PathLike, column: str = "text", encoding: str = "utf-8") -> Iterator[tuple[str, str]]:
    """Stream ``(where, text)`` for every row of a ``.txt``/``.jsonl``/``.csv``/``.tsv``/``.parquet`` file.

    ``where`` names the row (``line 12``, ``row 12``); an empty text (a blank line, an empty cell, a
    null) is returned as ``""`` (the caller decides). ``.txt`` has one sentence per line; ``.jsonl`` an
    object with ``column`` (or a JSON string) per line; ``.csv``/``.tsv`` a header with ``column``;
    ``.parquet`` a string ``column``. Read by [`unisent.data.records.iter_records`][unisent.data.iter_records].

    Raises:
        FileNotFoundError: the file does not exist.
        EncodeInputError: an unsupported format, or a row that cannot be read (named).
    """
    path = Path(path).expanduser()
    _check_input(path)
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise EncodeInputError(path, 0, f"unknown text encoding {encoding!r}") from None
    return _texts(path, column, encoding)


# ------------------------------------------------------------------------------------------ writing
class _NpyWriter:
    """Appends float32 rows to a ``.npy`` with plain writes (nothing memory-mapped, RSS stays flat)."""

    def __init__(self, fh: IO[bytes], rows: int) -> None:
        self.fh, self.rows, self.written = fh, rows, 0
        self.dim: int | None = None

    def write(self, block: np.ndarray) -> None:
        if self.dim is None:
            self.dim = int(block.shape[1])
            header = {"descr": "<f4", "fortran_order": False, "shape": (self.rows, self.dim)}  # float32, little-endian
            np.lib.format.write_array_header_1_0(self.fh, header)
        self.fh.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
        self.written += len(block)

    def close(self) -> None:
        if self.written != self.rows:
            raise RuntimeError(
                f"wrote {self.written} rows, expected {self.rows} (did the input change while encoding?)"
            )

    def abort(self) -> None:
        pass


class _ParquetWriter(_NpyWriter):
    """Appends ``row`` (input row, 0-based) and ``embedding`` (fixed-size float32 list) row groups."""

    def __init__(self, fh: IO[bytes], rows: int, metadata: dict[str, str]) -> None:
        super().__init__(fh, rows)
        self.metadata, self.writer = metadata, None

    def write(self, block: np.ndarray) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            self.dim = int(block.shape[1])
            schema = pa.schema([("row", pa.int64()), ("embedding", pa.list_(pa.float32(), self.dim))])
            self.writer = pq.ParquetWriter(self.fh, schema.with_metadata(self.metadata))
        flat = pa.array(np.ascontiguousarray(block, dtype=np.float32).reshape(-1))
        table = pa.table(
            {
                "row": pa.array(np.arange(self.written, self.written + len(block), dtype=np.int64)),
                "embedding": pa.FixedSizeListArray.from_arrays(flat, self.dim),
            }
        )
        self.writer.write_table(table)
        self.written += len(block)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        super().close()

    def abort(self) -> None:
        """Release the Parquet writer (its file is the temporary one, which ``atomic_write`` removes)."""
        with suppress(Exception):  # its file is discarded anyway
            if self.writer is not None:  # None: no block written yet
                self.writer.close()


# ------------------------------------------------------------------------------------------ encoding
def _as_array(embeddings: Any) -> np.ndarray:
    if isinstance(embeddings, torch.Tensor):
        return embeddings.detach().float().cpu().numpy()
    return np.asarray(embeddings, dtype=np.float32)


def _chunks(rows: Iterator[tuple[str, str]], size: int) -> Iterator[list[str]]:
    texts = (text for _, text in rows)
    while chunk := list(islice(texts, size)):
        yield chunk


def encode_file(
    model: str | os.PathLike | nn.Module | OnnxEncoder,
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    column: str = "text",
    batch_size: int = 64,
    chunk_size: int = 8192,
    normalize: bool = False,
    precision: Literal["auto", "fp32", "bf16"] = "auto",
    on_empty: Literal["error", "zero"] = "error",
    encoding: str = "utf-8",
    device: str | None = None,
    progress: bool = True,
    max_length: int | None = None,
    overwrite: bool = False,
    backend: str = "torch",
    onnx_file: str | None = None,
    truncate_dim: int | None = None,
) -> EncodeSummary:
    """Embed every row of ``input_path`` into ``output_path`` (``.npy`` or ``.parquet``), streaming.

    Args:
        model: anything ``unisent.load`` takes (preset, saved or exported directory, ``.ckpt``), or a
            loaded model with ``encode(sentences, batch_size, normalize=..., precision=...)`` (an
            [`OnnxEncoder`][unisent.export.OnnxEncoder] too).
        input_path: ``.txt`` (one sentence per line), ``.jsonl``, ``.csv``, ``.tsv`` or ``.parquet``.
        output_path: ``.npy`` (float32, shape (rows, dim); ``numpy.load(..., mmap_mode="r")`` reads
            it without loading it) or ``.parquet`` (columns ``row`` and ``embedding``).
        column: the text field of jsonl/csv/tsv/parquet input.
        batch_size: sentences per forward pass.
        chunk_size: rows read, length-sorted and encoded at a time; memory grows with it, not with
            the file.
        normalize: L2-normalise the embeddings.
        precision: ``auto`` (default: bf16 on GPUs with bf16 and CPUs with AVX512-BF16/AMX, fp32 elsewhere;
            ``unisent.hardware``), ``fp32`` or ``bf16``; passed to the model's ``encode``.
        on_empty: ``error`` (default): an empty row stops the run before encoding, naming it;
            ``zero``: write a zero vector for it.
        encoding: text encoding of txt/jsonl/csv/tsv input.
        device: where to run a model loaded from a name (default: CPU).
        progress: show a progress bar.
        max_length: the longest input in tokens (default: the model's own); longer ones are
            truncated, and one ``TruncationWarning`` gives their count.
        overwrite: replace an existing ``output_path``.
        backend: ``torch`` or ``onnx`` (a model given by name: a directory of ``unisent export --format
            onnx``, run by onnxruntime).
        onnx_file: with ``backend="onnx"``: ``int8``, ``fp32`` or a file name (default: int8 where there is one).
        truncate_dim: keep the first ``truncate_dim`` coordinates of each embedding (a Matryoshka-trained model),
            normalised after the cut with ``normalize`` (``TruncatedModel``).

    Returns:
        An [`EncodeSummary`][unisent.export.EncodeSummary].

    Raises:
        FileNotFoundError: the input (or the model) does not exist.
        OutputExistsError: ``output_path`` exists and ``overwrite`` is off.
        EmptyInputError: the input has no row.
        EncodeInputError: a row that cannot be encoded (named), or an unsupported format.
        ValueError: ``max_length`` for a model without one, or longer than its backbone's positions;
            ``truncate_dim`` not positive or above the model's dimension.
    """
    input_path, output_path = Path(input_path).expanduser(), Path(output_path).expanduser()
    _check_arguments(input_path, output_path, overwrite, on_empty, max_length, batch_size, chunk_size)
    rows, n_empty = _scan_all(input_path, column, encoding, on_empty)
    model, spec = _model_to_run(model, device, backend, onnx_file, truncate_dim)
    meta = {"model": spec, "input": input_path.name, "column": column, "normalize": normalize}
    meta |= {"precision": precision, "on_empty": on_empty, "backend": getattr(model, "backend", "torch")}
    meta |= {k: v for k, v in (("max_length", max_length), ("truncate_dim", truncate_dim)) if v is not None}
    from tqdm.auto import tqdm

    from ..encoders.batching import TruncationWarning, collect_truncation, truncation_message

    length_context = nullcontext(None) if max_length is None else max_length_context(model, max_length)

    start = time.perf_counter()
    bar = tqdm(total=rows, desc="encode", unit="sent", disable=not progress, smoothing=0.1)
    try:
        with length_context, collect_truncation() as truncation, atomic_write(output_path, "wb") as fh:
            writer: _NpyWriter | _ParquetWriter = (
                _NpyWriter(fh, rows)
                if output_path.suffix.lower() == ".npy"
                else _ParquetWriter(fh, rows, {"unisent": json.dumps(meta)})
            )
            try:
                for chunk in _chunks(iter_texts(input_path, column, encoding), chunk_size):
                    if on_empty != "zero" and not all(text.strip() for text in chunk):  # the scan stopped those
                        raise EncodeInputError(
                            input_path, 0, "an empty row appeared after the first pass (the file changed)"
                        )
                    writer.write(_encode_chunk(model, chunk, writer.dim, batch_size, normalize, precision))
                    bar.update(len(chunk))
                writer.close()
            except BaseException:
                writer.abort()
                raise
    finally:
        bar.close()
    truncated, _, limit = truncation.worst
    if truncated:  # once for the whole file
        hint = "pass --max-length (max_length=...)"
        message = truncation_message(truncated, rows - n_empty, limit, hint)
        warnings.warn(TruncationWarning(message), stacklevel=2)
    return EncodeSummary(
        output=output_path,
        rows=rows,
        dim=int(writer.dim or 0),
        empty_rows=n_empty,
        seconds=time.perf_counter() - start,
        truncated=truncated,
        max_length=limit or getattr(getattr(model, "config", None), "max_length", None),
    )


def _check_arguments(
    input_path: Path, output_path: Path, overwrite: bool, on_empty: str, length: int | None, *sizes: int
) -> None:
    """[`encode_file`][unisent.export.encode_file]'s checks before the input is read (``sizes``: batch and chunk)."""
    _check_input(input_path)
    out_suffix = output_path.suffix.lower()
    if out_suffix not in SUPPORTED_OUTPUTS:
        raise EncodeInputError(
            output_path, 0, f"unsupported output format {out_suffix!r}; supported: {', '.join(SUPPORTED_OUTPUTS)}"
        )
    if output_path.resolve() == input_path.resolve():
        raise EncodeInputError(output_path, 0, "the output file is the input file")
    if on_empty not in ("error", "zero"):
        raise ValueError(f"on_empty must be 'error' or 'zero', got {on_empty!r}")
    batch_size, chunk_size = sizes
    if batch_size < 1 or chunk_size < 1:
        raise ValueError(f"batch_size and chunk_size must be positive, got {batch_size} and {chunk_size}")
    if length is not None and length < 1:
        raise ValueError(f"max_length must be a positive number of tokens, got {length}")
    if output_path.exists() and not overwrite:
        raise OutputExistsError(f"{output_path} exists; pass --overwrite (overwrite=True) to replace it")


def _scan_all(input_path: Path, column: str, encoding: str, on_empty: str) -> tuple[int, int]:
    """The first pass: count and validate the rows of ``input_path``: ``(rows, empty rows)``; no rows, or empty
    rows under ``on_empty="error"``, raise."""
    rows = n_empty = 0
    empty: list[tuple[int, str]] = []  # (output row, where) of the first MAX_LISTED empty rows
    for row, (where, text) in enumerate(iter_texts(input_path, column, encoding)):
        rows += 1
        if not text.strip():
            n_empty += 1
            if len(empty) < MAX_LISTED:
                empty.append((row, where))
    if rows == 0:
        header = ", or has only a header" if input_path.suffix.lower() in (".csv", ".tsv") else ""
        raise EmptyInputError(
            input_path, 0, f"has no sentences to encode (the file is empty{header}); nothing was written"
        )
    if n_empty and on_empty == "error":
        listed = "; ".join(f"{where} (output row {row})" for row, where in empty)
        more = f" and {n_empty - len(empty)} more" if n_empty > len(empty) else ""
        raise EncodeInputError(
            input_path,
            0,
            f"{empty[0][1]} is empty: {n_empty} empty row(s) of {rows}: {listed}{more}. Every row "
            f"must be a sentence so that output rows line up with input rows; remove them, or pass --on-empty zero "
            f"(on_empty='zero') to write a zero vector for each",
        )
    return rows, n_empty


def _model_to_run(
    model: Any, device: str | None, backend: str, onnx_file: str | None, truncate_dim: int | None
) -> tuple[Any, str]:
    """``(the model, its name in the output's metadata)``: loaded when named, cut to ``truncate_dim``."""
    if isinstance(model, (str, os.PathLike)):
        from .._loader import load

        spec = str(model)
        model = load(spec, device=device, backend=backend, onnx_file=onnx_file)
    else:
        spec = str(getattr(model, "directory", "") or type(model).__name__)
        model.eval()
    if truncate_dim is not None:
        from ..inference.truncation import TruncatedModel

        model = TruncatedModel(model, truncate_dim)
    return model, spec


def _encode_chunk(
    model: Any, chunk: list[str], dim: int | None, batch_size: int, normalize: bool, precision: str
) -> np.ndarray:
    """The rows of ``chunk``; an empty row (``on_empty="zero"``) a zero vector."""
    keep = [i for i, text in enumerate(chunk) if text.strip()]
    if len(keep) == len(chunk):
        return _as_array(model.encode(chunk, batch_size, normalize=normalize, precision=precision))
    block = np.zeros((len(chunk), dim or _as_array(model.encode(["."], 1, precision=precision)).shape[1]), np.float32)
    if keep:
        texts = [chunk[i] for i in keep]
        block[keep] = _as_array(model.encode(texts, batch_size, normalize=normalize, precision=precision))
    return block
