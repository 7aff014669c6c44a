"""Checkpoint files checked before anything loads them (a truncated or foreign file is one line, not a
``PytorchStreamReader`` traceback) and read as data, never as code.

A checkpoint is a pickle, and unpickling may call any function the file names.
[`load_checkpoint`][unisent.io.load_checkpoint], the one place unisent reads one, uses
``torch.load(weights_only=True)``, which refuses every global but tensors, plain containers and registered safe types
*before* calling anything; a refused file is one [`UnsafeCheckpointError`][unisent.io.UnsafeCheckpointError] naming the
globals and ``unisent convert-checkpoint FILE --trust``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = [
    "CheckpointError",
    "UnsafeCheckpointError",
    "check_checkpoint",
    "convert_checkpoint",
    "load_checkpoint",
    "numpy_safe_globals",
    "unsafe_globals",
]


class CheckpointError(ValueError):
    """A checkpoint file is truncated or not a PyTorch checkpoint (checked before ``torch.load``)."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint holds Python objects other than tensors and plain data: loading it would run code
    named by the file. Nothing in it was run."""


def check_checkpoint(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` is a complete PyTorch checkpoint (a zip archive with its central directory) before anything
    loads it: a ``FileNotFoundError``, or a [`CheckpointError`][unisent.io.CheckpointError] when truncated."""
    import zipfile

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint {str(path)!r} does not exist"
            if not path.is_dir()
            else f"checkpoint {str(path)!r} is a directory; give the .ckpt file"
        )
    size = path.stat().st_size
    if not zipfile.is_zipfile(path):
        # names files, not an option: each command takes the file its own way
        others = sorted(p.name for p in path.parent.glob("*.ckpt") if p.name != path.name and p.is_file())
        another = f"another file of {path.parent}: {', '.join(others[:5])}" if others else "an earlier checkpoint"
        raise CheckpointError(
            f"checkpoint {path} ({size} bytes) is truncated or not a PyTorch checkpoint; copy it again, "
            f"or pick {another}"
        )
    return path


def unsafe_globals(path: str | os.PathLike) -> list[str]:
    """The globals (``module.name``) checkpoint ``path`` asks for beyond plain data and the registered safe
    types, scanned from the pickle's opcodes; empty when none (or the scan fails)."""
    import torch

    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # noqa: BLE001 - a scan that fails names nothing; the load itself reports the file
        return []


def load_checkpoint(path: str | os.PathLike[str], *, map_location: str = "cpu", mmap: bool = False) -> dict[str, Any]:
    """Read checkpoint ``path`` as data: [`check_checkpoint`][unisent.io.check_checkpoint], then
    ``torch.load(weights_only=True)`` (``mmap``: the step counters without the weights). An
    [`UnsafeCheckpointError`][unisent.io.UnsafeCheckpointError] when the file names a global other than plain data
    (nothing in it was called), else a [`CheckpointError`][unisent.io.CheckpointError]."""
    import pickle

    import torch

    path = check_checkpoint(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        names = unsafe_globals(path)
        if names:
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            raise UnsafeCheckpointError(
                f"checkpoint {path} holds Python objects that are not plain data ({shown}): loading it would "
                "run code from the file, so nothing in it was loaded; if you trust where it came from, convert "
                f"it once with: unisent convert-checkpoint {path} --trust"
            ) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {path} could not be read as data ({first[:200]})") from None
    except (RuntimeError, EOFError, ValueError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {path} could not be read as a PyTorch checkpoint ({type(err).__name__}: "
            f"{first[:200]}); copy it again, or pick another one"
        ) from err


def _plain(value: object, where: str) -> object:
    """``value`` as tensors and plain containers (dataclasses and namespaces as dicts, NumPy as tensors and
    numbers); anything else is a ``ValueError`` naming ``where``, its key path."""
    import dataclasses
    import enum
    from collections import OrderedDict
    from pathlib import PurePath

    import numpy as np
    import torch

    plain_types = (bool, int, float, complex, str, bytes, torch.Tensor, torch.Size, torch.dtype, torch.device)
    if value is None or isinstance(value, plain_types):  # (an IntEnum, an int, is kept as it is)
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, where)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif type(value).__name__ == "Namespace" and hasattr(value, "__dict__"):  # argparse's, jsonargparse's
        value = dict(vars(value))
    if isinstance(value, dict):
        out = {str(k) if not isinstance(k, (int, str)) else k: _plain(v, f"{where}.{k}") for k, v in value.items()}
        return OrderedDict(out) if isinstance(value, OrderedDict) else out
    if isinstance(value, (list, tuple, set)):
        items = [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    raise ValueError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which has no plain-data form; "
        "the checkpoint cannot be converted"
    )


def numpy_safe_globals() -> list:
    """The NumPy globals an array or scalar pickles through, to allow by name where a file may hold them."""
    import numpy as np

    core: Any = getattr(np, "_core", None) or np.core  # NumPy 2 or 1: neither stub declares multiarray
    found = [np.ndarray, np.dtype, core.multiarray._reconstruct, core.multiarray.scalar]
    return found + [type(np.dtype(code)) for code in "?bhilqBHILQefdgFDG"]


def _allowed_for_conversion(path: Path, names: list[str]) -> list:
    """The classes the file names and NumPy's reconstructors; a function (``posix.system``) is refused even
    for a trusted file: calling it is all the pickle would do with it."""
    from .imports import import_object

    numpy_names = {f"{o.__module__}.{o.__qualname__}": o for o in numpy_safe_globals()}
    allowed, refused = [], []
    for name in names:
        if name in numpy_names:
            allowed.append(numpy_names[name])
            continue
        try:
            found = import_object(name, "global")
        except ValueError:
            found = None
        (allowed if isinstance(found, type) else refused).append(found if isinstance(found, type) else name)
    if refused:
        raise UnsafeCheckpointError(
            f"checkpoint {path} names {', '.join(refused)}, which is not a class: unpickling would call it; "
            "it is not converted, even with unisent convert-checkpoint --trust"
        )
    return allowed


def convert_checkpoint(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Rewrite a checkpoint the user trusts as plain data, so that [`load_checkpoint`][unisent.io.load_checkpoint] reads
    it.

    The classes the file names are allowed by name (a function is an
    [`UnsafeCheckpointError`][unisent.io.UnsafeCheckpointError]); building them runs their own code, so call it only for
    a file you trust. An object without a plain-data form is a ``ValueError`` naming its key path. The result is checked
    before it replaces ``out``.
    """
    import io

    import torch

    from .files import atomic_write

    path = check_checkpoint(source)
    with torch.serialization.safe_globals(_allowed_for_conversion(path, unsafe_globals(path))):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    plain = _plain(checkpoint, "checkpoint")
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    buffer.seek(0)
    torch.load(buffer, map_location="cpu", weights_only=True)
    target = Path(out).expanduser()
    with atomic_write(target, "wb", durable=True) as handle:
        handle.write(buffer.getvalue())
    return target
