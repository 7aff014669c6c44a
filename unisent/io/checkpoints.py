"""Checkpoint files checked before anything loads them, so that a truncated or foreign file is one
line, not a ``PytorchStreamReader`` traceback, and read as data, never as code.

A checkpoint is a pickle, and unpickling may call any function the file names (``os.system`` among
them). :func:`load_checkpoint` is the one place unisent reads a checkpoint: ``torch.load(...,
weights_only=True)``, PyTorch's restricted unpickler, which builds tensors and plain containers (and the
few dataclasses registered with ``torch.serialization.add_safe_globals``) and refuses every other global
*before* calling anything. A refused file is one :class:`UnsafeCheckpointError` that names the globals
it asks for (read by ``torch.serialization.get_unsafe_globals_in_checkpoint``, which only scans the
pickle) and the command that converts it, ``unisent convert-checkpoint FILE --trust``, for a file the
user trusts.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def check_checkpoint(path: str | os.PathLike) -> Path:
    """Check that ``path`` is a complete PyTorch checkpoint file (a zip archive with its central
    directory, as ``torch.save`` writes it) before anything loads it, so that a truncated copy is
    reported in one line instead of a ``PytorchStreamReader`` traceback.

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: the file is truncated or not a checkpoint.
    """
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
        # (names files, not an option: export, evaluate, load and fit each take the file their own way)
        others = sorted(p.name for p in path.parent.glob("*.ckpt") if p.name != path.name and p.is_file())
        another = f"another file of {path.parent}: {', '.join(others[:5])}" if others else "an earlier checkpoint"
        raise CheckpointError(
            f"checkpoint {path} ({size} bytes) is truncated or not a PyTorch checkpoint; copy it again, "
            f"or pick {another}"
        )
    return path


def unsafe_globals(path: str | os.PathLike) -> list[str]:
    """The Python globals (``module.name``) that checkpoint ``path`` asks the unpickler for beyond
    tensors, plain containers and the registered safe types; read from the pickle's opcodes, nothing is
    called. Empty when there are none (or the file cannot be scanned)."""
    import torch

    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # noqa: BLE001 - a scan that fails names nothing; the load itself reports the file
        return []


def load_checkpoint(path: str | os.PathLike, *, map_location: str = "cpu", mmap: bool = False) -> dict:
    """Read checkpoint ``path`` as data: :func:`check_checkpoint`, then ``torch.load(weights_only=True)``.

    Args:
        path: the ``.ckpt`` (or any ``torch.save`` file).
        map_location: where tensors go.
        mmap: map the file instead of reading it (for the step counters without the weights).

    Raises:
        FileNotFoundError: no such file.
        UnsafeCheckpointError: the file names a Python global other than plain data (it would run code):
            refused before anything in it is called; the message names the globals and the command that
            converts a trusted file.
        CheckpointError: truncated, not a PyTorch checkpoint, or unreadable.
    """
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
    """``value`` as tensors and plain containers: dataclasses and namespaces as dicts, paths as strings,
    NumPy arrays as tensors and NumPy scalars as numbers; anything else is a ``ValueError`` naming
    ``where`` (the key path in the checkpoint)."""
    import dataclasses
    import enum
    from collections import OrderedDict
    from pathlib import PurePath

    import numpy as np
    import torch

    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, where)
    if isinstance(value, (torch.Tensor, torch.Size, torch.dtype, torch.device)):
        return value
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
    """The NumPy globals an array or scalar pickles through (its reconstructor, ``ndarray``, the dtype
    classes): allowed by name where a file may hold NumPy values, as tensors' are by default."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    found = [np.ndarray, np.dtype, core.multiarray._reconstruct, core.multiarray.scalar]
    return found + [type(np.dtype(code)) for code in "?bhilqBHILQefdgFDG"]


def _allowed_for_conversion(path: Path, names: list[str]) -> list:
    """What the converter lets the unpickler build: the classes the file names (a class is built from its
    own pickled state) and NumPy's reconstructors; a function (``posix.system``, ``builtins.eval``) is
    refused even for a trusted file, because calling it is all the pickle would do with it."""
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
    """Rewrite a checkpoint the user trusts as plain data, so that :func:`load_checkpoint` reads it.

    The file is read with ``weights_only=True`` and, allowed by name, the classes it names (and NumPy's
    reconstructors); a function it names is refused (:func:`_allowed_for_conversion`). Building those
    classes runs their own code (constructors, ``__setstate__``): call it only for a file you trust. The
    result holds tensors and plain containers only (see :func:`_plain`) and is checked by loading it
    with ``weights_only=True`` before it replaces ``out``.

    Raises:
        FileNotFoundError, CheckpointError: as :func:`check_checkpoint`.
        UnsafeCheckpointError: the file names a function.
        ValueError: an object without a plain-data form (named by its key path).
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
    torch.load(buffer, map_location="cpu", weights_only=True)  # what every reader of unisent does
    target = Path(out).expanduser()
    with atomic_write(target, "wb", encoding=None, durable=True) as handle:
        handle.write(buffer.getvalue())
    return target
