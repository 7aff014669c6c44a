"""Atomic writes: a file is either the old one or the complete new one, never half-written. (A
``tempfile`` + ``os.replace`` idiom: no package would add anything but a dependency.)"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "fsync_directory", "remove_stale_temporaries", "temporary_name", "write_json"]

#: ``.<name>.<random>.<pid>@<host>.tmp`` (the random part is absent in names of older versions)
_TEMPORARY = re.compile(r"^\..+\.(\d+)@(.+)\.tmp$")


def temporary_name(target: str | os.PathLike) -> Path:
    """Create a hidden sibling ``.<name>.<random>.<pid>@<host>.tmp`` of ``target`` (same directory: the
    rename is atomic; pid and host tell a killed writer's leftovers from a running writer's file)."""
    target = Path(target)
    fd, name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=f".{os.getpid()}@{socket.gethostname()}.tmp", dir=target.parent
    )
    os.close(fd)
    return Path(name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Delete (and return) the temporary files in ``directory`` of this host's writers that no longer run;
    other hosts' files (a shared disk) are kept."""
    removed = []
    host = socket.gethostname()
    for tmp in sorted(Path(directory).glob(".*.tmp")):
        match = _TEMPORARY.match(tmp.name)
        if match is None or match.group(2) != host or _alive(int(match.group(1))):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename inside ``directory`` durable (no-op where directories cannot be opened)."""
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8", durable: bool = False
) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on success it replaces ``path`` in one step, on an
    exception it is removed. Its directory is created; the file gets ``0o666`` minus the umask (not
    ``mkstemp``'s ``0o600``); ``durable``: fsync the file and its directory (checkpoints)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(target)
    umask = os.umask(0)
    os.umask(umask)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(target.parent)


def write_json(path: str | os.PathLike[str], data: object) -> None:
    """``data`` as indented JSON, written atomically."""
    with atomic_write(path) as fh:
        fh.write(json.dumps(data, indent=2) + "\n")
