"""JSON-lines reading shared by the data builders and the AMR tools (no heavy imports)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["json_lines"]


def json_lines(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded value)`` for each non-blank line of a JSON-lines file, read lazily.

    A line that is not valid JSON raises ``ValueError`` naming the file and the line. For files
    written by tools (builders, parsers); training data goes through
    :func:`unisent.data.read_records`, which reports every bad record at once.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
