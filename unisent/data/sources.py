"""One [`DataSource`][unisent.data.DataSource] for every objective, read through ``datasets.load_dataset``
(docs/training.md).

Records are checked with Arrow compute on the loaded table (cheap next to tokenising). When ``load_dataset`` cannot
parse a local file, or the check finds a malformed record in one, the file is read again by
[`unisent.data.checked_records.read_records`][unisent.data.read_records], whose errors name the line and field
(``load_dataset``'s parse errors do not); that reading is also what ``on_error: skip`` keeps. Records of a Hub dataset
or a repository directory are named by their row.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import glob as globlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ..io.remote import is_remote
from .file_checks import check_data_folder, not_a_regular_file, require_lines_within
from .record_errors import MAX_LISTED, RecordError, no_column, report_malformed
from .records import FORMATS

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["DataSource", "ResolvedSource", "load_source", "resolve_source", "source_fingerprint"]

#: record format (a suffix of ``unisent.data.records.FORMATS``, or ``format:``) -> ``load_dataset`` builder
BUILDERS = {
    "jsonl": "json",
    "json": "json",
    "csv": "csv",
    "tsv": "csv",
    "txt": "text",
    "text": "text",
    "parquet": "parquet",
    "arrow": "arrow",
}
_SUFFIX_FORMATS = {**FORMATS, ".arrow": "arrow"}
_LOCAL_FORMATS = {"jsonl", "csv", "tsv", "txt", "parquet"}  # the record reader names their lines


@dataclass
class DataSource:
    """The training data of one objective.

    Attributes:
        path: a local file (``.jsonl``/``.json``, ``.csv``, ``.tsv``, ``.txt`` = one sentence per line,
            field ``text``, ``.parquet``, ``.arrow``), a glob of such files (``data/part-*.parquet``), such a
            file or glob in object storage (``s3://bucket/data/part-*.jsonl``: streamed with ``streaming``,
            else downloaded into ``$UNISENT_CACHE/remote``), a
            directory (a dataset repository with data files and an optional README ``configs``
            section, or a directory written by ``Dataset.save_to_disk``), or a Hugging Face Hub dataset
            id (``sentence-transformers/all-nli``). Read by ``datasets.load_dataset``.
        name: the dataset configuration (``pair-class``; a README ``configs`` entry).
        split: the split to train on.
        revision: a Hub revision (branch, tag or commit).
        data_files: ``load_dataset``'s ``data_files`` (files of a repository or Hub dataset).
        format: the format of local files when their suffix does not tell (``jsonl``, ``csv``, ``tsv``,
            ``txt``, ``parquet``, ``arrow``).
        columns: renames ``{column in the data: field the objective expects}``, e.g.
            ``{sent0: anchor, sent1: positive, hard_neg: negative}`` for SimCSE's NLI csv.
        max_records: read only the first N records (0 = all).
        on_error: ``raise`` (default) lists every bad record and stops; ``skip`` drops them, counts
            them and reports them in a warning.
        streaming: read the data as a stream (``load_dataset(streaming=True)``): nothing is converted
            or cached, records are tokenised as they are trained on; for corpora larger than memory or
            disk. Needs ``trainer.max_steps``; see ``unisent.data.tokenized_stream``.
        shuffle_buffer: with ``streaming``: records are shuffled in a buffer of this size (and the
            order of the files is shuffled); 0 keeps the stream's order.
    """

    path: str
    name: str | None = None
    split: str = "train"
    revision: str | None = None
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    format: Literal["jsonl", "json", "csv", "tsv", "txt", "text", "parquet", "arrow"] | None = None
    columns: dict[str, str] = field(default_factory=dict)
    max_records: int = 0
    on_error: Literal["raise", "skip"] = "raise"
    streaming: bool = False
    shuffle_buffer: int = 10_000

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.format is not None and self.format not in BUILDERS:
            raise ValueError(f"format must be one of {', '.join(BUILDERS)}, got {self.format!r}")
        if self.max_records < 0 or self.shuffle_buffer < 0:
            raise ValueError(
                f"max_records and shuffle_buffer must be >= 0, got {self.max_records}, {self.shuffle_buffer}"
            )


@dataclass(frozen=True)
class ResolvedSource:
    """What a [`DataSource`][unisent.data.DataSource] names: ``kind`` is ``files`` (local files of one ``format``),
    ``saved`` (a ``save_to_disk`` directory), ``repo`` (a local dataset repository directory) or ``hub``."""

    source: DataSource
    kind: Literal["files", "saved", "repo", "hub"]
    files: tuple[Path, ...] = ()
    format: str | None = None
    #: the source's key in the recipe (``data.train.simcse``), named by the hints of malformed records
    key: str | None = None
    #: ``streaming`` files in object storage (``s3://...``), read where they are; without streaming such
    #: files are downloaded (``unisent.io.remote.localize``) and stand in ``files``
    urls: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How errors name the source: the file, or the path/id with its configuration."""
        if self.kind in ("files", "saved") and len(self.files) == 1:
            return str(self.files[0])
        if len(self.urls) == 1:
            return self.urls[0]
        extra = [
            f"{k}={v}" for k, v in (("name", self.source.name), ("revision", self.source.revision)) if v is not None
        ]
        return f"{self.source.path}[{', '.join([*extra, f'split={self.source.split}'])}]"


def _format_of(path: Path, source: DataSource) -> str:
    if source.format is not None:
        return "jsonl" if source.format == "json" else "txt" if source.format == "text" else source.format
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"{path}: unsupported format {path.suffix.lower()!r}; supported: "
            f"{', '.join(_SUFFIX_FORMATS)}, a dataset directory or a Hub id (or name one with format:)"
        )
    return fmt


def _looks_local(path: str) -> bool:
    """A path a user meant as a local file (a Hub id is ``owner/name`` without a suffix)."""
    p = Path(path)
    return (
        path.startswith(("/", ".", "~"))
        or p.suffix.lower() in _SUFFIX_FORMATS
        or os.sep + os.sep in path
        or len(p.parts) > 2
        or os.path.isabs(path)
    )


def resolve_source(source: DataSource | str) -> ResolvedSource:
    """Find what ``source.path`` names (see ``ResolvedSource``): ``FileNotFoundError`` for a local
    path or glob that does not exist, ``ValueError`` for an unknown suffix or a glob of mixed formats."""
    if isinstance(source, str):
        source = DataSource(path=source)
    raw = source.path
    if is_remote(raw):
        return _resolve_remote(source)
    path = Path(raw).expanduser()
    if globlib.has_magic(raw):
        files = sorted(Path(f) for f in globlib.glob(str(path), recursive=True) if Path(f).is_file())
        if not files:
            raise FileNotFoundError(errno.ENOENT, "training data: no file matches the pattern", raw)
    else:
        special = not_a_regular_file(path, "training data file")
        if special is not None:  # a FIFO, socket, device or link loop: refused, never opened
            raise special
        files = [path] if path.is_file() else []
    if files:
        fmt = _one_format(raw, files, source)
        _check_lines(files, fmt)
        return ResolvedSource(source, "files", tuple(files), fmt)
    if path.is_dir():
        check_data_folder(path)  # regular files only, no link out, its card's and state's paths inside it
        if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
            return ResolvedSource(source, "saved", (path,))
        if (path / "dataset_dict.json").is_file():
            raise RecordError(
                path,
                0,
                "holds a dataset dictionary (splits: "
                f"{', '.join(sorted(p.name for p in path.iterdir() if p.is_dir()))}); "
                "point at the directory of one split",
            )
        return ResolvedSource(source, "repo", (path,))
    if _looks_local(raw):
        raise FileNotFoundError(errno.ENOENT, "training data file does not exist", str(path))
    return ResolvedSource(source, "hub")


def _resolve_remote(source: DataSource) -> ResolvedSource:
    """A URL (glob) of files: streamed where they are, else downloaded into the cache and read as local files."""
    from ..io.remote import glob, localize

    raw = source.path
    found = [url for url, _ in glob(raw)]
    if not found:
        raise FileNotFoundError(errno.ENOENT, "training data: no object matches (name files or a glob of them)", raw)
    fmt = _one_format(raw, [Path(url.rsplit("/", 1)[-1]) for url in found], source)
    if source.streaming:
        return ResolvedSource(source, "files", (), fmt, urls=tuple(found))
    files = tuple(Path(localize(url, "file")) for url in found)
    _check_lines(files, fmt)
    return ResolvedSource(source, "files", files, fmt)


def _one_format(raw: str, files: Sequence[Path], source: DataSource) -> str:
    """The one format of the files (a glob's); a ``ValueError`` when they have several."""
    formats = {_format_of(f, source) for f in files}
    if len(formats) > 1:
        raise ValueError(
            f"training data {raw!r} matches files of several formats ({', '.join(sorted(formats))}); "
            "narrow the pattern or name one with format:"
        )
    return formats.pop()


def _check_lines(files: Sequence[Path], fmt: str) -> None:
    """Refuse a text file's line of 200 MB before ``datasets`` reads it whole."""
    if fmt in _LOCAL_FORMATS and fmt != "parquet":
        for file in files:
            require_lines_within(file)


def source_fingerprint(resolved: ResolvedSource, dataset=None) -> dict[str, Any]:
    """What identifies a source's data in a cache key: its description and each local file's path, size and
    modification time, or ``datasets``' fingerprint of a loaded repository or Hub dataset."""
    described = ("path", "name", "split", "revision", "data_files", "columns", "max_records", "on_error")
    parts: dict[str, Any] = {"kind": resolved.kind, "format": resolved.format}
    parts.update({name: getattr(resolved.source, name) for name in described})
    if resolved.kind in ("files", "saved"):
        files = resolved.files
        if resolved.kind == "saved":
            files = tuple(sorted(p for p in resolved.files[0].rglob("*") if p.is_file()))
        parts["files"] = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    elif dataset is not None:
        parts["datasets_fingerprint"] = getattr(dataset, "_fingerprint", None)
    return parts


# ------------------------------------------------------------------------------------------ loading
def _builder_kwargs(resolved: ResolvedSource) -> tuple[str, dict[str, Any]]:
    fmt = resolved.format or ""  # kind "files": resolve_source always sets it
    kwargs: dict[str, Any] = {"data_files": [str(f) for f in resolved.files] or list(resolved.urls)}
    if fmt in ("csv", "tsv"):
        import csv

        import fsspec

        first = resolved.files[0] if resolved.files else resolved.urls[0]
        with fsspec.open(str(first), "rt", encoding="utf-8-sig", newline="") as fh:
            header = next(csv.reader(fh, delimiter="," if fmt == "csv" else "\t"), [])
        # every field as the text it is (pandas would read "007" as 7 and "NA" as null), blank lines kept
        kwargs.update(
            sep="," if fmt == "csv" else "\t",
            na_filter=False,
            keep_default_na=False,
            skip_blank_lines=False,
            converters={name: str for name in header},
            encoding="utf-8-sig",
        )
    elif fmt == "txt":
        kwargs["encoding"] = "utf-8-sig"  # a byte-order mark is dropped, as the record reader does
    return BUILDERS[fmt], kwargs


def _hub_error(resolved: ResolvedSource, err: Exception) -> FileNotFoundError:
    from datasets import config

    offline = " (offline: HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)" if config.HF_HUB_OFFLINE else ""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return FileNotFoundError(
        f"training data {resolved.source.path!r} is no local file, directory or glob, and the Hugging Face dataset "
        f"{resolved.label} is not in the datasets cache ({config.HF_DATASETS_CACHE}) and could not be downloaded"
        f"{offline}: {reason}. Download it once with network access, or point path at a local copy."
    )


@contextlib.contextmanager
def _parse_errors_once(builder: str):
    """Silence the builder's own ERROR log of a parse failure (unisent reports it, naming the line) and
    end the interrupted progress bar's line."""
    import sys

    from datasets.utils import logging as ds_logging

    logger = ds_logging.get_logger(f"datasets.packaged_modules.{builder}.{builder}")
    level = logger.level
    logger.setLevel(ds_logging.CRITICAL)
    try:
        yield
    except Exception:
        if ds_logging.is_progress_bar_enabled():
            sys.stderr.write("\n")
        raise
    finally:
        logger.setLevel(level)


def open_dataset(resolved: ResolvedSource, streaming: bool = False):
    """A resolved source as a ``Dataset`` (an ``IterableDataset`` with ``streaming``), through
    ``load_dataset`` or ``load_from_disk``. Parse errors of local files propagate."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    source = resolved.source
    if resolved.kind == "saved":
        dataset = cast("Dataset", datasets.load_from_disk(str(resolved.files[0])))  # one split: resolve_source
        return dataset.to_iterable_dataset(num_shards=max(1, min(64, len(dataset) // 10_000))) if streaming else dataset
    if resolved.kind == "files" and resolved.urls and resolved.format == "txt":
        # datasets' text builder hands its encoding to the remote file system as an option (refused by s3fs)
        return datasets.IterableDataset.from_generator(
            _remote_lines,
            gen_kwargs={"urls": list(resolved.urls)},
            features=datasets.Features(text=datasets.Value("string")),
        )
    if resolved.kind == "files":
        builder, kwargs = _builder_kwargs(resolved)
        with _parse_errors_once(builder):
            return datasets.load_dataset(builder, split="train", streaming=streaming, **kwargs)
    kwargs = {key: getattr(source, key) for key in ("name", "split", "revision", "data_files")}
    if resolved.kind == "repo":
        return datasets.load_dataset(str(Path(source.path).expanduser()), streaming=streaming, **kwargs)
    try:
        return datasets.load_dataset(source.path, streaming=streaming, **kwargs)
    except (ConnectionError, FileNotFoundError, OSError, DatasetNotFoundError) as err:
        raise _hub_error(resolved, err) from None


def _remote_lines(urls: list[str]):
    """Remote text files' lines as datasets' text builder reads local ones (a byte-order mark dropped)."""
    import fsspec

    for url in urls:
        with fsspec.open(url, "rt", encoding="utf-8-sig") as fh:
            for line in fh:
                yield {"text": line.rstrip("\n")}


def select_fields(dataset, resolved: ResolvedSource, required: Sequence[str], optional: Sequence[str] = ()):
    """``dataset`` with its columns renamed (``columns:``) and reduced to ``required``; a required
    column that is absent is an error of the whole source, an absent optional one reads as null."""
    source = resolved.source
    original: list[str] = list(dataset.column_names)
    rename = {old: new for old, new in source.columns.items() if old in original and old != new}
    if rename:
        dataset = dataset.rename_columns(rename)
    names = [rename.get(n, n) for n in original]
    missing = [k for k in required if k not in optional and k not in names]
    if missing:
        raise no_column(resolved.label, missing, original, names if rename else None)
    for key in required:
        if key not in names:  # an optional field no record has
            dataset = dataset.add_column(key, [None] * len(dataset))
    return dataset.select_columns(list(required))


def problem_rows(table, required: Sequence[str], text_keys: Sequence[str], optional: Sequence[str]) -> dict[int, str]:
    """``{row index: problem}`` of an Arrow table's records (a null required field, a text field that is
    not a non-blank string), computed with Arrow compute; empty when every record is good."""
    import pyarrow as pa
    import pyarrow.compute

    pc: Any = pyarrow.compute  # its functions are made at import time: the type checker sees none of them

    found: dict[int, str] = {}
    for key in required:
        column = table.column(key)
        if key not in optional and column.null_count:
            for i in pc.indices_nonzero(pc.is_null(column)).to_pylist():
                found.setdefault(i, f"field {key!r} is missing (null)")
        if key in text_keys and len(column):
            if not (
                pa.types.is_string(column.type)
                or pa.types.is_large_string(column.type)
                or pa.types.is_null(column.type)
            ):
                kind = type(pc.drop_null(column)[0].as_py()).__name__ if len(pc.drop_null(column)) else "?"
                for i in pc.indices_nonzero(pc.is_valid(column)).to_pylist():
                    found.setdefault(i, f"field {key!r} must be a string, got {kind}")
                continue
            if pa.types.is_null(column.type):
                continue
            blank = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(column)), 0), False)
            for i in pc.indices_nonzero(blank).to_pylist():
                found.setdefault(i, f"field {key!r} is an empty sentence")
            nul = pc.fill_null(pc.match_substring(column, "\x00"), False)  # the record reader names its line
            for i in pc.indices_nonzero(nul).to_pylist():
                found.setdefault(i, f"field {key!r} holds a NUL character")
    return found


def _read_by_lines(resolved: ResolvedSource, required, text_keys, optional):
    """The record reader on each file: line numbers in the errors, ``on_error: skip`` applied."""
    import datasets

    from .checked_records import read_records

    source = resolved.source
    parts = []
    left = source.max_records
    for path in resolved.files:
        part = DataSource(path=str(path), columns=source.columns, max_records=left, on_error=source.on_error)
        columns = read_records(part, required, text_keys, optional, source_key=resolved.key)
        parts.append(datasets.Dataset.from_dict(columns))
        if source.max_records:
            left -= len(parts[-1])
            if left <= 0:
                break
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def load_source(
    source: DataSource | ResolvedSource | str,
    required: Sequence[str],
    text_keys: Sequence[str] = (),
    optional: Sequence[str] = (),
):
    """Load a (map-style) source as a ``datasets.Dataset`` of the ``required`` fields, every record checked
    (see the module docstring)."""
    resolved = source if isinstance(source, ResolvedSource) else resolve_source(source)
    source = resolved.source
    line_reader = resolved.kind == "saved" or (resolved.kind == "files" and resolved.format in _LOCAL_FORMATS)
    by_lines = functools.partial(_read_by_lines, resolved, required, text_keys, optional)
    try:
        dataset = cast("Dataset", open_dataset(resolved))  # map-style: not streaming
    except Exception:
        if not line_reader:
            raise
        return by_lines()  # raises the record reader's error naming the line (or reads what it can)
    if not line_reader and resolved.kind in ("files", "saved") and len(dataset) == 0:
        raise RecordError(resolved.label, 0, f"no usable records (fields needed: {', '.join(required)})")
    try:
        dataset = select_fields(dataset, resolved, required, optional)
    except RecordError:
        if line_reader:
            return by_lines()
        raise
    if source.max_records and source.max_records < len(dataset):
        dataset = dataset.select(range(source.max_records))
    table = dataset.with_format("arrow")[:]
    try:
        table.validate(full=True)  # datasets' json builder takes bytes that are not UTF-8 into its strings
    except Exception:  # noqa: BLE001 - pyarrow.ArrowInvalid: named by the record reader, line by line
        if line_reader:
            return by_lines()
        raise RecordError(resolved.label, 0, "holds text that is not valid UTF-8") from None
    problems = problem_rows(table, required, text_keys, optional)
    if problems or len(dataset) == 0:
        if line_reader:
            return by_lines()
        if not problems:
            raise RecordError(resolved.label, 0, f"no usable records (fields needed: {', '.join(required)})")
        bad = sorted(problems)  # said as the record reader says lines, by row
        listed = [f"{resolved.label}:row {i + 1}: {problems[i]}" for i in bad[:MAX_LISTED]]
        kept = len(dataset) - len(bad)
        report_malformed(resolved.label, listed, len(bad), required, source.on_error, kept, resolved.key)
        keep = sorted(set(range(len(dataset))) - set(bad))
        if not keep:
            raise RecordError(resolved.label, 0, f"no usable records (fields needed: {', '.join(required)})")
        dataset = dataset.select(keep)
    return dataset
