"""``unisent convert-checkpoint``: rewrite a checkpoint that you trust as plain data.

Every command reads checkpoints with ``torch.load(weights_only=True)`` (:func:`unisent.io.load_checkpoint`):
a file that names any Python object beyond tensors and plain containers is refused, because unpickling
it would run code. Checkpoints of earlier versions, or of a user's own callbacks, may hold such objects
for harmless reasons; this command reads one such file **once, on the user's word** (``--trust``), building
the classes it names (their own code runs; a *function* the file names, e.g. ``os.system``, is refused
even then), and writes a copy that holds tensors and plain data only.

Command line::

    unisent convert-checkpoint runs/old/version_0/checkpoints/last.ckpt --trust
    unisent convert-checkpoint old.ckpt --trust --out old.data.ckpt
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from .function_commands import UsageError, run_command

__all__ = ["convert_checkpoint", "main"]


def convert_checkpoint(source: str, *, trust: bool = False, out: str | None = None) -> Path:
    """Rewrite a checkpoint you trust as plain data (tensors, numbers, strings, lists, dicts).

    Reading it builds the classes the file names, which runs their code: only for a file from a source you
    trust (a function the file names is refused even then). The copy is checked by loading it as every
    unisent command does (weights_only=True).

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


def main(argv: Sequence[str]) -> None:
    run_command(convert_checkpoint, argv if argv is not None else sys.argv[1:], "unisent convert-checkpoint")
