"""One I/O layer: dotted-path imports, atomic writes and (below) the record iterator.

Every module of unisent that imports a class named in a config, writes a file that must never be
seen half-written, or reads training/evaluation/export records goes through this module, so that
the error messages, the temp-file naming and the streaming behaviour are the same everywhere.

Why not a library: Lightning's ``instantiate_class`` builds an object from ``{"class_path",
"init_args"}`` (used by :func:`instantiate`) but does not resolve a bare class (needed for
registries and model cards); ``import_object`` is its four lines. Atomic replace is a
``tempfile`` + ``os.replace`` idiom for which no maintained package adds anything but a dependency.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "fsync_directory", "import_object", "instantiate", "temporary_name"]


def import_object(path: str, what: str = "class") -> Any:
    """``"pkg.mod.Name"`` -> the object; a clear ``ValueError`` naming the path if it cannot be imported."""
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"{what} {path!r} is not a dotted path (expected 'package.module.Name')")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what} {path!r} cannot be imported: {err}") from err


def instantiate(spec: dict[str, Any]) -> Any:
    """Build an object from ``{"class_path": "pkg.mod.Class", "init_args": {...}}``."""
    return import_object(spec["class_path"])(**spec.get("init_args", {}))


def temporary_name(target: str | os.PathLike) -> Path:
    """A unique hidden sibling of ``target`` (same directory, so ``os.replace`` is atomic):
    ``.<name>.<random>.tmp``."""
    target = Path(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    return Path(name)


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename inside ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", durable: bool = False, **open_kwargs
) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on success it replaces ``path`` in one step,
    on an exception it is removed and ``path`` is untouched. The file gets the usual permissions
    (``0o666`` minus the umask), not ``mkstemp``'s ``0o600``.

    Args:
        path: the file to (re)write; its directory is created.
        mode: ``"w"`` or ``"wb"``.
        encoding: for text mode.
        durable: fsync the file and its directory (checkpoints).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(target)
    umask = os.umask(0)
    os.umask(umask)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding, **open_kwargs) as fh:
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
