"""``unisent convert-checkpoint OLD.ckpt --trust [--out NEW.ckpt]``: rewrite a trusted checkpoint as plain data.

Every command reads checkpoints as data only (``weights_only=True``); older checkpoints or a user's
callbacks may hold other objects for harmless reasons, which this reads once, on the user's word."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from .function_commands import UsageError, run_command

__all__ = ["convert_checkpoint", "main"]


def convert_checkpoint(source: str, *, trust: bool = False, out: str | None = None) -> Path:
    """Rewrite a checkpoint you trust as plain data (tensors, numbers, strings, lists, dicts).

    Reading it builds the classes the file names, running their code (a function it names is refused even
    then). The copy is checked by loading it as every command does (weights_only=True).

    Args:
        source: the .ckpt to convert
        trust: confirm that you trust the file (required: reading it may run code)
        out: where to write the copy (default: SOURCE with the suffix .data.ckpt, next to it)
    """
    from ..io import check_checkpoint, unsafe_globals
    from ..io import convert_checkpoint as convert

    path = check_checkpoint(source)
    names = unsafe_globals(path)
    if not trust:
        asks = f" (it names {', '.join(names[:4])})" if names else ""
        raise UsageError(
            f"reading {path} builds the objects the file names{asks}, which runs their code; convert it only if "
            "you trust where it came from, with --trust"
        )
    target = Path(out) if out else path.with_suffix(".data.ckpt")
    if target.resolve() == path.resolve():
        raise UsageError(f"--out {target} is the source itself; give another file")
    written = convert(path, target)
    print(f"unisent convert-checkpoint: wrote {written} (plain data; {len(names)} object type(s) converted)")
    return written


main = partial(run_command, convert_checkpoint, prog="unisent convert-checkpoint")
