"""Checks of a data file before it is read: a regular file (not a FIFO, a device, a link loop), and no line longer than
one record can be (``max_line_bytes``); a data folder as a model directory is (``check_data_folder``)."""

from __future__ import annotations

import os
from pathlib import Path

from ..io import model_files as mf
from ..io.model_files import ModelFileError, file_kind
from .record_errors import RecordError

__all__ = [
    "check_data_folder",
    "line_too_long",
    "max_line_bytes",
    "not_a_regular_file",
    "require_file",
    "require_lines_within",
]

#: the longest line (record) of a text data file, in bytes; a longer line (hundreds of MB are no sentence)
#: is refused, naming the file, line and limit, before it is read into memory
MAX_LINE_BYTES = 16 * 2**20
MAX_LINE_ENV = "UNISENT_MAX_LINE_BYTES"


def max_line_bytes() -> int:
    """The longest line of a text data file in bytes: ``UNISENT_MAX_LINE_BYTES`` or ``MAX_LINE_BYTES``."""
    value = os.environ.get(MAX_LINE_ENV, "").strip()
    if not value:
        return MAX_LINE_BYTES
    try:
        limit = int(value)
    except ValueError:
        raise ValueError(f"{MAX_LINE_ENV}={value!r} must be a number of bytes") from None
    if limit < 1:
        raise ValueError(f"{MAX_LINE_ENV}={value!r} must be a positive number of bytes")
    return limit


def line_too_long(path: Path, line: int, limit: int) -> RecordError:
    size = f"{limit / 2**20:.0f} MiB" if limit >= 2**20 else f"{limit} bytes"
    return RecordError(
        path,
        line,
        f"is longer than {size} ({limit} bytes), the limit of one record; a data file has one "
        f"record per line (split the file, or raise the limit with {MAX_LINE_ENV}=BYTES)",
    )


def not_a_regular_file(path: str | os.PathLike, what: str = "data file") -> OSError | None:
    """The error for a ``path`` that exists (or is a link) but is no regular file or directory: a FIFO,
    socket or device (reading one could wait forever), a symbolic link loop or a broken link; ``None``
    for a regular file, a directory or a path that does not exist at all."""
    import errno
    import stat

    path = Path(path).expanduser()
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return OSError(f"{what} {str(path)!r} is a symbolic link loop (a link that leads back to itself)")
        if os.path.islink(path):
            return FileNotFoundError(f"{what} {str(path)!r} is a broken symbolic link (to {os.readlink(path)!r})")
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = file_kind(mode)  # the words a model file's refusal uses too (unisent.io.model_files)
    return OSError(f"{what} {str(path)!r} is {kind}, not a regular file; unisent reads data from regular files only")


def require_file(path: str | os.PathLike, what: str = "data file") -> Path:
    """``path`` as a ``Path``; ``FileNotFoundError``, ``IsADirectoryError`` or (see
    ``not_a_regular_file``) ``OSError``, naming it, if it is no regular file."""
    path = Path(path).expanduser()
    special = not_a_regular_file(path, what)
    if special is not None:
        raise special
    if not path.exists():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise IsADirectoryError(f"{what} {str(path)!r} is a directory, not a file")
    return path


def require_lines_within(path: str | os.PathLike, limit: int | None = None) -> None:
    """Raise a [`RecordError`][unisent.data.RecordError] naming the first line of ``path`` longer than ``limit`` bytes
    (default ``max_line_bytes``), before ``datasets``' builders read whole lines. Reads one block at a time; a file
    smaller than the limit is not read."""
    limit = max_line_bytes() if limit is None else limit
    path = Path(path)
    if path.stat().st_size <= limit:
        return
    block = max(1, min(limit, 4 * 2**20))
    run = 0  # bytes since the last newline
    lines = 0  # newlines before this block
    with path.open("rb") as fh:
        while chunk := fh.read(block):
            first = chunk.find(b"\n")
            if first == -1:
                run += len(chunk)
                if run > limit:
                    raise line_too_long(path, lines + 1, limit)
                continue
            if run + first > limit:
                raise line_too_long(path, lines + 1, limit)
            # lines that start and end inside this block are shorter than the block, which is <= limit
            lines += chunk.count(b"\n")
            run = len(chunk) - chunk.rfind(b"\n") - 1  # shorter than the block, which is <= limit


def _card_paths(value: object, field: str):
    """``(field, text)`` of every string under a card's ``data_files`` / ``data_dir`` (split names too: harmless)."""
    if isinstance(value, str):
        yield field, value
    elif isinstance(value, (list, dict)):
        items = enumerate(value) if isinstance(value, list) else value.items()
        for key, item in items:
            yield from _card_paths(item, f"{field}[{key}]" if isinstance(value, list) else f"{field}.{key}")


def _card_files(card: Path):
    """The paths a dataset card (``README.md``'s YAML header) names in its ``configs``."""
    meta = mf.read_front_matter(card, 16 * 2**20, "a dataset card")
    configs = meta.get("configs") if isinstance(meta, dict) else None
    for i, config in enumerate(configs if isinstance(configs, list) else []):
        for key in ("data_files", "data_dir"):
            yield from _card_paths((config or {}).get(key) if isinstance(config, dict) else None, f"configs[{i}].{key}")


def check_data_folder(folder: str | os.PathLike) -> Path:
    """A data folder a user hands over (``load_dataset(DIR)``, ``save_to_disk``) read as data, before ``datasets`` opens
    anything: the walk of [`check_model_directory`][unisent.io.check_model_directory] (regular files only, no link out,
    nothing skipped), no loading script at its root, and every file its card (``README.md``'s ``data_files``) or
    ``state.json`` (``_data_files``) names inside it; a [`ModelFileError`][unisent.io.ModelFileError] naming the
    file."""
    folder = mf.check_model_directory(folder, what="data folder", read=False)
    scripts = sorted(folder.glob("*.py"))
    if scripts:
        raise ModelFileError(
            f"{scripts[0]}: a dataset loading script; unisent never runs a data folder's code (give the data as "
            ".jsonl, .csv, .parquet or .txt files)"
        )
    state = folder / "state.json"
    if state.is_file():
        entries = mf.read_model_json(state, dict).get("_data_files")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ModelFileError(f'{state}: _data_files must be a list of {{"filename": ...}} objects')
        for i, entry in enumerate(entries):
            mf.inside(folder, entry.get("filename"), source=state, field=f"_data_files[{i}].filename")
    if (folder / "README.md").is_file():
        for field, name in _card_files(folder / "README.md"):
            mf.inside(folder, name, source=folder / "README.md", field=field)
    return folder
